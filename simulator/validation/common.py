"""Helpers shared by the collective and training validations: the data folder, strict YAML,
``cases.yaml`` and ``measurements.csv`` reading, the report folder and Markdown tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError

from simulator.errors import ConfigError
from simulator.validation.paths import data_dir
from simulator.yamlio import read_yaml as _read_yaml

SPLITS = ("calibration", "validation")
CASES_FILE = "cases.yaml"
MEASUREMENTS_FILE = "measurements.csv"


def find_root(kind: str) -> Path:
    """``validation/<kind>`` of the repository holding ``simulator``, else of the cwd.

    :raises ConfigError: when neither has a ``cases.yaml``.
    """
    candidates = [data_dir(kind), Path.cwd() / "validation" / kind]
    for c in candidates:
        if (c / CASES_FILE).is_file():
            return c
    raise ConfigError(f"no {CASES_FILE} found in {' or '.join(map(str, candidates))}",
                      field="--root")


# ------------------------------------------------------------------------------ YAML
def read_yaml(path: Path) -> Any:
    """The YAML document at ``path`` (see :func:`simulator.yamlio.read_yaml`)."""
    return _read_yaml(path)


# --------------------------------------------------------------------- input files
class CasesFileBase(BaseModel):
    """The keys of ``cases.yaml`` besides ``cases`` (which each validation types)."""

    model_config = ConfigDict(extra="forbid")

    description: str = ""
    measurements: str = MEASUREMENTS_FILE


def read_cases_file(path: Path, model: type[BaseModel],
                    pydantic_error: Callable[[ValidationError, str], ConfigError],
                    splits) -> BaseModel:
    """``cases.yaml`` validated as ``model``; ``splits`` (or None) checked against SPLITS.

    :raises ConfigError: unreadable or malformed file (via ``pydantic_error``), unknown split.
    """
    source = str(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping with a 'cases' key", source=source)
    try:
        spec = model.model_validate(data)
    except ValidationError as exc:
        raise pydantic_error(exc, source) from None
    if splits is not None:
        bad = [s for s in splits if s not in SPLITS]
        if bad:
            raise ConfigError(f"unknown split(s) {bad}; valid: {', '.join(SPLITS)}",
                              field="splits")
    return spec


def read_measurements_csv(path: Path, required: list[str], **read_csv) -> pd.DataFrame:
    """``measurements.csv`` read with ``read_csv`` options; ``required`` columns checked.

    :raises ConfigError: unreadable file or missing columns (named).
    """
    try:
        df = pd.read_csv(path, **read_csv)
    except (OSError, pd.errors.ParserError) as exc:
        raise ConfigError(f"cannot read measurements: {exc}", source=str(path)) from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ConfigError(f"missing column(s) {', '.join(missing)}", source=str(path),
                          field=missing[0])
    return df


# --------------------------------------------------------------------------- reports
def report_dir(out_dir: Path | str) -> Path:
    """``out_dir`` created if needed.

    :raises ConfigError: when it cannot be created.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create report folder: {exc.strerror or exc}",
                          source=str(out)) from None
    return out


def format_objective(report: dict) -> str:
    """The objective before and after a fit, as one line (both calibrations use it)."""
    return (f"objective ({report['objective']}): {report['objective_start']:.5f} -> "
            f"{report['objective_fitted']:.5f} (rms log error {report['rms_log_start']:.3f}"
            f" -> {report['rms_log_fitted']:.3f})")


def md_table(df: pd.DataFrame) -> str:
    """``df`` as a Markdown table (values as ``str``)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines)
