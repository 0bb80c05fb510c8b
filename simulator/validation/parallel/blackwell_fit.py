"""The Blackwell generation's kernel factor of ``simulator/data/training_fit.yaml`` (family
``B200``: the GPU's ``matmul`` time factor, which every strategy takes) and its check on
the calibration rows that ``validation/parallel/cases.yaml`` declares in ``blackwell_split``
(SimuMax's 24 dense Llama 3 runs on one DGX B200), never on a validation row.

    python -m simulator.validation.parallel.blackwell_fit            # write the family
    python -m simulator.validation.parallel.blackwell_fit --check    # fail if out of step

Since 2026-12-05 (sixth session) the factor is not fitted: it is SimuMax's own measurement
of cuBLAS BF16 GEMMs on the B200 its runs used (:data:`MEASURED_GEMM_EFFICIENCY`, a
sourced kernel rate as family B300's is Transformer Engine's), against the top-level
curve's ``eff_max``. The calibration rows are replayed at it and their errors written
beside it (``check_rows``); :func:`fit` still gives what a least-squares fit of the factor
on them would be (x1.852: it folded into the GEMMs what SimuMax's untuned runs lose
elsewhere, and put Megatron-Bridge's tuned B200/GB200 rows 4-16% slow).

Each calibration row is simulated as :mod:`.simumax` sets it up (Megatron-LM, bf16, one
DGX B200). The fit's objective is the sum of the squared relative step-time errors;
the step time is nearly linear in the factor, so the fit is Gauss-Newton from the roofline
(factor 1): per iteration every row is replayed at the current values and once per factor
moved by :data:`STEP` (a finite-difference Jacobian), and the least-squares step is taken.
The eager PyTorch stack's memory-bound factor and per-kernel overhead stay at the roofline
(1 and 0 us): the rows are Megatron's, which pays neither.

``--check`` fails (exit 1) when the family's calibration rows or measured times differ from
the split and the CSV, when its factor is not the measured rate's, or when replaying its
three check rows no longer gives the step time it recorded (the model changed: rewrite).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import sys
from types import MappingProxyType

import numpy as np

from simulator.compute.training_fit import FamilyFit, read_fit
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict
from simulator.validation.parallel import cases as pc
from simulator.validation.parallel import simumax
from simulator.validation.training.fit import (DATA_PATH, HEADER, PRECISIONS, STRATEGIES,
                                               fitted_line, replay_problems, run_cli)
from simulator.yamlio import write_yaml

FAMILY = "B200"
GPUS = ["B200"]                       # GB200 takes it too: the same generation (blackwell)
# The split allows matmul and attention; fitted together on these rows (all at 4,096 tokens)
# attention ran to its bound, x5.0 (rms 0.059), where matmul alone reaches 0.066: one
# sequence length does not identify an attention factor, so only matmul was fitted (now
# measured: MEASURED_MATMUL)
PARAMS = ("matmul",)
UNFITTED_ATTENTION = ("not fitted: the calibration rows all run 4,096 tokens, which do not "
                      "identify it (fitted beside matmul it ran to its bound, x5.0); the "
                      "roofline's")
# SimuMax's measurement of BF16 GEMMs on its DGX B200 (MooreThreads/SimuMax@4dcaae51,
# configs/system/b200_bf16_ceperm.json, accelerator.op.matmul: tflops 2250,
# efficient_factor 0.48780765792034037, the mean over its 514 measured shapes of the runs'
# layers; written by tools/b200/build_current_machine_system_config.py on that machine),
# against the top-level bf16 matmul curve's eff_max 0.80 (simulator/data/compute.yaml)
MEASURED_GEMM_EFFICIENCY = 0.4878
CURVE_EFF_MAX = 0.80
MEASURED_MATMUL = round(CURVE_EFF_MAX / MEASURED_GEMM_EFFICIENCY, 4)      # x1.640
MEASURED_SOURCE = (
    "not fitted: SimuMax's measured BF16 GEMM rate on the DGX B200 of its runs, "
    "efficient_factor 0.4878 of 2,250 TFLOP/s (1,098 TFLOP/s; the mean over 514 measured "
    "shapes, configs/system/b200_bf16_ceperm.json at MooreThreads/SimuMax@4dcaae51), "
    "against the top-level curve's eff_max 0.80: 0.80 / 0.4878")
STEP = 0.05
BOUNDS = (0.3, 5.0)
ITERATIONS = 3


def calibration_rows(root=None) -> list[dict]:
    """The declared calibration rows of ``simumax_b200_measured.csv``, in file order."""
    root = root or pc.default_root()
    spec = pc.load(root)
    keep = simumax.calibration_cases(spec)
    rows = pc.read_rows(root, spec.files.simumax, simumax.COLUMNS).to_dict("records")
    return [r for r in rows if r["case"] in keep]


def _setups(rows: list[dict], root=None) -> list:
    root = root or pc.default_root()
    spec = pc.load(root)
    out = []
    for r in rows:
        case = simumax.case_id(r)
        scn = scenario_from_dict(simumax.scenario_of(r, root, spec, case), case)
        out.append(build_setup(scn, case))
    return out


def _fit_of(values: dict) -> FamilyFit:
    tf = {"matmul": float(values["matmul"]), "attention": float(values.get("attention", 1.0)),
          "memory_bound": 1.0}
    return FamilyFit(FAMILY, tuple(PRECISIONS), MappingProxyType(tf), 0.0, tuple(STRATEGIES))


def _step_ms(setup, fit: FamilyFit) -> float:
    compute = setup.compute.with_fit(fit.seen_by(setup.compute.strategy))
    return 1e3 * run_setup(dataclasses.replace(setup, compute=compute)).metrics.iteration_time_s


def _ratios(setups, measured, values) -> np.ndarray:
    """Simulated over measured step time, per row, at ``values``."""
    fit = _fit_of(values)
    return np.array([_step_ms(s, fit) / m for s, m in zip(setups, measured)])


def fit(rows: list[dict], iterations: int = ITERATIONS) -> dict:
    """Fit :data:`PARAMS` on ``rows``: the values, the per-row times, the rms before/after."""
    setups = _setups(rows)
    measured = [float(r["real_step_time_ms"]) for r in rows]
    values = {p: 1.0 for p in PARAMS}
    start = None
    for _ in range(iterations):
        r0 = _ratios(setups, measured, values)
        start = r0 if start is None else start
        jac = np.column_stack([(_ratios(setups, measured, {**values, p: values[p] + STEP})
                                - r0) / STEP for p in PARAMS])
        delta, *_ = np.linalg.lstsq(jac, 1.0 - r0, rcond=None)
        values = {p: float(np.clip(values[p] + d, *BOUNDS)) for p, d in zip(PARAMS, delta)}
    values = {p: round(v, 4) for p, v in values.items()}
    sim = list(_ratios(setups, measured, values) * np.array(measured))
    err = [(s - m) / m for s, m in zip(sim, measured)]
    return {"values": values, "rows": [r["case"] for r in rows], "measured": measured,
            "simulated": sim, "errors": err,
            "rms_start": float(np.sqrt(np.mean(np.square(start - 1.0)))),
            "rms_fitted": float(np.sqrt(np.mean(np.square(err))))}


def _check_rows(result: dict) -> list[int]:
    n = len(result["rows"])
    return sorted({0, n // 2, n - 1})


def measured(rows: list[dict]) -> dict:
    """The calibration rows replayed at the measured GEMM rate (:data:`MEASURED_MATMUL`):
    what :func:`fit` returns, with nothing fitted."""
    setups = _setups(rows)
    measured_ms = [float(r["real_step_time_ms"]) for r in rows]
    values = {"matmul": MEASURED_MATMUL}
    sim = list(_ratios(setups, measured_ms, values) * np.array(measured_ms))
    err = [(s - m) / m for s, m in zip(sim, measured_ms)]
    rms = float(np.sqrt(np.mean(np.square(err))))
    return {"values": values, "rows": [r["case"] for r in rows], "measured": measured_ms,
            "simulated": sim, "errors": err, "rms_start": rms, "rms_fitted": rms}


def entry(result: dict) -> dict:
    """The family's entry of ``training_fit.yaml`` (the measured rate and its replay)."""
    v = result["values"]
    errors = sorted(result["errors"])
    how = (f"{MEASURED_SOURCE}; the {len(result['rows'])} calibration rows of "
           f"validation/parallel/cases.yaml blackwell_split replayed at it by python -m "
           f"simulator.validation.parallel.blackwell_fit ({_dt.date.today().isoformat()}): "
           f"rms relative step-time error {result['rms_fitted']:.3f}, "
           f"{errors[0]:+.1%} to {errors[-1]:+.1%}")
    kept = ("not fitted: the calibration rows are Megatron's, which runs no eager PyTorch "
            "stack; the roofline's (docs/compute.md, Scope)")
    return {"gpus": GPUS, "precisions": PRECISIONS, "stack_strategies": STRATEGIES,
            "time_factor": {"matmul": {"value": v["matmul"], "source": how},
                            "attention": {"value": 1.0, "source": UNFITTED_ATTENTION},
                            "memory_bound": {"value": 1.0, "source": kept}},
            "kernel_overhead_us": {"value": 0.0, "source": kept},
            "calibration_rows": {rid: m for rid, m in zip(result["rows"], result["measured"])},
            "check_rows": {result["rows"][i]: round(float(result["simulated"][i]), 2)
                           for i in _check_rows(result)},
            "check_unit": "simulated step time, ms"}


def write(result: dict, path=DATA_PATH):
    """Write the family into ``path``, the other families as they are."""
    data = read_fit(path)
    data.setdefault("families", {})[FAMILY] = entry(result)
    return write_yaml(path, data, HEADER)


def check(path=None, replay: bool = True) -> list[str]:
    """Problems of the family's entry in ``path`` (default: the shipped file); [] in step."""
    current = read_fit(path).get("families", {}).get(FAMILY)
    if current is None:
        return [f"{FAMILY}: no fitted entry"]
    rows = calibration_rows()
    want = {r["case"]: float(r["real_step_time_ms"]) for r in rows}
    problems = []
    if current.get("calibration_rows") != want:
        problems.append(f"{FAMILY}: calibration rows or measured times differ from "
                        f"cases.yaml's blackwell_split and the CSV (refit)")
    if not replay:
        return problems
    if current["time_factor"]["matmul"]["value"] != MEASURED_MATMUL:
        problems.append(f"{FAMILY}: matmul is not the measured GEMM rate's "
                        f"{MEASURED_MATMUL} (rewrite)")
    fit_ = _fit_of({p: current["time_factor"][p]["value"] for p in PARAMS})
    return problems + replay_problems(FAMILY, current.get("check_rows") or {},
                                      {r["case"]: r for r in rows},
                                      lambda row: _step_ms(_setups([row])[0], fit_), "ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulator.validation.parallel.blackwell_fit",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="fail (exit 1) when the shipped family entry is out of step")
    args = ap.parse_args(argv)
    return run_cli(args.check, check, _fit_and_write, FAMILY,
                   "simulator.validation.parallel.blackwell_fit")


def _fit_and_write():
    res = measured(calibration_rows())
    for case, m, s in zip(res["rows"], res["measured"], res["simulated"]):
        print(f"  {case}: measured {m:.1f} ms, simulated {s:.1f} ({(s - m) / m:+.1%})")
    print(fitted_line(FAMILY, res))
    return write(res)


if __name__ == "__main__":
    sys.exit(main())
