"""The parallel suite's run (:func:`validate`: every row as a result) and its report
(``report.md`` and ``results.csv``, :func:`write_report`)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from simulator.outpaths import atomic_write_csv, atomic_write_text
from simulator.validation import known_misses as km
from simulator.validation.common import md_table, report_dir
from simulator.validation.parallel import cases as pc
from simulator.validation.parallel.iteration import iteration_rows, median_case, simulate
from simulator.validation.parallel.memory import memory_rows
from simulator.validation.parallel.mlperf import KIND as MLPERF
from simulator.validation.parallel.mlperf import mlperf_rows
from simulator.validation.parallel.nemo import H100_KINDS, nemo_rows
from simulator.validation.parallel.runs import recorder, replay_outcomes, run_jobs
from simulator.validation.parallel.simumax import KIND as SIMUMAX
from simulator.validation.parallel.simumax import MEMORY_KIND, simumax_rows

REPORT = "report.md"
RESULTS = "results.csv"
COLUMNS = ["case", "kind", "model", "mode", "gpu", "quantity", "unit", "measured",
           "simulated", "error", "bound", "ok", "note", "source"]
BLACKWELL_GPUS = ("B200", "GB200", "B300", "GB300")


def validate(root: Path | None = None, only=None, simulate_fn=None, nemo: bool = True,
             workers: int = 1, max_gpus: int | None = None) -> pd.DataFrame:
    """Every row of the suite (:data:`COLUMNS`): the memory rows, the Selene iteration
    rows and their median gate, and (``nemo``) NVIDIA's H100 and Blackwell rows, SimuMax's
    B200 rows and the MLPerf GPT-3 175B rows. ``only``: the Selene
    iteration cases to simulate (default all); ``simulate_fn`` replaces the simulation
    (tests); ``workers`` processes run the simulations (:mod:`.runs`); ``max_gpus``
    replaces ``cases.yaml``'s ``selene_max_gpus`` (the largest Selene run simulated)."""
    root = Path(root) if root is not None else pc.default_root()
    spec = pc.load(root)
    if max_gpus is not None:
        spec = spec.model_copy(update={"selene_max_gpus": max_gpus})
    jobs: dict = {}
    iteration_rows(root, spec, only, simulate_fn=recorder(jobs))
    if nemo:
        nemo_rows(root, spec, simulate_fn=recorder(jobs))
        simumax_rows(root, spec, simulate_fn=recorder(jobs))
        mlperf_rows(root, spec, simulate_fn=recorder(jobs))
    answer = replay_outcomes(run_jobs(jobs, simulate_fn or simulate, workers))
    iteration = iteration_rows(root, spec, only, simulate_fn=answer)
    rows = [*memory_rows(root, spec), *iteration, median_case(iteration, spec)]
    if nemo:
        rows += nemo_rows(root, spec, simulate_fn=answer)
        rows += simumax_rows(root, spec, simulate_fn=answer)
        rows += mlperf_rows(root, spec, simulate_fn=answer)
    return pd.DataFrame(rows, columns=COLUMNS)


def _num(x: float, unit: str) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.3g}" if unit != "percent" else f"{x:.2f}"


def _err(e: float, kind: str) -> str:
    """Signed per row; the gate's median |error| unsigned."""
    if not math.isfinite(e):
        return "-"
    return f"{100 * e:.1f}%" if kind == "gate" else f"{100 * e:+.1f}%"


def _table(df: pd.DataFrame) -> str:
    return md_table(pd.DataFrame({
        "case": df.case, "measured": [_num(v, u) for v, u in zip(df.measured, df.unit)],
        "simulated": [_num(v, u) for v, u in zip(df.simulated, df.unit)],
        "unit": df.unit,
        "error": [_err(e, k) for e, k in zip(df.error, df.kind)],
        "status": df.status, "note": [f"{n} **Known miss:** {r}" if r else n
                                      for n, r in zip(df.note, df.reason)]}))


def summary_line(df: pd.DataFrame) -> str:
    mem = df[(df.kind == "memory") & df.ok.notna()]
    gate = df[df.kind == "gate"].iloc[0]
    fits = df[df.kind == "fits"]
    med = "-" if not math.isfinite(gate.error) else f"{100 * gate.error:.1f}%"
    line = (f"parallel validation: memory {int(mem.ok.astype(bool).sum())}/{len(mem)} within "
            f"{mem.bound.iloc[0]:.0%}; Selene iteration median |error| {med} "
            f"({gate.note}, gate {gate.bound:.0%}); {int(fits.ok.astype(bool).sum())}/"
            f"{len(fits)} runs fit in the simulated memory")
    clauses = [line, h100_summary(df), *(blackwell_summary(df, g) for g in BLACKWELL_GPUS),
               simumax_summary(df), mlperf_summary(df)]
    return "; ".join(c for c in clauses if c)


def _dense_moe(rows: pd.DataFrame) -> str:
    """Rows compared, median and largest |error|, dense and mixture-of-experts apart."""
    done = rows[rows.error.map(math.isfinite)]
    parts = []
    moe = done["mode"].str.contains("EP")
    for label, part in (("dense", done[~moe]), ("MoE", done[moe])):
        if len(part):
            err = part.error.abs()
            parts.append(f"{label} {len(part)} rows, median |error| {100 * err.median():.1f}%, "
                         f"largest {100 * err.max():.1f}%")
    return (f"{'; '.join(parts) or 'none compared'} ({len(rows) - len(done)} of {len(rows)} "
            f"rows not compared, each with its reason)")


def h100_summary(df: pd.DataFrame) -> str:
    """The NVIDIA H100 tables in one clause: rows compared, median and largest |error|, of
    the dense and the mixture-of-experts models apart."""
    rows = df[df.kind.isin(H100_KINDS)]
    if not len(rows):
        return ""
    return f"Megatron on DGX H100 (NeMo, Megatron-Bridge; reported): {_dense_moe(rows)}"


def blackwell_summary(df: pd.DataFrame, gpu: str) -> str:
    """Megatron-Bridge's rows of one Blackwell GPU in one clause (validation split)."""
    rows = df[(df.kind == "blackwell") & (df.gpu == gpu)]
    if not len(rows):
        return ""
    return f"Megatron-Bridge on {gpu} (validation split; reported): {_dense_moe(rows)}"


def simumax_summary(df: pd.DataFrame) -> str:
    """SimuMax's B200 step times per split and their peak memory, in one clause."""
    rows = df[df.kind == SIMUMAX]
    if not len(rows):
        return ""
    parts = []
    for split in ("calibration", "validation"):
        part = rows[rows.note.str.startswith(split) & rows.error.map(math.isfinite)]
        if len(part):
            err = part.error.abs()
            parts.append(f"{split} {len(part)} rows, median |error| "
                         f"{100 * err.median():.1f}%, largest {100 * err.max():.1f}%")
    mem = df[(df.kind == MEMORY_KIND) & df.error.map(math.isfinite)]
    if len(mem):
        parts.append(f"peak memory {len(mem)} runs, {100 * mem.error.min():+.1f}% to "
                     f"{100 * mem.error.max():+.1f}%")
    skipped = int((~rows.error.map(math.isfinite)).sum())
    return (f"Megatron-LM on one DGX B200 (SimuMax; step time): {'; '.join(parts)} ({skipped} "
            f"of {len(rows)} runs not simulated, each with its reason)")


def mlperf_summary(df: pd.DataFrame) -> str:
    """The MLPerf GPT-3 175B step times in one clause (validation)."""
    rows = df[df.kind == MLPERF]
    if not len(rows):
        return ""
    done = rows[rows.error.map(math.isfinite)]
    err = done.error.abs()
    worst = (f"median |error| {100 * err.median():.1f}%, largest {100 * err.max():.1f}%"
             if len(done) else "none compared")
    return (f"MLPerf Training v4.1 GPT-3 175B (validation; step time): {len(done)} of "
            f"{len(rows)} submissions compared, {worst}")


def report_text(df: pd.DataFrame, spec: pc.CasesFile) -> str:
    df = km.with_status(df)
    calibrated = (", ".join(spec.calibrated)
                  or "nothing (declared in cases.yaml before the run)")
    parts = [
        "# Parallel validation: Megatron-LM on Selene, NeMo and Megatron-Bridge on DGX H100 "
        "and Blackwell, Megatron-LM on DGX B200",
        "",
        "Generated by `clustersim validate parallel` (`simulator/validation/parallel/`); do "
        "not edit. Inputs: `cases.yaml` and the CSVs beside it (each row with its source).",
        "", f"**Calibrated on these rows:** {calibrated}.", "",
        f"**Gates:** each Selene memory row within {spec.gates.memory:.0%}; the median "
        f"|iteration-time error| over the Selene rows within "
        f"{spec.gates.iteration_median:.0%}. NeMo, Megatron-Bridge and SimuMax rows are "
        "reported, not gated.", "", _split_text(spec), "",
        f"**Summary:** {summary_line(df)}.", ""]
    for title, kinds in (("Iteration times (Selene, Table 5)", ("iteration", "gate", "fits")),
                         ("Memory per GPU (Selene, Figures 1 and 7)", ("memory",)),
                         ("NeMo 24.07 on DGX H100 (reported)", ("nemo",)),
                         ("Megatron-Bridge 25.09-26.06 on DGX H100 (reported)", ("bridge",)),
                         ("Megatron-Bridge 25.09-26.08 on B200, GB200, B300, GB300 "
                          "(validation split, reported)", ("blackwell",)),
                         ("Megatron-LM on one DGX B200 (SimuMax's measurements; reported)",
                          (SIMUMAX, MEMORY_KIND)),
                         ("MLPerf Training v4.1 GPT-3 175B, 64 to 11,616 GPUs (validation; "
                          "reported)", (MLPERF,))):
        part = df[df.kind.isin(kinds)]
        if len(part):
            parts += [f"## {title}", "", _table(part), ""]
    return "\n".join(parts)


def _split_text(spec: pc.CasesFile) -> str:
    split = spec.blackwell_split
    if split is None:
        return ""
    n = sum(len(v) for v in split.calibration.values())
    return (f"**Blackwell split** (cases.yaml `blackwell_split`, declared {split.declared} "
            f"before any Blackwell row was simulated): {n} SimuMax B200 rows calibrate the "
            f"Blackwell kernel factors of `simulator/data/training_fit.yaml` (family B200: "
            f"`python -m simulator.validation.parallel.blackwell_fit`); every Megatron-Bridge "
            f"Blackwell row and SimuMax's other rows validate. B300 and GB300 (family B300) "
            f"are not fitted: their GEMM rates are Transformer Engine's B300 benchmark.")


def write_report(df: pd.DataFrame, folder: Path | None = None,
                 root: Path | None = None) -> Path:
    """``report.md`` and ``results.csv`` in ``folder`` (default ``validation/parallel``)."""
    root = Path(root) if root is not None else pc.default_root()
    folder = report_dir(folder if folder is not None else root)
    atomic_write_csv(df, folder / RESULTS, index=False, float_format="%.6g")
    report = folder / REPORT
    atomic_write_text(report, report_text(df, pc.load(root)))
    return report


__all__ = ["COLUMNS", "REPORT", "RESULTS", "report_text", "summary_line",
           "validate", "write_report"]
