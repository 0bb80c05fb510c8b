"""Fit the per-GPU-family time factors of ``simulator/data/training_fit.yaml`` on the
calibration rows of ``validation/training/split.yaml`` (never on a validation row).

    python -m simulator.validation.training.fit            # fit and write the data file
    python -m simulator.validation.training.fit --check    # fail if the file is out of step

Per family (A100, H100) four constants (:data:`PARAMS`): the time factors of matmul,
attention and memory-bound kernels and a per-kernel overhead (:mod:`simulator.compute.
training_fit`). The objective is the sum over the family's calibration rows of the squared
relative error of the iteration time. The simulated time is nearly linear in the four
constants, so the fit is Gauss-Newton: per iteration each row is replayed at the current
values and once per constant with that constant moved by :data:`STEPS` (a finite-difference
Jacobian), and the linear least-squares step is taken (numpy ``lstsq``); a negative overhead
is clamped to 0 and the other three refitted. :data:`ITERATIONS` iterations from the
identity (factors 1, overhead 0), so the fit does not depend on an earlier one.

``--check`` reads the shipped file and fails (exit 1) when its calibration rows or their
measured values differ from the split, or when replaying its check rows (three per family)
at the shipped values no longer gives the simulated throughput it recorded (the model
changed under the fit: refit).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import math
import sys
import tempfile
from pathlib import Path
from types import MappingProxyType

import numpy as np

from simulator.compute.training_fit import FILE, GROUPS, SPEEDUPS, FamilyFit, read_fit
from simulator.errors import ConfigError
from simulator.pipeline import run_setup
from simulator.validation.training.tables import TableRow, load_rows
from simulator.validation.training.tables_run import build_row
from simulator.yamlio import write_yaml

PARAMS = (*GROUPS, "kernel_overhead_us")
STEPS = {"matmul": 0.05, "attention": 0.05, "memory_bound": 0.05, "kernel_overhead_us": 5.0}
BOUNDS = {"matmul": (0.3, 5.0), "attention": (0.3, 5.0), "memory_bound": (0.3, 5.0),
          "kernel_overhead_us": (0.0, 500.0)}
ITERATIONS = 2
FAMILIES = {"A100": {"gpus": ["A100-SXM4-80GB", "A100-SXM4-40GB"]},
            "H100": {"gpus": ["H100-SXM"]}}
# Scope (simulator/compute/training_fit.py): matmul and attention are the GPU's kernels and
# apply to every strategy; memory_bound and the per-kernel overhead are the stack's
# mechanisms, fitted on PyTorch FSDP runs (Composer's FSDP1 in llm-foundry; torchtitan's
# FSDP2 rows validate it): the eager PyTorch stack's unfused norm and elementwise kernels
# and its Python host path between kernels, which every eager PyTorch framework runs:
# fsdp, torchtitan, PyTorch DDP (the same eager model; only the gradient sync differs) and
# DeepSpeed (ZeRO over the same eager modules). Megatron-LM runs Transformer Engine's fused
# kernels without an eager host path, and Horovod and TensorFlow XLA/TF kernels: they take
# the GPU's matmul and attention factors only (NeMo's H100 FP8 rows: -7% to +13% so,
# -15% to -43% with all four, +6% to +32% on the roofline; docs/compute.md).
STRATEGIES = ["fsdp", "torchtitan", "ddp", "deepspeed"]
PRECISIONS = ["bf16"]
CHECK_TOLERANCE = 0.005        # relative: a check row's throughput may move this much
DATA_PATH = Path(__file__).resolve().parents[2] / "data" / FILE


def calibration_rows(root=None) -> dict[str, list[TableRow]]:
    """{family: its simulated bf16 calibration rows} (not-modelled and FP8 rows left out)."""
    out: dict[str, list[TableRow]] = {f: [] for f in FAMILIES}
    for r in load_rows(root):
        if r.split == "calibration" and not r.not_modelled and r.gpu_type in out \
                and r.scenario["training"]["precision"] in PRECISIONS:     # FP8 rows: not fitted
            out[r.gpu_type].append(r)
    return out


def _fit_of(family: str, values: dict) -> FamilyFit:
    """The family's fit at ``values`` (:data:`PARAMS`)."""
    return FamilyFit(family, tuple(PRECISIONS),
                     MappingProxyType({g: float(values[g]) for g in GROUPS}),
                     float(values["kernel_overhead_us"]) * 1e-6, tuple(STRATEGIES))


def _tokens_per_s(setup, fit: FamilyFit) -> float:
    compute = setup.compute.with_fit(fit)
    return float(run_setup(dataclasses.replace(setup, compute=compute)).metrics
                 .tokens_per_s_per_gpu)


def _times(setups, measured, family, values) -> np.ndarray:
    """Simulated iteration time over measured, per row, at ``values``."""
    fit = _fit_of(family, values)
    return np.array([m / _tokens_per_s(s, fit) for s, m in zip(setups, measured)])


def _gauss_newton_step(setups, measured, family, values) -> tuple[dict, np.ndarray]:
    r0 = _times(setups, measured, family, values)          # = T_sim / T_meas
    jac = np.empty((len(r0), len(PARAMS)))
    for j, p in enumerate(PARAMS):
        moved = dict(values, **{p: values[p] + STEPS[p]})
        jac[:, j] = (_times(setups, measured, family, moved) - r0) / STEPS[p]
    free = list(range(len(PARAMS)))
    while True:
        x = np.array([values[p] for p in PARAMS])
        delta, *_ = np.linalg.lstsq(jac[:, free], 1.0 - r0, rcond=None)
        new = x.copy()
        new[free] += delta
        lo_hit = [j for j in free if new[j] < BOUNDS[PARAMS[j]][0]]
        if not lo_hit:
            break
        for j in lo_hit:                      # clamp at the bound, refit the others
            free.remove(j)
            values = dict(values, **{PARAMS[j]: BOUNDS[PARAMS[j]][0]})
    out = {p: float(np.clip(new[j], *BOUNDS[p])) for j, p in enumerate(PARAMS)}
    return out, r0


def fit_family(family: str, rows: list[TableRow], iterations: int = ITERATIONS) -> dict:
    """Fit :data:`PARAMS` on ``rows``; the values and the rms relative error before/after."""
    with tempfile.TemporaryDirectory(prefix="clustersim-fit-") as tmp:
        setups = [build_row(r, Path(tmp)) for r in rows]
    measured = [r.measured for r in rows]
    start = {p: (1.0 if p in GROUPS else 0.0) for p in PARAMS}
    values, r_start = dict(start), None
    for _ in range(iterations):
        values, r = _gauss_newton_step(setups, measured, family, values)
        r_start = r if r_start is None else r_start
    values = {p: round(v, 4 if p in GROUPS else 2) for p, v in values.items()}
    fit = _fit_of(family, values)
    sim = [_tokens_per_s(s, fit) for s in setups]
    err = [(s - m) / m for s, m in zip(sim, measured)]
    return {"values": values, "rows": [r.row_id for r in rows], "measured": measured,
            "simulated": sim, "errors": err,
            "rms_start": float(np.sqrt(np.mean(np.square(1.0 / r_start - 1.0)))),
            "rms_fitted": float(np.sqrt(np.mean(np.square(err))))}


def _check_rows(result: dict) -> list[int]:
    n = len(result["rows"])
    return sorted({0, n // 2, n - 1}) if n else []


def _with_sourced(entry: dict, previous: dict) -> dict:
    """``entry`` (fitted) with the sourced, not fitted, entries of the family's ``previous``
    one kept: its measured FP8 and FP4 GEMM speedups (``fp8_gemm_speedup``,
    ``fp4_gemm_speedup``), which a refit of the bf16 factors carries (an FP8 or FP4 GEMM is
    priced from the bf16 one)."""
    kept = [key for key in SPEEDUPS.values() if key in previous]
    if not kept:
        return entry
    out = {}
    for key, value in entry.items():
        out[key] = value
        if key == "time_factor":
            out.update({k: previous[k] for k in kept})
    return out


def _entry(family: str, result: dict) -> dict:
    v = result["values"]
    how = (f"fitted by python -m simulator.validation.training.fit on the "
           f"{len(result['rows'])} {family} calibration rows of validation/training/split.yaml "
           f"(8-GPU llm-foundry rows, bf16; {len(PARAMS)} constants, Gauss-Newton least "
           f"squares on relative iteration-time error; {_dt.date.today().isoformat()}); "
           f"rms relative error {result['rms_start']:.3f} -> {result['rms_fitted']:.3f}")
    checks = _check_rows(result)
    return {
        "gpus": FAMILIES[family]["gpus"], "precisions": PRECISIONS,
        "stack_strategies": STRATEGIES,
        "time_factor": {g: {"value": v[g], "source": how} for g in GROUPS},
        "kernel_overhead_us": {"value": v["kernel_overhead_us"], "source": how},
        "calibration_rows": {rid: float(m) for rid, m in zip(result["rows"], result["measured"])},
        "check_rows": {result["rows"][i]: round(float(result["simulated"][i]), 2)
                       for i in checks},
    }


HEADER = """\
# Per-GPU-family time factors of real bf16 FSDP training runs (simulator/compute/
# training_fit.py; applied by ComputeModel to the listed GPUs' generation and precisions:
# matmul and attention for every strategy, memory_bound and the overhead for the
# stack_strategies, which run the eager PyTorch stack they were fitted on).
# Fitted on the calibration rows of validation/training/split.yaml only (never a
# validation row) by `python -m simulator.validation.training.fit`; do not hand-edit:
# `python -m simulator.validation.training.fit --check` (run by a test) fails when this file
# is out of step with the split, the measurements or the model (check_rows: simulated
# tokens/s per GPU at these values when fitted). calibration_rows: the source rows and their
# measured tokens/s per GPU (validation/training/llm_foundry_fsdp.csv, a copy of
# shared/validation-data/training, mosaicml/llm-foundry@8c8dd48f README tables).
# B200 (the Blackwell generation: B200 and GB200) is not fitted: its matmul factor is
# SimuMax's measured BF16 GEMM rate on the DGX B200 of the Megatron-LM rows that
# validation/parallel/cases.yaml's blackwell_split declares, written with those rows'
# replay (`python -m simulator.validation.parallel.blackwell_fit`, its own --check); its
# calibration_rows are those runs' measured step times in ms.
# B300 (Blackwell Ultra: B300 and GB300) is not fitted: its matmul factor is Transformer
# Engine's B300 GEMM benchmark (kernel times of BF16 GEMMs, NVIDIA/TransformerEngine docs
# gemm_profiling.rst) against the roofline, its fp8_gemm_speedup the same benchmark's
# MXFP8:BF16 kernel-time ratio on the same shapes, its fp4_gemm_speedup the NVFP4:BF16 one.
# H100's fp8_gemm_speedup is not fitted either (the same benchmark's Hopper FP8:BF16 kernel
# ratio); a refit keeps them.
"""


def write(results: dict, path: Path = DATA_PATH) -> Path:
    """Write the fitted families into ``path``; the file's other families (B200, written by
    :mod:`simulator.validation.parallel.blackwell_fit`; B300; both sourced) are kept as they are."""
    kept = (read_fit(path).get("families") or {}) if Path(path).exists() else {}
    data = {"families": {**kept, **{f: _with_sourced(_entry(f, r), kept.get(f) or {})
                                    for f, r in results.items()}}}
    return write_yaml(path, data, HEADER)


def check(path: Path | None = None, root=None, replay: bool = True) -> list[str]:
    """Problems of the data file at ``path`` (default: the shipped one); [] when in step."""
    data = read_fit(path)
    fams = data.get("families") or {}
    rows = calibration_rows(root)
    problems = []
    for family, current in rows.items():
        entry = fams.get(family)
        if entry is None:
            problems.append(f"{family}: no fitted entry")
            continue
        want = {r.row_id: r.measured for r in current}
        if entry.get("calibration_rows") != want:
            problems.append(f"{family}: calibration rows or measured values differ from "
                            f"split.yaml and the tables (refit)")
        if not replay:
            continue
        values = {g: entry["time_factor"][g]["value"] for g in GROUPS}
        values["kernel_overhead_us"] = entry["kernel_overhead_us"]["value"]
        fit = _fit_of(family, values)
        by_id = {r.row_id: r for r in current}
        with tempfile.TemporaryDirectory(prefix="clustersim-fit-") as tmp:
            problems += replay_problems(
                family, entry.get("check_rows") or {}, by_id,
                lambda row: _tokens_per_s(build_row(row, Path(tmp)), fit), "tokens/s/GPU")
    return problems


def replay_problems(family: str, check_rows: dict, rows: dict, simulate_fn,
                    unit: str) -> list[str]:
    """The check rows (``{row id: recorded value}``) whose replay, ``simulate_fn(rows[id])``,
    moved more than :data:`CHECK_TOLERANCE`, or that are no calibration row."""
    problems = []
    for rid, recorded in check_rows.items():
        if rid not in rows:
            problems.append(f"{family}: check row {rid} is not a calibration row")
            continue
        sim = simulate_fn(rows[rid])
        if not math.isclose(sim, recorded, rel_tol=CHECK_TOLERANCE):
            problems.append(f"{family}: {rid} simulates {sim:.1f} {unit}, the fit recorded "
                            f"{recorded:.1f} (model changed: refit)")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulator.validation.training.fit",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="fail (exit 1) when the shipped data file is out of step")
    ap.add_argument("--out", type=Path, default=DATA_PATH, help="file to write")
    args = ap.parse_args(argv)
    return run_cli(args.check, check, lambda: _fit_all(args.out), "training_fit.yaml",
                   "simulator.validation.training.fit")


def _fit_all(out: Path) -> Path:
    results = {}
    for family, rows in calibration_rows().items():
        results[family] = fit_family(family, rows)
        print(fitted_line(family, results[family]))
    return write(results, out)


def fitted_line(family: str, res: dict) -> str:
    """One family's fit in one line: rows, constants and values, rms error before/after."""
    vals = ", ".join(f"{k} {v:g}" for k, v in res["values"].items())
    return (f"{family}: {len(res['rows'])} rows, {len(res['values'])} constant(s): {vals}; "
            f"rms relative error {res['rms_start']:.3f} -> {res['rms_fitted']:.3f}")


def run_cli(checking: bool, check_fn, fit_fn, what: str, module: str) -> int:
    """A fit's command: ``--check`` prints ``check_fn()``'s problems (exit 1 on any), else
    ``fit_fn()`` fits and returns the file it wrote; a ConfigError is one line, exit 2."""
    try:
        if checking:
            problems = check_fn()
            for p in problems:
                print(f"out of step: {p}")
            print(f"{what} in step" if not problems else f"refit: python -m {module}")
            return 1 if problems else 0
        print(f"wrote {fit_fn()}")
        return 0
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
