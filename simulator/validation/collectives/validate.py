"""Compare simulated collectives with real A100 and H100 nccl-tests measurements.

The data live in ``validation/collectives/`` (repository root):

* ``measurements.csv``: one row per measured size, normalised from
  ``shared/validation-data/nccl-tests`` (see :func:`.data.build_measurements`); every row keeps
  its ``source``. Measured values are copied, never edited; a value computed from another
  (Azure's summary gives time *or* busbw) is named in the ``derived`` column.
* ``cases.yaml``: per ``table_id``, how to simulate it (topology, overrides, ranks, op) and
  its ``split``: ``calibration`` tables may be used to fit constants
  (:mod:`.calibrate`), ``validation`` tables never are.

Accuracy is judged per validation table: median |busbw error| over sizes >= 1 MiB must be
<= :data:`BUSBW_THRESHOLD`, median |time error| over sizes <= 64 KiB <= :data:`TIME_THRESHOLD`.

This module reads the files and runs the validation; the pieces live in
``schema`` (constants, ``cases.yaml`` schema), ``cases`` (one case
from its entry), ``sim`` (simulation), ``report`` (summary and
report), ``plots`` and ``data`` (:func:`.data.build_measurements`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator import progress
from simulator.constants import ModelConstants, load_constants
from simulator.errors import ConfigError
from simulator.validation.collectives.cases import build_case
from simulator.validation.collectives.fitted import calibrated_values
from simulator.validation.collectives.schema import (_REQUIRED, CASES_FILE, MEASUREMENTS_FILE,
                                                     OP_NAMES, RESULT_COLUMNS, SPLITS, Case,
                                                     CasesFile, _pydantic_error, default_root)
from simulator.validation.collectives.sim import simulate_rows
from simulator.validation.common import read_cases_file, read_measurements_csv


def load_measurements(root: Path | str | None = None, table_ids=None,
                      filename: str = MEASUREMENTS_FILE) -> pd.DataFrame:
    """Rows of ``measurements.csv``, only those of ``table_ids`` when given.

    :raises ConfigError: unreadable file or missing columns (named).
    """
    root = Path(root) if root is not None else default_root()
    path = root / filename
    df = read_measurements_csv(path, _REQUIRED, dtype={"derived": str}, keep_default_na=True)
    if table_ids is not None:
        keep = set(table_ids)
        df = df[df["table_id"].isin(keep)]
    df = df.copy()
    df["derived"] = df.get("derived", pd.Series("", index=df.index)).fillna("")
    if "quality" not in df.columns:
        df["quality"] = ""
    df["quality"] = df["quality"].fillna("")
    unknown = sorted(set(df["collective"]) - set(OP_NAMES))
    if unknown:
        raise ConfigError(f"unknown collective(s) {', '.join(unknown)}", source=str(path),
                          field="collective")
    df["op"] = df["collective"].map(OP_NAMES)
    return df.reset_index(drop=True)


def load_cases(root: Path | str | None = None, splits=None,
               read_measurements=None) -> list[Case]:
    """Cases of ``<root>/cases.yaml`` with their graphs built and measurements attached.

    ``splits`` (e.g. ``("calibration",)``) keeps only those cases; only their measurement
    rows are read. With all splits, every table of ``measurements.csv`` must have a case and
    every case must have measurements. ``read_measurements`` (default
    :func:`load_measurements`) reads them.

    :raises ConfigError: naming ``cases.yaml`` (or ``measurements.csv``) and the dotted field:
        unknown keys, unknown topology, bad overrides, ranks out of range, an op that does
        not match the measured collective, a rank/node count that does not match the table.
    """
    root = Path(root) if root is not None else default_root()
    path = root / CASES_FILE
    source = str(path)
    spec = read_cases_file(path, CasesFile, _pydantic_error, splits)
    wanted = {tid: c for tid, c in spec.cases.items() if splits is None or c.split in splits}
    read = read_measurements or load_measurements
    meas = read(root, table_ids=None if splits is None else wanted, filename=spec.measurements)
    meas_source = str(root / spec.measurements)
    if splits is None:
        orphans = sorted(set(meas["table_id"]) - set(spec.cases))
        if orphans:
            raise ConfigError(f"table(s) {', '.join(orphans)} have no entry in {source}",
                              source=meas_source, field="table_id")
    return [build_case(tid, c, meas, source, meas_source) for tid, c in wanted.items()]


def simulate_case(case: Case, constants: ModelConstants | None = None,
                  fidelity: str = "flow") -> pd.DataFrame:
    """One row per measured size: measured and simulated time/busbw, errors (sim-meas)/meas."""
    k = constants or load_constants()
    try:
        rows = simulate_rows(case, k, fidelity)
    except KeyError as exc:                       # unknown fidelity from make_fabric
        raise ConfigError(str(exc.args[0]) if exc.args else str(exc),
                          field="--fidelity") from None
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def validate(root: Path | str | None = None, constants: ModelConstants | None = None,
             splits=SPLITS, fidelity: str = "flow") -> pd.DataFrame:
    """Simulate every case of the given splits; all rows in one DataFrame.

    ``df.attrs`` records the constants used (``calibrated``: the four fitted values) and the
    fidelity, for the report.
    """
    k = constants or load_constants()
    cases = load_cases(root, splits=None if tuple(splits) == SPLITS else tuple(splits))
    frames = [simulate_case(c, k, fidelity)
              for c in progress.track(cases, len(cases), "validate collectives", "table")]
    df = pd.concat(frames, ignore_index=True) if frames else \
        pd.DataFrame(columns=RESULT_COLUMNS)
    df.attrs["fidelity"] = fidelity
    df.attrs["constants"] = calibrated_values(k)
    df.attrs["notes"] = {c.table_id: c.notes for c in cases}
    return df


__all__ = ["load_cases", "load_measurements", "simulate_case", "validate"]
