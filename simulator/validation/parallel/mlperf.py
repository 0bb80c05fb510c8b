"""MLPerf Training v4.1 GPT-3 175B pre-training (``mlperf_v41_steps.csv``, its ``gpt3``
rows: NVIDIA's Eos on 256, 512 and 11,616 H100, Oracle's RoCE cluster on 1,536 and 3,072
H100, NVIDIA's 64 B200 preview): the median step time of each submission against the
simulated step. All six validate; nothing is fitted on them (``cases.yaml``
``mlperf_gpt3``).

Each row runs as a ``megatron`` scenario of ``gpt3-175b`` on its system's topology
(``mlperf_gpt3.topologies``) with the row's TP, PP, interleaved stages (``vp``), micro and
global batch from its config file, and the setup NeMo's MLPerf GPT-3 config gives
(``mlperf_gpt3.strategy`` and ``training``; NVIDIA/NeMo-Framework-Launcher's
``launcher_scripts/conf/training/gpt3/175b_mlperf.yaml``): Transformer Engine's FP8 with
delayed scaling, FP8 parameters, sequence parallelism with userbuffers TP overlap, the
distributed optimizer with both overlaps and bf16 gradient reduction, no recompute. A
row whose config sets ``LAYER_CUDA_GRAPH`` replays each layer from a CUDA graph
(``cuda_graph_impl transformer_engine``). A row without TP or PP in the table takes them
from ``mlperf_gpt3.layouts`` (its config file's name).
"""

from __future__ import annotations

import math
from pathlib import Path

from simulator.errors import ConfigError
from simulator.validation.parallel.cases import CasesFile, read_rows
from simulator.validation.parallel.iteration import simulate

KIND = "mlperf"
BENCHMARK = "gpt3"
COLUMNS = ["benchmark", "submitter", "system", "gpu_model", "gpus", "nodes", "tp", "pp",
           "vp", "micro_batch", "global_batch", "seq_len", "precision", "cuda_graph",
           "median_step_time_s", "config_file", "source"]
PRECISION = {"FP8": ("fp8", "delayed")}     # NeMo's fp8_hybrid: delayed scaling


def gpt3_rows(root: Path, spec: CasesFile) -> list[dict]:
    """The GPT-3 rows of ``mlperf_gpt3.file`` (none without one)."""
    if not spec.mlperf_gpt3.file:
        return []
    rows = read_rows(root, spec.mlperf_gpt3.file, COLUMNS)
    return rows[rows.benchmark == BENCHMARK].to_dict("records")


def _layer_graphs(row) -> bool:
    """Whether the row's config replays each layer from a CUDA graph."""
    return "LAYER_CUDA_GRAPH" in str(row["cuda_graph"])


def case_id(row) -> str:
    """``parallel/mlperf/gpt3/eos_n64_ngc24.09_nemo``."""
    return f"parallel/mlperf/{BENCHMARK}/{row['system']}"


def _degree(row, spec: CasesFile, col: str) -> int:
    """A parallel degree of the row, or of ``mlperf_gpt3.layouts`` where the table's is
    blank; 1 for an unset interleaving."""
    value = str(row[col]).strip() or str(spec.mlperf_gpt3.layouts.get(row["system"], {})
                                        .get(col, ""))
    if not value:
        if col == "vp":
            return 1
        raise ConfigError(f"{row['system']}: no {col} in the table or in cases.yaml "
                          f"(mlperf_gpt3.layouts)", field=col)
    return int(float(value))


def scenario_of(row, spec: CasesFile, name: str) -> dict:
    """The scenario mapping of one row.

    :raises ConfigError: a system without a topology, a precision without a mapping.
    """
    setup = spec.mlperf_gpt3
    if row["system"] not in setup.topologies:
        raise ConfigError(f"{row['system']}: no topology in cases.yaml "
                          f"(mlperf_gpt3.topologies)", field="system")
    label = str(row["precision"]).strip()
    if label not in PRECISION:
        raise ConfigError(f"precision {label!r} is not mapped", field="precision")
    precision, recipe = PRECISION[label]
    tp, pp, vp = (_degree(row, spec, c) for c in ("tp", "pp", "vp"))
    micro, batch = int(row["micro_batch"]), int(row["global_batch"])
    dp = int(row["gpus"]) // (tp * pp)
    if batch % (micro * dp):
        raise ConfigError(f"{row['system']}: global batch {batch} is not a whole number of "
                          f"micro-batches of {micro} on {dp} data-parallel ranks",
                          field="global_batch")
    strategy = {"name": "megatron", "tensor_model_parallel_size": tp,
                "pipeline_model_parallel_size": pp, **setup.strategy}
    if vp > 1:
        strategy["virtual_pipeline_model_parallel_size"] = vp
    if _layer_graphs(row):
        strategy["cuda_graph_impl"] = "transformer_engine"
    return {"name": name, "model": setup.model,
            "training": {"micro_batch": micro, "grad_accum": batch // (micro * dp),
                         "seq_len": int(row["seq_len"]), "precision": precision,
                         "fp8_recipe": recipe, **setup.training},
            "cluster": {"topology": setup.topologies[row["system"]],
                        "nodes": int(row["nodes"])},
            "strategy": strategy}


def _mode(row, spec: CasesFile) -> str:
    try:
        tp, pp, vp = (_degree(row, spec, c) for c in ("tp", "pp", "vp"))
    except ConfigError:
        return ""
    return f"TP{tp} PP{pp}" + (f" VP{vp}" if vp > 1 else "") + f" mbs{row['micro_batch']}"


def mlperf_rows(root: Path, spec: CasesFile, simulate_fn=None) -> list[dict]:
    """The step-time row of every GPT-3 submission (none without ``mlperf_gpt3``)."""
    return [_row(row, spec, simulate_fn or simulate) for row in gpt3_rows(root, spec)]


def _row(row, spec: CasesFile, simulate_fn) -> dict:
    case = case_id(row)
    base = {"case": case, "kind": KIND, "model": "GPT-3 175B", "mode": _mode(row, spec),
            "gpu": str(row["gpu_model"]), "quantity": "step time", "unit": "s",
            "measured": float(row["median_step_time_s"]), "bound": math.nan, "ok": None,
            "source": row["source"], "simulated": math.nan, "error": math.nan}
    try:
        scenario = scenario_of(row, spec, case)
        m = simulate_fn(scenario, case)
    except ConfigError as exc:
        return {**base, "note": f"validation; not simulated: {exc}"}
    t = scenario["training"]
    params = ", FP8 parameters" if scenario["strategy"].get("fp8_param_gather") else ""
    ran = (f"validation; {row['submitter']} {row['gpus']} GPUs, {t['precision'].upper()} "
           f"({t['fp8_recipe']} scaling{params})"
           + (", per-layer CUDA graphs" if _layer_graphs(row) else ""))
    if m.oom:
        return {**base, "note": f"not compared: simulated out of memory (peak "
                                f"{m.peak_memory_gib:.1f} GiB) where the measured run fit; "
                                f"{ran}"}
    sim = m.iteration_time_s
    return {**base, "simulated": sim, "error": (sim - base["measured"]) / base["measured"],
            "note": ran}


__all__ = ["BENCHMARK", "COLUMNS", "KIND", "case_id", "gpt3_rows", "mlperf_rows",
           "scenario_of"]
