"""The measured Megatron runs as scenarios (:func:`scenario_of`: a ``megatron`` strategy as
Megatron-LM spells its arguments, on ``dgx-a100-superpod`` for Selene) and their simulated
iteration times against the measured ones (:func:`iteration_rows`). Per row the error is
reported; the gate is the median |error| over the Selene rows (:func:`median_case`), and
each run must fit in the simulated memory, as it fit on Selene's 80 GB A100s (the replayed
peak, with the analytical one of :mod:`simulator.strategies.parallel.memory` beside it).

Each Selene run is set up as the paper ran it: fp16, no flash attention (2022's Megatron
computed attention with its fused softmax kernels), no distributed optimizer, full
recompute as ``recompute_granularity: full, recompute_method: uniform,
recompute_num_layers: 1`` (every layer), the SP rows as ``sequence_parallel: true,
recompute_granularity: selective``.
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import median

from simulator.errors import ConfigError
from simulator.strategies.parallel.memory import peak_rank_memory
from simulator.validation.parallel.cases import (CasesFile, Run, model_for, read_rows, run_of,
                                                 short)

GPUS_PER_NODE = 8


def strategy_of(run: Run) -> dict:
    """The ``megatron`` strategy mapping of ``run`` (Megatron-LM's argument names)."""
    plan = run.plan
    out = {"name": "megatron", "tensor_model_parallel_size": plan.tp,
           "pipeline_model_parallel_size": plan.pp,
           "sequence_parallel": plan.sequence_parallel,
           "use_distributed_optimizer": False, "optimizer": "adam"}
    if plan.vp > 1:
        out["virtual_pipeline_model_parallel_size"] = plan.vp
    if run.ac == "full":
        out.update(recompute_granularity="full", recompute_method="uniform",
                   recompute_num_layers=1)
    elif run.ac == "selective":
        out["recompute_granularity"] = "selective"
    return out


def scenario_of(run: Run, root: Path, topology: str, name: str) -> dict:
    """The scenario mapping of ``run`` (model path beside ``cases.yaml`` or catalog name)."""
    model = run.model_ref
    if model.endswith((".yaml", ".yml")):
        model = str(Path(root) / model)
    return {"name": name, "model": model,
            "training": {"micro_batch": run.micro_batch, "seq_len": run.seq_len,
                         "grad_accum": run.micro_batches, "precision": "fp16",
                         "flash_attention": False},
            "cluster": {"topology": topology, "nodes": -(-run.gpus // GPUS_PER_NODE)},
            "strategy": strategy_of(run)}


def simulate(scenario: dict, source: str):
    """The metrics of one scenario mapping's simulated iteration."""
    from simulator.pipeline import build_setup, run_setup
    from simulator.scenario import scenario_from_dict
    return run_setup(build_setup(scenario_from_dict(scenario, source), source)).metrics


def analytical_gib(model, run: Run) -> float:
    """:func:`~simulator.strategies.parallel.memory.peak_rank_memory` of the run, GiB."""
    peak = peak_rank_memory(model, run.plan, seq_len=run.seq_len, micro_batch=run.micro_batch,
                            micro_batches=run.micro_batches, precision="fp16", ac=run.ac)
    return peak.total_bytes / 2 ** 30


def _rows(case, run: Run, measured: float, spec: CasesFile, source: str, simulate_fn,
          scenario: dict, model) -> list[dict]:
    """The run's iteration-time row (reported) and its fits-in-memory case (gated: the
    measured run fit in its 80 GB)."""
    base = {"case": case, "kind": "iteration", "model": run.label, "mode": run.mode,
            "quantity": "iteration time", "unit": "s", "measured": measured,
            "bound": spec.gates.iteration_median, "ok": None, "source": source}
    try:
        m = simulate_fn(scenario, case)
    except ConfigError as exc:          # the harness reports what the simulator lacks
        return [{**base, "simulated": math.nan, "error": math.nan,
                 "note": f"not simulated: {exc}"}]
    sim = m.iteration_time_s
    peak = f"replayed peak {m.peak_memory_gib:.1f} GiB" + (" (OOM)" if m.oom else "")
    fits = {**base, "case": case.replace("/iteration", "/fits"), "kind": "fits",
            "quantity": "the measured run fits in the simulated memory", "unit": "GiB",
            "measured": math.nan, "simulated": m.peak_memory_gib, "error": math.nan,
            "bound": math.nan, "ok": not m.oom,
            "note": f"{peak}; analytical peak {analytical_gib(model, run):.1f} GiB"}
    return [{**base, "simulated": sim, "error": (sim - measured) / measured, "note": peak},
            fits]


def iteration_rows(root: Path, spec: CasesFile, only=None, simulate_fn=simulate) -> list[dict]:
    """One row per Selene run (``only``: the case ids to run, default all)."""
    source = str(Path(root) / spec.files.iteration)
    rows, models = [], {}
    for row in read_rows(root, spec.files.iteration).to_dict("records"):
        run = run_of(row, spec, source)
        case = f"parallel/selene/{short(run.label)}/{run.mode}/iteration"
        if only is not None and case not in only:
            continue
        if run.gpus > spec.selene_max_gpus:
            rows.append({"case": case, "kind": "iteration", "model": run.label,
                         "mode": run.mode, "quantity": "iteration time", "unit": "s",
                         "measured": float(row["iteration_time_s"]), "simulated": math.nan,
                         "error": math.nan, "bound": spec.gates.iteration_median, "ok": None,
                         "source": row["source"], "skipped": True,
                         "note": f"not simulated: {run.gpus} GPUs, more than the suite "
                                 f"simulates by default (selene_max_gpus "
                                 f"{spec.selene_max_gpus}; --max-gpus)"})
            continue
        scenario = scenario_of(run, root, spec.topologies["selene"], case)
        if run.model_ref not in models:
            models[run.model_ref] = model_for(root, run.model_ref)
        rows += _rows(case, run, float(row["iteration_time_s"]), spec, row["source"],
                      simulate_fn, scenario, models[run.model_ref])
    return rows


def median_case(rows: list[dict], spec: CasesFile) -> dict:
    """The gate: median |iteration-time error| over the simulated Selene rows (FAIL when a
    row could not be simulated)."""
    runs = [r for r in rows if r["kind"] == "iteration"]
    skipped = sum(bool(r.get("skipped")) for r in runs)
    errors = [abs(r["error"]) for r in runs if not r.get("skipped")]
    missing = sum(not math.isfinite(e) for e in errors)
    med = median(errors) if errors and not missing else math.nan
    bound = spec.gates.iteration_median
    return {"case": "parallel/selene/iteration-median", "kind": "gate", "model": "all",
            "mode": "", "quantity": "median |iteration-time error|", "unit": "",
            "measured": math.nan, "simulated": med, "error": med, "bound": bound,
            "ok": bool(math.isfinite(med) and med <= bound), "source": "",
            "note": f"{len(errors) - missing} of {len(runs)} rows simulated"
                    + (f" ({skipped} above selene_max_gpus)" if skipped else "")}


__all__ = ["GPUS_PER_NODE", "analytical_gib", "iteration_rows", "median_case", "scenario_of",
           "simulate", "strategy_of"]
