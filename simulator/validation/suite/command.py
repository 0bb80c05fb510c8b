"""``clustersim validate all`` (also plain ``clustersim validate``): every suite, and
``validation/REPORT.md``."""

from __future__ import annotations

from pathlib import Path

import click

from simulator.outpaths import prepare_out_dir
from simulator.progress import quiet_option
from simulator.validation.commands import report_file
from simulator.validation.suite.runners import RUNNERS


@click.command("all")
@click.option("--only", "only", type=click.Choice(list(RUNNERS)), multiple=True,
              help="Run only these suites (repeatable) [default: all of them].")
@click.option("--workers", type=click.IntRange(min=1, max=256), default=None,
              help="Processes for the reliability trials [default: CPU count].")
@click.option("--out", "out", type=click.Path(path_type=Path), default=None,
              help="A folder (a name without extension) for REPORT.md and each suite's "
                   "report (in <suite>/), or a file such as R.md for the summary (the "
                   "suites' reports beside it); nothing is then written into validation/ "
                   "[default: validation/REPORT.md and each suite's folder there].")
@click.option("--overwrite", is_flag=True, help="Let --out replace a file.")
@quiet_option
def validate_all(only=(), workers=None, out=None, overwrite=False):
    """Run every validation of the project and write validation/REPORT.md.

    Suites: collectives (A100 nccl-tests), training (published A100 throughput), traces
    (the A100 DDP trace), captured (the captured CPU runs: replay, what-if, scaling), gpu
    (single-GPU H200 runs: generated and replayed steps), parallel (Megatron on Selene:
    memory and iteration times; NeMo on H100) and reliability (Daly, Meta RSC-1, Llama 3);
    each also writes its own report. A case out
    of its bound is a known miss only if validation/known_misses.yaml records it. Exit code
    0: every gated case passes; 3: only known misses are out of bound; 1: a FAIL (out of
    bound, not recorded) or an XPASS (recorded, now within bound).
    """
    from simulator.validation.paths import IN_CHECKOUT, WHEEL_REPORTS
    from simulator.validation.suite.run import format_summary, run_all
    if out is None and not IN_CHECKOUT:          # a wheel: never into the installed package
        out = WHEEL_REPORTS
    if out is not None and (out.is_dir() or not out.suffix):     # a folder
        out = prepare_out_dir(out) / "REPORT.md"
    out = report_file(out, overwrite)
    df, code, report = run_all(tuple(only) or tuple(RUNNERS), workers, out, echo=click.echo)
    click.echo(format_summary(df, code))
    for r in df[df.status.isin(["FAIL", "XPASS"])].itertuples(index=False):
        click.echo(f"{r.status}: {r.case}: {r.result} (bound {r.bound})", err=True)
    click.echo(f"report: {report}")
    if code:
        raise click.exceptions.Exit(code)


__all__ = ["validate_all"]
