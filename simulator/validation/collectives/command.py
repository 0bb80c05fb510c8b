"""``clustersim validate collectives``: the collective validation report, and the fit of
the collective model's calibration constants (``--calibrate``).

Imported by ``clustersim --help``: the suite's modules (pandas, the simulator) are imported
only when the command runs.
"""

from __future__ import annotations

from pathlib import Path

import click

from simulator.choices import FIDELITIES
from simulator.progress import quiet_option
from simulator.validation.commands import (checked_root, collective_cases, folder_options,
                                            gated_exit, report_folder)

LABEL = "shipped constants, simulator/data/calibration.yaml"


def title(label: str = LABEL) -> str:
    """The report's title for constants described by ``label``."""
    return f"Collective validation against A100 and H100 nccl-tests ({label})"


@click.command("collectives")
@folder_options("cases.yaml and measurements.csv", "the repository's validation/collectives",
                "validation/collectives/report")
@click.option("--fidelity", type=click.Choice(sorted(FIDELITIES)), default="flow",
              show_default=True, help="Fabric fidelity of the validation runs.")
@click.option("--calibration", "calibration", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Use the constants of this calibration YAML instead of the "
                                 "shipped simulator/data/calibration.yaml.")
@click.option("--calibrate", is_flag=True,
              help="Fit the calibration constants on the calibration tables only, print them "
                   "and the calibration error, and validate with them.")
@click.option("--write-calibration", "write_to", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="With --calibrate: write the fitted constants to this YAML.")
@click.option("--overwrite", is_flag=True, help="Let --write-calibration replace a file.")
@click.option("--split", "splits", type=click.Choice(["calibration", "validation"]),
              multiple=True, help="Only these splits (repeatable) [default: both].")
@quiet_option
def validate_collectives(root, out, fidelity, calibration, calibrate, write_to, overwrite,
                         splits):
    """Compare simulated collectives with real A100 and H100 nccl-tests tables.

    Calibration tables may be used to fit constants; validation tables are held out. Writes
    report.md, results.csv and PNG plots, and prints the per-table summary: median |busbw
    error| over sizes >= 1 MiB (threshold 10%) and median |time error| over sizes <= 64 KiB
    (threshold 30%), judged on validation tables. Exit code 0: every gated table passes;
    3: only known misses (validation/known_misses.yaml) fail; 1: any other failure.
    """
    from simulator.constants import load_constants
    from simulator.validation.collectives import calibrate as cal
    from simulator.validation.collectives import calibration_file as cf
    from simulator.validation.collectives import report as vr
    from simulator.validation.collectives import schema
    from simulator.validation.collectives import validate as vc

    root = checked_root(root, schema, write_to, calibrate, overwrite, "--write-calibration")
    out = report_folder(out, root / "report")
    constants = load_constants()
    label = LABEL
    if calibration is not None:
        constants = cf.load_calibration_file(calibration, constants)
        label = f"constants from {calibration}"
    if calibrate:
        click.echo("Fitting the calibration constants on the calibration split ...")
        constants, report = cal.calibrate(root, constants)
        click.echo(cal.format_calibration(report))
        label = "constants fitted by --calibrate"
        if write_to is not None:
            path = cf.write_calibration(constants, report, write_to, overwrite=overwrite)
            click.echo(f"wrote {path}")
        click.echo("")
    df = vc.validate(root, constants, splits=tuple(splits) or schema.SPLITS, fidelity=fidelity)
    written = vr.write_report(df, out, constants, title=title(label))
    click.echo(f"Validation with {label}, fidelity {fidelity}:")
    summary = vr.summarize(df)
    click.echo(vr.format_summary(summary))
    val = summary[summary["split"] == "validation"]
    fails = val[(val["busbw_ok"] == False) | (val["time_ok"] == False)]  # noqa: E712
    click.echo(f"gates: median |busbw err| <= {schema.BUSBW_THRESHOLD:.0%} (>= 1 MiB), median "
               f"|time err| <= {schema.TIME_THRESHOLD:.0%} (<= 64 KiB), on validation tables; "
               f"{len(fails)} of {len(val)} fail")
    click.echo(f"report: {written['report']}")
    gated_exit(collective_cases(summary))


__all__ = ["LABEL", "title", "validate_collectives"]
