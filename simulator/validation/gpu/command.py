"""``clustersim validate gpu``: the single-GPU H200 runs, generated and replayed."""

from __future__ import annotations

from pathlib import Path

import click

from simulator.progress import quiet_option, stage
from simulator.validation.commands import finish, report_folder


@click.command("gpu")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder: new, empty or written by clustersim "
                   "[default: validation/gpu].")
@quiet_option
def validate_gpu(out):
    """Single-GPU runs measured on an H200 (validation/gpu/), a GPU no constant was fitted on.

    Generated: the simulator's own model of each job (A100-calibrated constants) against the
    measured median step (bound 15%). Replay: each profiled step imported and replayed
    against the step it recorded (bound 10%). Writes report.md, results.csv and classes.csv
    (recorded kernel vs simulated op time per class). Exit code 0: every case passes; 3:
    only known misses (validation/known_misses.yaml) fail; 1: any other failure.
    """
    from simulator.validation.gpu.report import summary_line, write_report
    from simulator.validation.gpu.validate import default_root, validate
    folder = report_folder(out, default_root())
    stage("validate gpu: simulating and replaying the H200 steps")
    results = validate()
    report = write_report(results, folder)
    finish(summary_line(results), results["cases"], report)


__all__ = ["validate_gpu"]
