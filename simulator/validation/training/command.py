"""``clustersim validate training``: the training validation report, and the fit of the
compute model's convolution efficiencies (``--calibrate``).

Imported by ``clustersim --help``: the suite's modules (pandas, the simulator) are imported
only when the command runs.
"""

from __future__ import annotations

from pathlib import Path

import click

from simulator.progress import quiet_option, stage
from simulator.validation.commands import (checked_root, folder_options, gated_exit,
                                            report_folder, training_cases)

LABEL = "shipped constants, simulator/data/compute.yaml"


def title(label: str = LABEL) -> str:
    """The report's title for constants described by ``label``."""
    return f"Training validation against published A100 throughput ({label})"


@click.command("training")
@folder_options("cases.yaml and measurements.csv", "the repository's validation/training",
                "validation/training/report")
@click.option("--compute", "compute_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Use the constants of this compute YAML instead of the "
                                 "shipped simulator/data/compute.yaml.")
@click.option("--calibrate", is_flag=True,
              help="Fit the tensor-core eff_max of convolutions (fp16/bf16, tf32) on the "
                   "calibration cases only, print them and the calibration error, and "
                   "validate with them.")
@click.option("--write-fitted", "write_to", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="With --calibrate: write the fitted constants to this "
                                 "compute YAML (an existing file only with --overwrite).")
@click.option("--overwrite", is_flag=True, help="Let --write-fitted replace a file.")
@click.option("--max-evals", type=click.IntRange(2, 10_000), default=160, show_default=True,
              help="Objective evaluations of the --calibrate fit.")
@click.option("--split", "splits", type=click.Choice(["calibration", "validation"]),
              multiple=True, help="Only these splits (repeatable) [default: both].")
@quiet_option
def validate_training(root, out, compute_file, calibrate, write_to, overwrite, max_evals,
                      splits):
    """Compare simulated training throughput with published A100 and H100 runs.

    DeepLearningExamples ResNet-50 and BERT-large (1 and 8 GPUs), the PyTorch FSDP blog's
    GPT 175B / 1T, and the FSDP tables (llm-foundry MPT 125M-70B on 8-64 H100/A100,
    torchtitan on 64 A100, torchtitan's H100/H200 benchmarks on 8-512 GPUs; split in
    split.yaml). Calibration cases may be used to fit constants; validation cases are held
    out. Writes report.md, results.csv, a PNG and fsdp_tables.md/.csv, and prints per-case
    errors. Gates on validation cases: |throughput error| <= 15%, |scaling efficiency
    error| <= 5 points; FSDP tables per GPU type (A100, H100): median |error| <= 5%, every
    row <= 15%; torchtitan's H100-500W and H200 groups: median <= 7% (from 10 rows), every
    row <= 20%; weak scaling <= 3 points.
    Exit code 0: every gated case passes; 3: only known misses (validation/known_misses.yaml)
    fail; 1: any other failure.
    """
    from simulator.compute.model import load_compute_calibration
    from simulator.validation.training import calibrate as tc
    from simulator.validation.training import report as vr
    from simulator.validation.training import schema
    from simulator.validation.training import tables_report
    from simulator.validation.training import validate as vt

    root = checked_root(root, schema, write_to, calibrate, overwrite, "--write-fitted")
    out = report_folder(out, root / "report")
    calibration = None
    label = LABEL
    if compute_file is not None:
        calibration = load_compute_calibration(compute_file)
        label = f"compute constants from {compute_file}"
    if calibrate:
        click.echo("Fitting compute eff_max on the calibration cases ...")
        stage(f"validate training: fitting ({max_evals} evaluations at most)")
        calibration, report = tc.calibrate(root, calibration, max_evals=max_evals)
        click.echo(tc.format_calibration(report))
        label = "compute constants fitted by --calibrate"
        if write_to is not None:
            path = tc.write_fitted(calibration, report, write_to, overwrite=overwrite)
            click.echo(f"wrote {path}")
        click.echo("")
    df = vt.validate(root, calibration, splits=tuple(splits) or schema.SPLITS)
    written = vr.write_report(df, out, title=title(label))
    click.echo(f"Validation with {label}:")
    click.echo(vr.format_summary(df))
    click.echo(f"report: {written['report']}")
    stage("validate training: FSDP tables (llm-foundry, torchtitan)")
    tdf, tpath, tcases = tables_report.run_and_write(out, root, calibration, splits)
    click.echo("")
    click.echo(tables_report.summary_table(tdf).to_string(index=False))
    click.echo(f"report: {tpath}")
    gated_exit(training_cases(df) + tcases)


__all__ = ["LABEL", "title", "validate_training"]
