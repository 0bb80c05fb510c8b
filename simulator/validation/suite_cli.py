"""``clustersim validate all`` (also plain ``clustersim validate``) and
``clustersim validate captured``."""

from __future__ import annotations

from pathlib import Path

import click

from .suite_runs import RUNNERS


@click.command("all")
@click.option("--only", "only", type=click.Choice(list(RUNNERS)), multiple=True,
              help="Run only these suites (repeatable) [default: all of them].")
@click.option("--workers", type=click.IntRange(min=1, max=256), default=None,
              help="Processes for the reliability trials [default: CPU count].")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The summary report [default: validation/REPORT.md].")
def validate_all(only=(), workers=None, out=None):
    """Run every validation of the project and write validation/REPORT.md.

    Suites: collectives (A100 nccl-tests), training (published A100 throughput), traces
    (the A100 DDP trace), captured (the captured CPU runs: replay, what-if, scaling), gpu
    (single-GPU H200 runs: generated and replayed steps) and reliability (Daly, Meta RSC-1,
    Llama 3); each also writes its own report. A case out
    of its bound is a known miss only if validation/known_misses.yaml records it. Exit code
    0: every gated case passes; 3: only known misses are out of bound; 1: a FAIL (out of
    bound, not recorded) or an XPASS (recorded, now within bound).
    """
    from .suite import format_summary, run_all
    df, code, report = run_all(tuple(only) or tuple(RUNNERS), workers, out, echo=click.echo)
    click.echo(format_summary(df, code))
    for r in df[df.status.isin(["FAIL", "XPASS"])].itertuples(index=False):
        click.echo(f"{r.status}: {r.case}: {r.result} (bound {r.bound})", err=True)
    click.echo(f"report: {report}")
    if code:
        raise click.exceptions.Exit(code)


@click.command("captured")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder [default: validation/traces].")
def validate_captured(out):
    """Replay the captured CPU runs (validation/traces/captured/) on the capture machine.

    Replay each run from its own trace (bound 10%), predict the other link bandwidths from
    each trace (15%) and the 4-rank runs from the 2-rank traces (15%); the machine is
    calibrated from its microbenchmarks only. Writes captured.md, captured_cases.csv and
    captured.png. Exit code as `clustersim validate`: 0, 3 (only known misses), 1.
    """
    from . import captured as vc
    from .captured_report import summary_line, write_report
    df = vc.validate()
    report = write_report(df, out if out is not None else vc.traces_root())
    _finish(summary_line(df), df, report)


@click.command("gpu")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder [default: validation/gpu].")
def validate_gpu(out):
    """Single-GPU runs measured on an H200 (validation/gpu/), a GPU no constant was fitted on.

    Generated: the simulator's own model of each job (A100-calibrated constants) against the
    measured median step (bound 15%). Replay: each profiled step imported and replayed
    against the step it recorded (bound 10%). Writes report.md, results.csv and classes.csv
    (recorded kernel vs simulated op time per class). Exit code as `clustersim validate`.
    """
    from . import gpu as vg
    from .gpu_report import summary_line, write_report
    results = vg.validate()
    report = write_report(results, out)
    _finish(summary_line(results), results["cases"], report)


def _finish(summary: str, cases, report: Path) -> None:
    """Print the summary, every case not passing (columns case, ok, error, bound) and the
    report; exit with :func:`.known_misses.exit_code`."""
    from . import known_misses as km
    click.echo(summary)
    status = km.with_status(cases)
    for r in status[status.status != "pass"].itertuples(index=False):
        click.echo(f"{r.status}: {r.case}: {100 * r.error:+.1f}% (bound {r.bound:.0%})")
    click.echo(f"report: {report}")
    code = km.exit_code(status.status)
    if code:
        raise click.exceptions.Exit(code)


__all__ = ["validate_all", "validate_captured", "validate_gpu"]
