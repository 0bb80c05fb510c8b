"""Compare simulated training iterations with published A100 training throughput.

The data live in ``validation/training/`` (repository root):

* ``measurements.csv``: one row per published number, normalised from
  ``shared/validation-data/training`` by :func:`build_measurements` (NVIDIA
  DeepLearningExamples single-node tables for PyTorch ResNet-50 v1.5 and BERT-large
  pre-training; the PyTorch FSDP blog's GPT 175B / 1T rows). Every row keeps its
  ``source`` and the string it was parsed from (``value_raw``, ``scaling_raw``). Measured
  values are parsed, never edited.
* ``cases.yaml``: per case, the scenario that reproduces the run (a shipped scenario name
  plus ``--set`` style overrides, or an inline scenario mapping), the metric compared, the
  measured value (cross-checked with ``measurements.csv``) and the ``split``. A
  ``scaling`` case compares scaling efficiency ``throughput(N GPUs) / (N x throughput(1
  GPU))`` of two other cases with the published scaling factor / N.

Errors are ``(simulated - measured) / measured`` for throughput metrics and ``simulated -
measured`` (a fraction; x100 = percentage points) for scaling efficiency. The gate, on
validation cases only: |throughput error| <= :data:`THROUGHPUT_THRESHOLD`, |scaling
efficiency error| <= :data:`SCALING_THRESHOLD`.

This module reads the files and runs the validation; the pieces live in ``schema``
(constants, ``cases.yaml`` schema), ``cases`` (checks of the cases), ``data``
(:func:`.data.build_measurements`), ``sim`` (simulation), ``report`` (summary and report),
``plots``, and ``calibrate`` with ``fitted`` (the fit of compute constants).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator import progress
from simulator.compute import ComputeCalibration
from simulator.compute.model import load_compute_calibration
from simulator.errors import ConfigError
from simulator.pipeline import build_setup
from simulator.scenario import scenario_from_dict
from simulator.validation.common import read_cases_file, read_measurements_csv
from simulator.validation.training.cases import (_check_against_measurement, _scenario_data,
                                                 check_specs, check_unused, measured_case,
                                                 needed_cases)
from simulator.validation.training.fitted import fitted_values
from simulator.validation.training.schema import (_REQUIRED, CASES_FILE, MEASUREMENTS_FILE,
                                                  RESULT_COLUMNS, SPLITS, Case, CaseSpec,
                                                  CasesFile, _pydantic_error, default_root)
from simulator.validation.training.sim import simulate_case


def load_measurements(root: Path | str | None = None, ids=None,
                      filename: str = MEASUREMENTS_FILE) -> pd.DataFrame:
    """Rows of ``measurements.csv`` (only those of ``ids`` when given), indexed by id.

    :raises ConfigError: unreadable file, missing columns, repeated ids.
    """
    root = Path(root) if root is not None else default_root()
    path = root / filename
    df = read_measurements_csv(path, _REQUIRED, dtype={"value_raw": str, "scaling_raw": str})
    dup = sorted(df["measurement_id"][df["measurement_id"].duplicated()])
    if dup:
        raise ConfigError(f"repeated measurement_id(s) {', '.join(dup)}", source=str(path),
                          field="measurement_id")
    if ids is not None:
        df = df[df["measurement_id"].isin(set(ids))]
    df = df.copy()
    for col in ("micro_batch", "seq_len", "grad_accum"):
        df[col] = df[col].astype("Int64")
    return df.set_index("measurement_id", drop=False)


def _attach_setup(case: Case, c: CaseSpec, source: str, build=build_setup) -> None:
    """Build the scenario and setup of a non-scaling case and check it is the measured run."""
    where = f"cases.{case.case_id}"
    data, ref = _scenario_data(c, source, where)
    data.setdefault("name", case.case_id)
    try:
        scn = scenario_from_dict(data, source)
        setup = build(scn, source)
    except ConfigError as exc:
        raise ConfigError(f"scenario {ref} ({exc.field or 'file'}): {exc.reason}",
                          source=source, field=f"{where}.scenario") from None
    case.scenario, case.scenario_ref, case.sets, case.setup = scn, ref, tuple(c.set), setup
    _check_against_measurement(case, source, where)


def load_cases(root: Path | str | None = None, splits=None, read_measurements=None,
               build=None) -> list[Case]:
    """Cases of ``<root>/cases.yaml``, setups built and measurements attached.

    ``splits`` keeps only those cases, and only their measurement rows are read (a scaling
    case also builds the two cases it compares). With all splits, every measurement must be
    used by a case. ``read_measurements`` (default :func:`load_measurements`) reads them and
    ``build`` (default :func:`simulator.pipeline.build_setup`) builds each setup.

    :raises ConfigError: naming ``cases.yaml`` and the dotted field: unknown keys, a bad
        scenario or override, a measured value that differs from ``measurements.csv``, a
        simulated setup (GPUs, precision, batch...) that is not the measured one, a
        calibration case that depends on a validation case.
    """
    root = Path(root) if root is not None else default_root()
    path = root / CASES_FILE
    source = str(path)
    spec = read_cases_file(path, CasesFile, _pydantic_error, splits)
    specs = spec.cases
    check_specs(specs, source)
    wanted = [cid for cid, c in specs.items() if splits is None or c.split in splits]
    needed = needed_cases(specs, wanted)
    read = read_measurements or load_measurements
    meas = read(root, ids=None if splits is None else {specs[c].measurement for c in needed},
                filename=spec.measurements)
    meas_source = str(root / spec.measurements)
    if splits is None:
        check_unused(meas, specs, source, meas_source)
    built: dict[str, Case] = {}
    order = sorted(needed, key=lambda c: specs[c].scaling is not None)
    for cid in order:             # first every check against measurements.csv (cheap) ...
        built[cid] = measured_case(cid, specs[cid], meas, built, source, meas_source)
    for cid in order:             # ... then build the setups (slow) and check them
        if specs[cid].scaling is None:
            _attach_setup(built[cid], specs[cid], source, build or build_setup)
    return [built[cid] for cid in wanted]


def validate(root: Path | str | None = None, calibration: ComputeCalibration | None = None,
             splits=SPLITS, cases: list[Case] | None = None) -> pd.DataFrame:
    """Simulate every case of ``splits`` (or the given ``cases``); one row per case.

    ``df.attrs``: ``constants`` (the fitted compute constants in use), ``notes`` per case.
    """
    if cases is None:
        cases = load_cases(root, splits=None if tuple(splits) == SPLITS else tuple(splits))
    cache: dict = {}
    rows = [r for c in progress.track(cases, len(cases), "validate training", "case")
            for r in simulate_case(c, calibration, cache)]
    df = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    df.attrs["constants"] = fitted_values(calibration or load_compute_calibration())
    df.attrs["notes"] = {c.case_id: c.notes for c in cases}
    return df


__all__ = ["load_cases", "load_measurements", "validate"]
