"""``clustersim validate collectives`` and ``clustersim validate training``: the validation
reports, and the calibration fits.

The CLI author attaches them with :func:`register`::

    from simulator.validation.cli import register
    register(cli)          # adds: clustersim validate collectives|training ...

User mistakes raise :class:`~simulator.errors.ClusterSimError` subclasses, which the main
entry point prints as one line.
"""

from __future__ import annotations

from pathlib import Path

import click

from simulator.choices import FIDELITIES
from simulator.errors import ConfigError

COLLECTIVES_LABEL = "shipped constants, simulator/data/calibration.yaml"
TRAINING_LABEL = "shipped constants, simulator/data/compute.yaml"


def collectives_title(label: str = COLLECTIVES_LABEL) -> str:
    return f"Collective validation against A100 nccl-tests ({label})"


def training_title(label: str = TRAINING_LABEL) -> str:
    return f"Training validation against published A100 throughput ({label})"


@click.command("collectives")
@click.option("--root", "root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder with cases.yaml and measurements.csv "
                   "[default: the repository's validation/collectives].")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder [default: validation/collectives/report].")
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
def validate_collectives(root, out, fidelity, calibration, calibrate, write_to, overwrite,
                         splits):
    """Compare simulated collectives with real A100 nccl-tests tables.

    Calibration tables may be used to fit constants; validation tables are held out. Writes
    report.md, results.csv and PNG plots, and prints the per-table summary: median |busbw
    error| over sizes >= 1 MiB (threshold 10%) and median |time error| over sizes <= 64 KiB
    (threshold 30%), judged on validation tables.
    """
    from simulator.collectives.constants import load_constants
    from simulator.validation import calibrate as cal
    from simulator.validation import collectives as vc

    root = _checked_root(root, vc, write_to, calibrate, overwrite, "--write-calibration")
    constants = load_constants()
    label = COLLECTIVES_LABEL
    if calibration is not None:
        constants = cal.load_calibration_file(calibration, constants)
        label = f"constants from {calibration}"
    if calibrate:
        click.echo("Fitting the calibration constants on the calibration split ...")
        constants, report = cal.calibrate(root, constants)
        click.echo(cal.format_calibration(report))
        label = "constants fitted by --calibrate"
        if write_to is not None:
            path = cal.write_calibration(constants, report, write_to, overwrite=overwrite)
            click.echo(f"wrote {path}")
        click.echo("")
    df = vc.validate(root, constants, splits=tuple(splits) or vc.SPLITS, fidelity=fidelity)
    out = out if out is not None else root / "report"
    written = vc.write_report(df, out, constants, title=collectives_title(label))
    click.echo(f"Validation with {label}, fidelity {fidelity}:")
    summary = vc.summarize(df)
    click.echo(vc.format_summary(summary))
    val = summary[summary["split"] == "validation"]
    fails = val[(val["busbw_ok"] == False) | (val["time_ok"] == False)]  # noqa: E712
    click.echo(f"gates: median |busbw err| <= {vc.BUSBW_THRESHOLD:.0%} (>= 1 MiB), median "
               f"|time err| <= {vc.TIME_THRESHOLD:.0%} (<= 64 KiB), on validation tables; "
               f"{len(fails)} of {len(val)} fail")
    click.echo(f"report: {written['report']}")


def _checked_root(root, module, write_to, calibrate: bool, overwrite: bool, option: str):
    """The validation folder to use, after checking the write options.

    :raises ConfigError: ``option`` without --calibrate, an existing file without
        --overwrite, or a folder without ``module.CASES_FILE``.
    """
    if write_to is not None and not calibrate:
        raise ConfigError("needs --calibrate (it writes the fitted constants)", source=option)
    if write_to is not None and write_to.exists() and not overwrite:
        raise ConfigError("file exists; refusing to overwrite it (add --overwrite)",
                          source=str(write_to), field=option)
    root = root if root is not None else module.default_root()
    if not (root / module.CASES_FILE).is_file():
        raise ConfigError(f"no {module.CASES_FILE} in {root}", source="--root")
    return root


@click.command("training")
@click.option("--root", "root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder with cases.yaml and measurements.csv "
                   "[default: the repository's validation/training].")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder [default: validation/training/report].")
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
def validate_training(root, out, compute_file, calibrate, write_to, overwrite, max_evals,
                      splits):
    """Compare simulated training throughput with published A100 runs.

    DeepLearningExamples ResNet-50 and BERT-large (1 and 8 GPUs) and the PyTorch FSDP blog's
    GPT 175B / 1T. Calibration cases may be used to fit compute constants; validation cases
    are held out. Writes report.md, results.csv and a PNG, and prints per-case errors. Gate
    on validation cases: |throughput error| <= 15%, |scaling efficiency error| <= 5 points.
    """
    from simulator.compute.model import load_compute_calibration
    from simulator.validation import training as vt
    from simulator.validation import training_calibrate as tc

    root = _checked_root(root, vt, write_to, calibrate, overwrite, "--write-fitted")
    calibration = None
    label = TRAINING_LABEL
    if compute_file is not None:
        calibration = load_compute_calibration(compute_file)
        label = f"compute constants from {compute_file}"
    if calibrate:
        click.echo("Fitting compute eff_max on the calibration cases ...")
        calibration, report = tc.calibrate(root, calibration, max_evals=max_evals)
        click.echo(tc.format_calibration(report))
        label = "compute constants fitted by --calibrate"
        if write_to is not None:
            path = tc.write_fitted(calibration, report, write_to, overwrite=overwrite)
            click.echo(f"wrote {path}")
        click.echo("")
    df = vt.validate(root, calibration, splits=tuple(splits) or vt.SPLITS)
    out = out if out is not None else root / "report"
    written = vt.write_report(df, out, title=training_title(label))
    click.echo(f"Validation with {label}:")
    click.echo(vt.format_summary(df))
    click.echo(f"report: {written['report']}")


def register(group: click.Group) -> click.Group:
    """Add ``validate collectives|training|traces|captured|gpu|all`` to ``group`` (creating the
    ``validate`` subgroup if the group has none; without a subcommand it runs ``all``);
    returns the ``validate`` group."""
    from simulator.validation.suite_cli import validate_all, validate_captured, validate_gpu
    from simulator.validation.traces_cli import validate_traces
    commands = {"collectives": validate_collectives, "training": validate_training,
                "traces": validate_traces, "captured": validate_captured, "gpu": validate_gpu,
                "all": validate_all}
    existing = group.commands.get("validate")
    if isinstance(existing, click.Group):
        for name, cmd in commands.items():
            existing.add_command(cmd, name)
        return existing

    @group.group("validate", invoke_without_command=True)
    @click.pass_context
    def validate(ctx):
        """Compare the simulator with real measurements; without a subcommand, run every
        validation (``validate all``) and write validation/REPORT.md."""
        if ctx.invoked_subcommand is None:
            ctx.invoke(validate_all)

    for name, cmd in commands.items():
        validate.add_command(cmd, name)
    return validate


__all__ = ["collectives_title", "register", "training_title", "validate_collectives",
           "validate_training"]
