"""``clustersim validate traces``: replay the committed real traces (validation/traces/)."""

from __future__ import annotations

import click

from simulator.progress import quiet_option, stage
from simulator.validation.commands import folder_options, gated_exit, report_folder, trace_cases


@click.command("traces")
@folder_options("the traces (a100/nccl_data.json.gz)", "the repository's validation/traces",
                "the --root folder")
@quiet_option
def validate_traces(root, out):
    """Replay real profiler traces and compare with what they recorded.

    The A100 DDP trace (2 ranks, NCCL): each NCCL kernel's simulated vs recorded duration,
    and the step time. Gate: step time |error| <= 10% on the steady-state step. Writes
    report.md, CSVs and a PNG. Exit code 0: every gated case passes; 3: only known misses
    (validation/known_misses.yaml) fail; 1: any other failure.
    """
    from simulator.errors import ConfigError
    from simulator.validation.traces import validate as vt
    from simulator.validation.traces.report import format_summary, write_report

    given, root = root is not None, root if root is not None else vt.default_root()
    if not (root / vt.TRACE).is_file():
        raise ConfigError(f"no {vt.TRACE} in {root}" if given else
                          f"the validation data are not installed (no {vt.TRACE} in {root})",
                          source="--root" if given else "validate traces")
    folder = report_folder(out, root)           # refused before the replay, not after
    stage("validate traces: importing and replaying the A100 trace")
    results = vt.validate(root)
    report = write_report(results, folder)
    click.echo(format_summary(results))
    click.echo(f"report: {report}")
    gated_exit(trace_cases(results))
