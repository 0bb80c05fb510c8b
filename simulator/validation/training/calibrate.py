"""Fit compute-model constants on the training calibration cases only.

Two constants, the sustained tensor-core efficiencies ``eff_max`` of cuDNN convolutions in
``simulator/data/compute.yaml``, within :data:`BOUNDS`:

=================  ==========================================================
``conv.fp16``      convolutions at fp16, and at bf16 (tied), from ResNet-50 AMP on 1 GPU
``conv.tf32``      convolutions at TF32, from ResNet-50 TF32 on 1 GPU
=================  ==========================================================

Each is identified by one calibration row in which convolutions are ~45% of the step and
nothing else is unknown (the memory-bound ops run at the HBM efficiency measured by
BabelStream and the HTA traces). GEMM efficiencies are not fitted here: the TF32/FP32
curves come from real A100 GEMMs (HTA traces), and with them the two BERT-large calibration
rows are already within 8% (TF32 -7.3%, AMP -3.1% in validation/training/report/report.md).
An earlier four-constant fit on four rows, made when those two rows disagreed (TF32 -3.4%,
AMP +26.7%), absorbed that disagreement into GEMM efficiency (fp16 0.59) and made the
held-out GPT-175B row worse, so it is not used.

Nothing else changes (half times, memory efficiencies, attention, launch cost, the
collective constants). The objective is the mean over the calibration cases of
``log(simulated / measured) ** 2`` of each case's metric. It is minimised by the bounded,
deterministic Nelder-Mead of :mod:`simulator.optimize` in unit-box coordinates,
then polished by its compass search, starting from :data:`PRIOR` (the values shipped in
``compute.yaml`` when this was written), so the fit does not depend on earlier fits.

Only cases whose ``split`` is ``calibration`` in ``validation/training/cases.yaml`` are
loaded (checked, not assumed). The fitted values are written to a new YAML file in the
``compute.yaml`` format (:func:`write_fitted`); the shipped file is never edited here.
"""

from __future__ import annotations

import datetime as _dt
import math
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from simulator.compute import ComputeCalibration
from simulator.compute.model import load_compute_calibration
from simulator.errors import ConfigError
from simulator.outpaths import writable_file
from simulator.pipeline import build_setup
from simulator.validation.common import format_objective
from simulator.optimize import compass_search, from_unit, nelder_mead, to_unit
from simulator.validation.training.fitted import (BOUNDS, DECIMALS, PARAMS, PRIOR, TIED,
                                                  fitted_values, split_name, with_values)
from simulator.validation.training.schema import CASES_FILE, default_root
from simulator.validation.training.sim import simulate_case
from simulator.validation.training.validate import load_cases, load_measurements
from simulator.yamlio import write_yaml

OBJECTIVE = "mean over calibration cases of log(simulated / measured)^2"


def calibration_cases(root=None, read_measurements=load_measurements,
                      build=build_setup) -> list:
    """The calibration cases, checked to contain nothing of the validation split; read and
    built by ``read_measurements`` and ``build`` (see :func:`.validate.load_cases`)."""
    cases = load_cases(root, splits=("calibration",), read_measurements=read_measurements,
                       build=build)
    for c in cases:
        deps = [c, *c.dependencies()]
        if any(d.split != "calibration" for d in deps):
            raise RuntimeError(f"calibration would read a validation case through {c.case_id}")
    if not cases:
        raise ConfigError("no case has split 'calibration'", source=str(
            Path(root or default_root()) / CASES_FILE), field="cases")
    return cases


def relevant_params(case) -> tuple[str, ...]:
    """The fitted constants that can change ``case``'s result: those whose (op class,
    precision) curve, or a tied one, is used by a compute op of its trace (or of the cases a
    scaling case compares)."""
    used = set()
    for c in ([case] if not case.is_scaling else case.dependencies()):
        default = c.setup.job.precision
        for cls in c.setup.trace.classes:
            for op in cls.ops:
                if op.kind == "compute" and op.op_class:
                    used.add((op.op_class, op.attrs.get("precision", default)))
    return tuple(p for p in PARAMS
                 if any(split_name(n) in used for n in (p, *TIED.get(p, ()))))


class _Problem:
    """The calibration cases and a memoised objective. Each case is re-simulated only when
    a constant it depends on (:func:`relevant_params`) changes."""

    def __init__(self, cases, base: ComputeCalibration, simulate):
        self.cases, self.base, self.simulate = cases, base, simulate
        self.relevant = {c.case_id: relevant_params(c) for c in cases}
        self.evaluations = 0
        self.replays = 0
        self._memo: dict = {}
        self._rows: dict = {}

    def rows(self, values: dict) -> list[dict]:
        return [r for c in self.cases for r in self._case_rows(c, values)]

    def _case_rows(self, case, values: dict) -> list[dict]:
        key = (case.case_id,) + tuple(round(float(values[p]), 12)
                                      for p in self.relevant[case.case_id])
        if key not in self._rows:
            self.replays += 1
            self._rows[key] = self.simulate(case, with_values(self.base, values), {})
        return self._rows[key]

    def loss(self, values: dict) -> float:
        key = tuple(round(float(values[p]), 12) for p in PARAMS)
        if key not in self._memo:
            self.evaluations += 1
            rows = self.rows(values)
            logs = [math.log(r["simulated"] / r["measured"]) for r in rows]
            self._memo[key] = float(np.mean(np.square(logs)))
        return self._memo[key]


def calibrate(root=None, base: ComputeCalibration | None = None, max_evals: int = 160,
              start: dict | None = None, simulate=simulate_case,
              read_measurements=load_measurements, build=build_setup
              ) -> tuple[ComputeCalibration, dict]:
    """Fit :data:`PARAMS` on the calibration split; return (calibration, report).

    ``base`` (default: the shipped ``compute.yaml``) supplies every unfitted constant; the
    fit starts from ``start`` (default :data:`PRIOR`). Values are rounded to
    :data:`DECIMALS` and the report is evaluated at the rounded values. ``simulate`` (the
    signature of :func:`.sim.simulate_case`) gives a case's result rows; ``read_measurements``
    and ``build`` read the cases (:func:`calibration_cases`).
    """
    base = base or load_compute_calibration()
    cases = calibration_cases(root, read_measurements, build)
    prob = _Problem(cases, base, simulate)
    start = dict(PRIOR if start is None else start)
    f0 = prob.loss(start)

    def f(u):
        return prob.loss(from_unit(u, BOUNDS, PARAMS))

    u, _, _ = nelder_mead(f, to_unit(start, BOUNDS, PARAMS), max_evals=max(5, max_evals * 5 // 8))
    u, _, _ = compass_search(f, u, step=0.02, min_step=2e-4,
                             max_evals=max(2, max_evals * 3 // 8))
    fitted = {p: round(v, DECIMALS) for p, v in from_unit(u, BOUNDS, PARAMS).items()}
    f1 = prob.loss(fitted)
    if f1 > f0:                               # never return something worse than the start
        fitted, f1 = dict(start), f0
    cal = with_values(base, fitted)
    rows = prob.rows(fitted)
    start_rows = prob.rows(start)
    per_case = {r["case"]: {"measured": r["measured"], "simulated": r["simulated"],
                            "error": r["error"], "start_simulated": s["simulated"],
                            "start_error": s["error"]}
                for r, s in zip(rows, start_rows)}
    at_bound = [p for p in PARAMS if math.isclose(fitted[p], BOUNDS[p][0], abs_tol=1e-9)
                or math.isclose(fitted[p], BOUNDS[p][1], abs_tol=1e-9)]
    report = {
        "cases": [c.case_id for c in cases],
        "objective": OBJECTIVE,
        "objective_start": f0, "objective_fitted": f1,
        "rms_log_start": math.sqrt(f0), "rms_log_fitted": math.sqrt(f1),
        "start": start, "fitted": fitted, "bounds": dict(BOUNDS), "tied": dict(TIED),
        "at_bound": at_bound, "per_case": per_case, "evaluations": prob.evaluations,
        "replays": prob.replays,
        "relevant": {k: list(v) for k, v in prob.relevant.items()},
        "method": "bounded Nelder-Mead + compass search in unit-box coordinates "
                  "(simulator.optimize)",
        "date": _dt.date.today().isoformat(),
    }
    return cal, report


def format_calibration(report: dict) -> str:
    """Fitted values and the calibration error as text lines."""
    lines = [f"calibration cases: {', '.join(report['cases'])} "
             f"({report['evaluations']} evaluations, {report['replays']} case replays)"]
    for p in PARAMS:
        lo, hi = report["bounds"][p]
        tied = f" (also {', '.join(report['tied'][p])})" if p in report["tied"] else ""
        flag = "  (at bound)" if p in report["at_bound"] else ""
        lines.append(f"  eff_max {p:12s} {report['start'][p]:6.3f} -> {report['fitted'][p]:6.3f}"
                     f"   bounds [{lo:g}, {hi:g}]{tied}{flag}")
    lines.append(format_objective(report))
    for cid, r in report["per_case"].items():
        lines.append(f"  {cid:30s} measured {r['measured']:8.4g}  simulated "
                     f"{r['start_simulated']:8.4g} -> {r['simulated']:8.4g}  error "
                     f"{100 * r['start_error']:+6.1f}% -> {100 * r['error']:+6.1f}%")
    return "\n".join(lines)


def _shipped_compute_yaml() -> dict:
    with resources.files("simulator.data").joinpath("compute.yaml").open() as fh:
        return yaml.safe_load(fh)


def write_fitted(cal: ComputeCalibration, report: dict, path, overwrite: bool = False) -> Path:
    """Write a complete ``compute.yaml`` (the shipped one) with the fitted ``eff_max``
    values and their new sources; loadable by
    :func:`simulator.compute.model.load_compute_calibration`.

    :raises ConfigError: when ``path`` exists and ``overwrite`` is false, or on a write error.
    """
    path = writable_file(path, overwrite)
    why = (f"fitted by clustersim validate training --calibrate on {', '.join(report['cases'])}"
           f" ({report['date']}); objective {report['objective']} = "
           f"{report['objective_fitted']:.5f} (start {report['objective_start']:.5f})")
    data = _shipped_compute_yaml()
    values = fitted_values(cal)
    for p in PARAMS:
        for name in (p, *TIED.get(p, ())):
            op_class, precision = split_name(name)
            curve = data["op_classes"][op_class]["compute"][precision]
            old = curve["eff_max"]
            curve["eff_max"] = float(values[p])
            curve["source"] = f"{why}; prior {old}: {' '.join(str(curve['source']).split())}"
    header = ("# Compute-model constants (format of simulator/data/compute.yaml). The eff_max\n"
              "# values whose source says \"fitted by\" were fitted on the calibration cases of\n"
              "# validation/training/cases.yaml only, by `clustersim validate training\n"
              "# --calibrate`; everything else is the shipped compute.yaml.\n")
    return write_yaml(path, data, header)


__all__ = ["OBJECTIVE", "calibrate", "calibration_cases", "format_calibration",
           "relevant_params", "write_fitted"]
