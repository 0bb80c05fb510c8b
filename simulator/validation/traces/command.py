"""``clustersim validate traces``: replay the committed real traces (validation/traces/)."""

from __future__ import annotations


import click

from simulator.validation.commands import folder_options, report_folder


@click.command("traces")
@folder_options("the traces (a100/nccl_data.json.gz)", "the repository's validation/traces",
                "the --root folder")
def validate_traces(root, out):
    """Replay real profiler traces and compare with what they recorded.

    The A100 DDP trace (2 ranks, NCCL): each NCCL kernel's simulated vs recorded duration,
    and the step time. Gate: step time |error| <= 10% on the steady-state step. Writes
    report.md, CSVs and a PNG; exits non-zero when the gate fails.
    """
    from simulator.errors import ConfigError
    from simulator.validation.traces import validate as vt
    from simulator.validation.traces.report import format_summary, write_report

    root = root if root is not None else vt.default_root()
    if not (root / vt.TRACE).is_file():
        raise ConfigError(f"no {vt.TRACE} in {root}", source="--root")
    folder = report_folder(out, root)           # refused before the replay, not after
    results = vt.validate(root)
    report = write_report(results, folder)
    click.echo(format_summary(results))
    click.echo(f"report: {report}")
    if not vt.summarize(results)["step_ok"]:
        raise click.exceptions.Exit(1)
