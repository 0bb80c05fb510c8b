"""``clustersim validate captured``: replay the captured CPU runs on the capture machine."""

from __future__ import annotations

from pathlib import Path

import click

from simulator.progress import quiet_option, stage
from simulator.validation.commands import finish, report_folder


@click.command("captured")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder: new, empty or written by clustersim "
                   "[default: validation/traces].")
@quiet_option
def validate_captured(out):
    """Replay the captured CPU runs (validation/traces/captured/) on the capture machine.

    Replay each run from its own trace (bound 10%), predict the other link bandwidths from
    each trace (15%) and the 4-rank runs from the 2-rank traces (15%); the machine is
    calibrated from its microbenchmarks only. Writes captured.md, captured_cases.csv and
    captured.png. Exit code 0: every case passes; 3: only known misses
    (validation/known_misses.yaml) fail; 1: any other failure.
    """
    from simulator.validation.captured.calibration import traces_root
    from simulator.validation.captured.report import summary_line, write_report
    from simulator.validation.captured.validate import validate
    folder = report_folder(out, traces_root())
    stage("validate captured: replaying and predicting the captured CPU runs")
    df = validate()
    report = write_report(df, folder)
    finish(summary_line(df), df, report)


__all__ = ["validate_captured"]
