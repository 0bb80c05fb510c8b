"""Simulating the FSDP table rows (:mod:`.tables`) and gating them per GPU type.

Each row's scenario is built and replayed once; the simulated tokens/s per GPU is compared
with the published one, error = (simulated - measured) / measured. MPT models have learned
position tables of ``max_seq_len`` rows and llm-foundry sets it to the run's sequence length,
so each row runs on the catalog model with ``max_seq_len`` = its ``seq_len`` (a model file
written to a temporary folder for the build; the parameter count then equals the row's
``num_params``).

Gates, on the validation split and per GPU type (A100, H100): median |error| <=
:data:`MEDIAN_GATE` and every row within :data:`ROW_GATE`. The other groups (torchtitan's
H100-500W and H200 runs, :mod:`.tables_titan`) are a framework x GPU family of issue 40's
gates (:data:`FRAMEWORK_GATES`): median |error| <= 7% where the group has at least
:data:`MIN_MEDIAN_ROWS` simulated validation rows, every row within 20% (:func:`gates`).
"""

from __future__ import annotations

import tempfile
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator import progress
from simulator.errors import ConfigError
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict
from simulator.validation.training.tables import TableRow

MEDIAN_GATE = 0.05
ROW_GATE = 0.15
SCALING_GATE = 0.03            # |simulated - measured| scaling efficiency, 3 points
# the llm-foundry / torchtitan-A100 FSDP groups keep the gates above; any other group is a
# framework x GPU family (issue 40): (median, row) gates, the median from 10 rows up
TABLE_GATES = {"A100": (MEDIAN_GATE, ROW_GATE), "H100": (MEDIAN_GATE, ROW_GATE)}
FRAMEWORK_GATES = (0.07, 0.20)
MIN_MEDIAN_ROWS = 10


def gates(gpu_type: str) -> tuple[float, float]:
    """The (median |error|, every row) gates of a report group."""
    return TABLE_GATES.get(gpu_type, FRAMEWORK_GATES)
COLUMNS = ["case", "table", "gpu_type", "split", "model", "gpus", "seq_len", "micro_batch",
           "grad_accum", "precision", "checkpointing", "job", "measured", "simulated", "error",
           "ok", "not_modelled", "iteration_time_s", "mfu", "compute_s", "exposed_comm_s",
           "peak_memory_gib", "oom"]


def _model_file(name: str, seq_len: int, folder: Path) -> str:
    """A copy of catalog model ``name`` with ``max_seq_len`` = ``seq_len`` (learned
    positions only; other models are returned by name)."""
    text = resources.files("simulator.data").joinpath("models").joinpath(f"{name}.yaml").read_text()
    data = yaml.safe_load(text)
    if data.get("position_embedding") != "learned" or data["max_seq_len"] == seq_len:
        return name
    data["max_seq_len"] = seq_len
    path = folder / f"{name}-s{seq_len}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def build_row(row: TableRow, folder: Path, calibration=None):
    """The setup of ``row``'s scenario (its model file written under ``folder``);
    ``calibration`` (a :class:`~simulator.compute.ComputeCalibration`) replaces the
    shipped compute constants."""
    data = dict(row.scenario, model=_model_file(row.model, row.seq_len, folder))
    setup = build_setup(scenario_from_dict(data, row.row_id), row.row_id)
    if calibration is not None:
        import dataclasses
        setup = dataclasses.replace(setup, compute=setup.compute.with_fit(calibration=calibration))
    return setup


def _result(row: TableRow, m=None, not_modelled: str = "") -> dict:
    base = {"case": row.row_id, "table": row.table, "gpu_type": row.gpu_type,
            "split": row.split, "model": row.model, "gpus": row.gpus, "seq_len": row.seq_len,
            "micro_batch": row.micro_batch, "grad_accum": row.grad_accum,
            "precision": row.precision, "checkpointing": row.checkpointing,
            "job": row.job, "measured": row.measured, "not_modelled": not_modelled}
    if m is None:
        return {**base, "simulated": float("nan"), "error": float("nan"), "ok": False,
                "iteration_time_s": float("nan"), "mfu": float("nan"),
                "compute_s": float("nan"), "exposed_comm_s": float("nan"),
                "peak_memory_gib": float("nan"), "oom": False}
    sim = float(m.tokens_per_s_per_gpu)
    err = (sim - row.measured) / row.measured
    return {**base, "simulated": sim, "error": err,
            "ok": bool(abs(err) <= gates(row.gpu_type)[1]),
            "iteration_time_s": m.iteration_time_s, "mfu": m.mfu, "compute_s": m.compute_s,
            "exposed_comm_s": m.exposed_comm_s, "peak_memory_gib": m.peak_memory_gib,
            "oom": bool(m.oom)}


def simulate_row(row: TableRow, folder: Path, calibration=None) -> dict:
    """One result row (:data:`COLUMNS`); a row the simulator refuses (FP8 before it is
    modelled...) comes back with the reason in ``not_modelled``."""
    if row.not_modelled:
        return _result(row, not_modelled=row.not_modelled)
    try:
        setup = build_row(row, folder, calibration)
    except ConfigError as exc:
        return _result(row, not_modelled=f"not modelled: {exc.reason}")
    return _result(row, run_setup(setup).metrics)


def run_rows(rows: list[TableRow], calibration=None) -> pd.DataFrame:
    """Simulate ``rows``; one result row each, in order."""
    with tempfile.TemporaryDirectory(prefix="clustersim-tables-") as tmp:
        out = [simulate_row(r, Path(tmp), calibration)
               for r in progress.track(rows, len(rows), "validate training tables", "row")]
    return pd.DataFrame(out, columns=COLUMNS)


def scaling_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Weak-scaling efficiency of each validation row against the same table's run of the
    same model, precision, sequence length, micro-batch and job (:attr:`TableRow.job`) on the
    fewest GPUs: tokens/s/GPU(N) /
    tokens/s/GPU(base), measured and simulated; error in points (simulated - measured)."""
    out = []
    ran = df[df["not_modelled"] == ""]
    jobs = ran["job"].fillna("") if "job" in ran else pd.Series("", index=ran.index)
    for r in ran[ran["split"] == "validation"].itertuples():
        same = ran[(ran["table"] == r.table) & (ran["gpu_type"] == r.gpu_type)
                   & (ran["model"] == r.model) & (ran["seq_len"] == r.seq_len)
                   & (ran["micro_batch"] == r.micro_batch) & (ran["gpus"] < r.gpus)
                   & (ran["precision"] == r.precision)      # bf16 is not scaled off FP8
                   & (jobs == jobs[r.Index])]
        if same.empty:
            continue
        b = same.sort_values("gpus", kind="stable").iloc[0]
        meas, sim = r.measured / b["measured"], r.simulated / b["simulated"]
        out.append({"case": f"{r.case}/scaling", "gpu_type": r.gpu_type, "of": r.case,
                    "baseline": b["case"], "measured": meas, "simulated": sim,
                    "error": sim - meas, "ok": bool(abs(sim - meas) <= SCALING_GATE)})
    return pd.DataFrame(out, columns=["case", "gpu_type", "of", "baseline", "measured",
                                      "simulated", "error", "ok"])


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per split and GPU type: rows, simulated, not modelled, within the row gate (15% or
    20%: :func:`gates`), median |error|,
    the worst row, and whether the gates hold (validation split only)."""
    out = []
    for (split, gpu), g in df.groupby(["split", "gpu_type"], sort=True):
        sim = g[g["not_modelled"] == ""]
        e = sim["error"].abs()
        worst = sim.loc[e.idxmax()] if len(sim) else None
        med = float(e.median()) if len(e) else float("nan")
        out.append({
            "split": split, "gpu_type": gpu, "rows": len(g), "simulated": len(sim),
            "not_modelled": int((g["not_modelled"] != "").sum()),
            "within_gate": int(sim["ok"].sum()), "median_abs_err": med,
            "worst_case": worst["case"] if worst is not None else "",
            "worst_err": float(worst["error"]) if worst is not None else float("nan"),
            "median_ok": bool(med <= gates(gpu)[0]) if np.isfinite(med) else False,
        })
    return pd.DataFrame(out)


__all__ = ["COLUMNS", "FRAMEWORK_GATES", "MEDIAN_GATE", "MIN_MEDIAN_ROWS", "ROW_GATE",
           "SCALING_GATE", "TABLE_GATES", "build_row", "gates", "run_rows",
           "scaling_rows", "simulate_row", "summarize"]
