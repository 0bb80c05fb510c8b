"""Megatron-LM measured on one DGX B200 (``simumax_b200_measured.csv``: SimuMax's B200
release, the measured columns only): step time and peak memory of truncated Llama 3 70B
and 405B runs (TP1-8 x PP1-2, 4/8/32 micro-batches), DeepSeek-V2/V3 MoE and long-context
CP rows. Reported; its 24 dense rows are the declared calibration split of the Blackwell
kernel factors (``cases.yaml`` ``blackwell_split``), the others validate.

Each row runs as a ``megatron`` scenario on ``dgx-b200`` (one node) as SimuMax's launchers
set it up (``tools/b200/run_megatron_perf_real_pipeline.py``, ``simu_tools/megatron_scripts``
at the commit of the rows' source): the model's first ``layers_run`` layers
(``cases.yaml`` ``simumax_models``), BF16, Transformer Engine with flash attention, sequence
parallelism when TP > 1, the distributed optimizer, one sample per micro-batch and
``micro_batch_count`` of them per step, no TP or P2P communication overlap, and no recompute
(``--recompute-granularity full`` with ``--recompute-num-layers 0`` recomputes no layer).
Megatron's defaults otherwise (gradient reduce not overlapped, fp32 gradient reduction for
bf16, the cross entropy op by op: neither launcher passes ``--cross-entropy-loss-fusion``).
The DeepSeek-V2/V3 rows (MLA, the first layer dense, 3 MoE layers) run their experts over
``ep`` ranks as the MoE launcher sets them (the all-to-all dispatcher, grouped GEMMs, and
``cases.yaml``'s ``simumax_strategy``: capacity factor 1 with the experts' inputs padded to
capacity, so every expert computes the even share). CP rows ran Megatron's ``a2a`` context
parallelism (``--cp-comm-type a2a``: the all-to-alls of Q, K, V and O around the attention,
:mod:`simulator.strategies.parallel.context`), and are simulated so.

Compared: the step time (Megatron's elapsed time per iteration, the minimum over the steady
iterations on rank 7), and on the rows whose memory was measured in their own run
(``memory_source_case``: the 4-micro-batch run of each layout) the peak of
``torch.cuda.max_memory_allocated`` over the ranks against the simulated peak.
"""

from __future__ import annotations

import math
from pathlib import Path

from simulator.errors import ConfigError
from simulator.validation.parallel.cases import CasesFile, read_rows
from simulator.validation.parallel.iteration import simulate

COLUMNS = ["case", "model", "layers_run", "num_gpus", "tp", "pp", "dp", "ep", "cp", "vp",
           "micro_batch_count", "seq_len", "mbs_per_launcher", "precision_per_launcher",
           "real_step_time_ms", "real_peak_alloc_gib", "memory_source_case", "source"]
KIND, MEMORY_KIND = "simumax", "simumax_memory"
PRECISION = {"BF16": "bf16"}


def case_id(row) -> str:
    """``parallel/simumax/llama3_70b_l12_tp1_pp2_dp4_mbc4_cef``."""
    return f"parallel/simumax/{row['case']}"


def calibration_cases(spec: CasesFile) -> set[str]:
    """The rows the declared split lets a fit use (``blackwell_split``)."""
    split = spec.blackwell_split
    return set(split.calibration.get(spec.files.simumax, [])) if split else set()


def scenario_of(row, root: Path, spec: CasesFile, name: str) -> dict:
    """The scenario mapping of one row.

    :raises ConfigError: a model and depth without a file in ``simumax_models``, or a
        precision without a mapping.
    """
    key = f"{row['model']}/{row['layers_run']}"
    if key not in spec.simumax_models:
        raise ConfigError(f"no truncated model for {key!r} in cases.yaml (simumax_models)",
                          field="model")
    label = str(row["precision_per_launcher"])
    if label not in PRECISION:
        raise ConfigError(f"precision {label!r} is not mapped", field="precision")
    tp, pp, cp, vp, ep = (int(row[c]) for c in ("tp", "pp", "cp", "vp", "ep"))
    # neither launcher passes --cross-entropy-loss-fusion: Megatron-LM's default, the loss
    # op by op in fp32
    strategy = {"name": "megatron", "tensor_model_parallel_size": tp,
                "pipeline_model_parallel_size": pp, "context_parallel_size": cp,
                "sequence_parallel": tp > 1, "use_distributed_optimizer": True,
                "optimizer": "adam", "cross_entropy_loss_fusion": False}
    if vp > 1:
        strategy["virtual_pipeline_model_parallel_size"] = vp
    if ep > 1:
        strategy["expert_model_parallel_size"] = ep
    strategy.update(spec.simumax_strategy.get(row["model"], {}))
    if cp > 1:
        strategy["cp_comm_type"] = "a2a"        # the launchers' CP (Ulysses all-to-alls)
    return {"name": name, "model": str(Path(root) / spec.simumax_models[key]),
            "training": {"micro_batch": int(row["mbs_per_launcher"]),
                         "seq_len": int(row["seq_len"]),
                         "grad_accum": int(row["micro_batch_count"]),
                         "precision": PRECISION[label], "flash_attention": True},
            "cluster": {"topology": spec.topologies["simumax"]},
            "strategy": strategy}


def _mode(row) -> str:
    parts = [f"{c.upper()}{row[c]}" for c in ("tp", "pp", "cp", "vp", "ep") if int(row[c]) > 1]
    return " ".join(parts or ["DP8"]) + f" mbc{row['micro_batch_count']} L{row['layers_run']}"


def simumax_rows(root: Path, spec: CasesFile, simulate_fn=None) -> list[dict]:
    """The step-time row of every run and the memory row of each run measured in its own
    run (not simulated: a model not described, or what the simulator refused)."""
    simulate_fn = simulate_fn or simulate
    calibration = calibration_cases(spec)
    out = []
    for row in read_rows(root, spec.files.simumax, COLUMNS).to_dict("records"):
        out += _rows(row, root, spec, simulate_fn, row["case"] in calibration)
    return out


def _rows(row, root: Path, spec: CasesFile, simulate_fn, calibrating: bool) -> list[dict]:
    case = case_id(row)
    split = "calibration" if calibrating else "validation"
    step = {"case": case, "kind": KIND, "model": f"{row['model']} ({row['layers_run']} layers)",
            "mode": _mode(row), "gpu": "B200", "quantity": "step time", "unit": "ms",
            "measured": float(row["real_step_time_ms"]), "bound": math.nan, "ok": None,
            "source": row["source"], "simulated": math.nan, "error": math.nan}
    own_memory = row["memory_source_case"] == row["case"] and row["real_peak_alloc_gib"] != ""
    memory = {**step, "case": f"{case}/memory", "kind": MEMORY_KIND,
              "quantity": "peak memory (max over ranks of max_memory_allocated)",
              "unit": "GiB", "measured": float(row["real_peak_alloc_gib"] or "nan")}
    why = spec.simumax_not_modelled.get(row["model"])
    if why is None:
        try:
            m = simulate_fn(scenario_of(row, root, spec, case), case)
        except ConfigError as exc:
            why = str(exc)
    if why is not None:
        return [{**r, "note": f"{split}; not simulated: {why}"}
                for r in ([step, memory] if own_memory else [step])]
    ms = 1e3 * m.iteration_time_s
    out = [{**step, "simulated": ms, "error": (ms - step["measured"]) / step["measured"],
            "note": f"{split}; bf16 on one DGX B200"}]
    if own_memory:
        gib = m.peak_memory_gib
        out.append({**memory, "simulated": gib,
                    "error": (gib - memory["measured"]) / memory["measured"],
                    "note": f"{split} row's run; memory is reported, never fitted"})
    return out


__all__ = ["COLUMNS", "KIND", "MEMORY_KIND", "calibration_cases", "case_id", "scenario_of",
           "simumax_rows"]
