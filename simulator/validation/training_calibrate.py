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
curves come from real A100 GEMMs (HTA traces) and the BERT-large calibration rows
disagree with one another in a way no GEMM efficiency explains (TF32 -3.4%, AMP +26.7% with
the same kernels), so they carry overheads the model does not represent; a four-constant
fit on four rows absorbed those overheads into GEMM efficiency (fp16 0.59) and made the
held-out GPT-175B row worse, so it is not used.

Nothing else changes (half times, memory efficiencies, attention, launch cost, the
collective constants). The objective is the mean over the calibration cases of
``log(simulated / measured) ** 2`` of each case's metric. It is minimised by the bounded,
deterministic Nelder-Mead of :mod:`simulator.validation.calibrate` in unit-box coordinates,
then polished by its compass search, starting from :data:`PRIOR` (the values shipped in
``compute.yaml`` when this was written), so the fit does not depend on earlier fits.

Only cases whose ``split`` is ``calibration`` in ``validation/training/cases.yaml`` are
loaded (checked, not assumed). The fitted values are written to a new YAML file in the
``compute.yaml`` format (:func:`write_fitted`); the shipped file is never edited here.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from simulator.compute import ComputeCalibration
from simulator.compute.model import load_compute_calibration
from simulator.errors import ConfigError
from simulator.yamlio import write_yaml
from simulator.validation import training as vt
from simulator.validation.calibrate import compass_search, format_objective, nelder_mead

PARAMS = ("conv.fp16", "conv.tf32")
TIED = {"conv.fp16": ("conv.bf16",)}            # also set to the fitted value
BOUNDS: dict[str, tuple[float, float]] = {p: (0.2, 1.0) for p in PARAMS}
# The shipped compute.yaml values when the fit was written (engineering estimates for conv
# and fp16 GEMMs, the HTA-trace fit for TF32 GEMMs): where every fit starts.
PRIOR: dict[str, float] = {"conv.fp16": 0.65, "conv.tf32": 0.55}
DECIMALS = 3
OBJECTIVE = "mean over calibration cases of log(simulated / measured)^2"


def _split(p: str) -> tuple[str, str]:
    op_class, _, precision = p.partition(".")
    return op_class, precision


def fitted_values(cal: ComputeCalibration) -> dict:
    """The values of :data:`PARAMS` in ``cal``."""
    out = {}
    for p in PARAMS:
        op_class, precision = _split(p)
        out[p] = float(cal.op_classes[op_class].compute[precision].eff_max)
    return out


def with_values(base: ComputeCalibration, values: dict) -> ComputeCalibration:
    """``base`` with the ``eff_max`` of the named curves (and their :data:`TIED` ones)
    replaced; every other constant is kept."""
    classes = dict(base.op_classes)
    for p, v in values.items():
        if p not in PARAMS:
            raise KeyError(f"not a fitted constant: {p!r}; valid: {', '.join(PARAMS)}")
        for name in (p, *TIED.get(p, ())):
            op_class, precision = _split(name)
            entry = classes[op_class]
            curves = dict(entry.compute)
            curves[precision] = dataclasses.replace(curves[precision], eff_max=float(v))
            classes[op_class] = dataclasses.replace(entry, compute=curves)
    return dataclasses.replace(base, op_classes=classes)


def _to_values(u: np.ndarray) -> dict:
    return {p: BOUNDS[p][0] + float(np.clip(x, 0, 1)) * (BOUNDS[p][1] - BOUNDS[p][0])
            for p, x in zip(PARAMS, u)}


def _to_unit(values: dict) -> np.ndarray:
    return np.array([np.clip((values[p] - BOUNDS[p][0]) / (BOUNDS[p][1] - BOUNDS[p][0]), 0, 1)
                     for p in PARAMS])


def calibration_cases(root=None) -> list:
    """The calibration cases, checked to contain nothing of the validation split."""
    cases = vt.load_cases(root, splits=("calibration",))
    for c in cases:
        deps = [c, *c.dependencies()]
        if any(d.split != "calibration" for d in deps):
            raise RuntimeError(f"calibration would read a validation case through {c.case_id}")
    if not cases:
        raise ConfigError("no case has split 'calibration'", source=str(
            Path(root or vt.default_root()) / vt.CASES_FILE), field="cases")
    return cases


def relevant_params(case) -> tuple[str, ...]:
    """The fitted constants that can change ``case``'s result: those whose (op class,
    precision) curve, or a tied one, is used by a compute op of its trace (or of the cases a
    scaling case compares)."""
    used = set()
    for c in ([case] if not case.is_scaling else case.dependencies()):
        default = c.setup.engine.precision
        for cls in c.setup.trace.classes:
            for op in cls.ops:
                if op.kind == "compute" and op.op_class:
                    used.add((op.op_class, op.attrs.get("precision", default)))
    return tuple(p for p in PARAMS
                 if any(_split(n) in used for n in (p, *TIED.get(p, ()))))


class _Problem:
    """The calibration cases and a memoised objective. Each case is re-simulated only when
    a constant it depends on (:func:`relevant_params`) changes."""

    def __init__(self, cases, base: ComputeCalibration):
        self.cases, self.base = cases, base
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
            self._rows[key] = vt.simulate_case(case, with_values(self.base, values), {})
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
              start: dict | None = None) -> tuple[ComputeCalibration, dict]:
    """Fit :data:`PARAMS` on the calibration split; return (calibration, report).

    ``base`` (default: the shipped ``compute.yaml``) supplies every unfitted constant; the
    fit starts from ``start`` (default :data:`PRIOR`). Values are rounded to
    :data:`DECIMALS` and the report is evaluated at the rounded values.
    """
    base = base or load_compute_calibration()
    cases = calibration_cases(root)
    prob = _Problem(cases, base)
    start = dict(PRIOR if start is None else start)
    f0 = prob.loss(start)

    def f(u):
        return prob.loss(_to_values(u))

    u, _, _ = nelder_mead(f, _to_unit(start), max_evals=max(5, max_evals * 5 // 8))
    u, _, _ = compass_search(f, u, step=0.02, min_step=2e-4,
                             max_evals=max(2, max_evals * 3 // 8))
    fitted = {p: round(v, DECIMALS) for p, v in _to_values(u).items()}
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
                  "(simulator.validation.calibrate)",
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
    path = Path(path)
    if path.exists() and not overwrite:
        raise ConfigError("file exists; refusing to overwrite it (pass overwrite=True, "
                          "or --overwrite)", source=str(path))
    why = (f"fitted by clustersim validate training --calibrate on {', '.join(report['cases'])}"
           f" ({report['date']}); objective {report['objective']} = "
           f"{report['objective_fitted']:.5f} (start {report['objective_start']:.5f})")
    data = _shipped_compute_yaml()
    values = fitted_values(cal)
    for p in PARAMS:
        for name in (p, *TIED.get(p, ())):
            op_class, precision = _split(name)
            curve = data["op_classes"][op_class]["compute"][precision]
            old = curve["eff_max"]
            curve["eff_max"] = float(values[p])
            curve["source"] = f"{why}; prior {old}: {' '.join(str(curve['source']).split())}"
    header = ("# Compute-model constants (format of simulator/data/compute.yaml). The eff_max\n"
              "# values whose source says \"fitted by\" were fitted on the calibration cases of\n"
              "# validation/training/cases.yaml only, by `clustersim validate training\n"
              "# --calibrate`; everything else is the shipped compute.yaml.\n")
    return write_yaml(path, data, header)


__all__ = ["BOUNDS", "OBJECTIVE", "PARAMS", "PRIOR", "TIED", "calibrate", "calibration_cases",
           "fitted_values", "format_calibration", "relevant_params", "with_values",
           "write_fitted"]
