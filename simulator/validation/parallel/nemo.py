"""NVIDIA's published Megatron runs on DGX H100: NeMo 24.07's performance summary
(``nemo_h100_3d.csv``, kind ``nemo``) and Megatron-Bridge's performance tables of releases
25.09 to 26.06 (``megatron_bridge_h100.csv``, kind ``bridge``). Reported, not gated; nothing
is fitted on them (``cases.yaml``).

Each row whose model ``cases.yaml`` names (``nemo_models``) runs as a ``megatron`` scenario
on ``dgx-h100-superpod`` with the row's TP, PP, CP, VP, EP, global and micro batch, set up as
NeMo's launcher configurations run (sequence parallelism when TP > 1, the distributed
optimizer with its gradient reduce-scatter and parameter all-gather overlapped, fused/flash
attention, no recompute; per model ``cases.yaml``'s ``nemo_strategy``: TP communication
overlap, recompute). A Megatron-Bridge row with ``FSDP`` above 0 shards over that many
ranks (Megatron-FSDP), simulated as Megatron's FSDP2 path (``use_torch_fsdp2``: the same
ZeRO-3 traffic). The precision column maps to the scenario's precision and FP8 recipe by
``cases.yaml``'s ``nemo_precision`` (NeMo 24.07's FP8 is Transformer Engine's delayed
scaling, ``fp8: hybrid``; Megatron-Bridge's H100 FP8 is current scaling, FP8-CS): the
blocks' Linear GEMMs in FP8 with their cast kernels, everything else bf16. Compared: tokens
per second per GPU. A run the simulator finds out of memory is not compared (the measured
run fit; its time would be the memory model's, not the step's): its row says so.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from simulator.errors import ConfigError
from simulator.validation.parallel.cases import CasesFile, nemo_id, read_rows
from simulator.validation.parallel.iteration import simulate

NEMO_COLUMNS = ["model", "gpus", "TP", "PP", "CP", "VP", "GBS", "MBS", "seq_len",
                "precision", "tokens_per_s_per_gpu", "source"]
BRIDGE_COLUMNS = [*NEMO_COLUMNS, "EP", "FSDP", "release"]
KINDS = ("nemo", "bridge")
GPU_MEMORY_GIB = 80.0                 # DGX H100's H100-SXM


def _degree(row, col: str) -> int:
    value = str(row.get(col, "")).strip()
    return int(value) if value.isdigit() else 1


def _precision(spec: CasesFile, kind: str, row) -> tuple[str, str | None]:
    """(training.precision, fp8_recipe) of a row's precision column."""
    table = spec.nemo_precision[kind]
    label = str(row["precision"]).strip()
    if label not in table:
        raise ConfigError(f"precision {label!r} has no mapping in cases.yaml "
                          f"(nemo_precision.{kind})", field="precision")
    precision, _, recipe = table[label].partition(" ")
    return precision, recipe or None


def case_id(kind: str, row) -> str:
    """``parallel/nemo/llama2-70b-64gpu``; a Megatron-Bridge row with its release,
    ``parallel/bridge/26.04/llama3-70b-64gpu``."""
    if kind == "nemo":
        return f"parallel/nemo/{nemo_id(row)}"
    release = re.match(r"[0-9.]+", str(row["release"]).strip())
    return f"parallel/bridge/{release.group(0) if release else 'unknown'}/{nemo_id(row)}"


def scenario_of(row, root: Path, spec: CasesFile, name: str, kind: str = "nemo") -> dict:
    """The scenario mapping of one row (its model in ``spec.nemo_models``)."""
    tp, pp, cp, vp, ep = (_degree(row, c) for c in ("TP", "PP", "CP", "VP", "EP"))
    gpus = int(row["gpus"])
    dp = gpus // (tp * pp * cp)
    micro = int(row["MBS"])
    model = spec.nemo_models[row["model"]]
    fsdp = _degree(row, "FSDP") > 1
    strategy = {"name": "megatron", "tensor_model_parallel_size": tp,
                "pipeline_model_parallel_size": pp, "context_parallel_size": cp,
                "sequence_parallel": tp > 1, "optimizer": "adam"}
    if fsdp:
        strategy["use_torch_fsdp2"] = True
    else:
        strategy.update(use_distributed_optimizer=True, overlap_grad_reduce=True,
                        overlap_param_gather=True)
    if vp > 1:
        strategy["virtual_pipeline_model_parallel_size"] = vp
    if ep > 1:
        strategy["expert_model_parallel_size"] = ep
    strategy.update(spec.nemo_strategy.get(row["model"], {}))
    precision, recipe = _precision(spec, kind, row)
    training = {"micro_batch": micro, "seq_len": int(row["seq_len"]),
                "grad_accum": int(row["GBS"]) // (micro * dp), "precision": precision,
                "flash_attention": True}
    if recipe:
        training["fp8_recipe"] = recipe
    return {"name": name,
            "model": str(Path(root) / model) if model.endswith(".yaml") else model,
            "training": training,
            "cluster": {"topology": spec.topologies["nemo"], "nodes": -(-gpus // 8)},
            "strategy": strategy}


def _simulated(metrics, row) -> float:
    tokens = int(row["GBS"]) * int(row["seq_len"])
    return tokens / metrics.iteration_time_s / int(row["gpus"])


def nemo_rows(root: Path, spec: CasesFile, simulate_fn=None,
              kinds: tuple[str, ...] = KINDS) -> list[dict]:
    """One reported row per row of the tables ``kinds`` (not simulated: no model config,
    more GPUs than ``nemo_max_gpus``, or what the simulator refused)."""
    simulate_fn = simulate_fn or simulate
    out = []
    for kind in kinds:
        file, columns = ((spec.files.nemo, NEMO_COLUMNS) if kind == "nemo"
                         else (spec.files.bridge, BRIDGE_COLUMNS))
        for row in read_rows(root, file, columns).to_dict("records"):
            out.append(_row(kind, row, root, spec, simulate_fn))
    return out


def _row(kind: str, row, root: Path, spec: CasesFile, simulate_fn) -> dict:
    case = case_id(kind, row)
    measured = float(row["tokens_per_s_per_gpu"])
    mode = " ".join(f"{c}{_degree(row, c)}" for c in ("TP", "PP", "CP", "VP", "EP")
                    if c != "EP" or _degree(row, c) > 1)
    base = {"case": case, "kind": kind, "model": row["model"], "mode": mode,
            "quantity": "tokens/s per GPU", "unit": "tokens/s", "measured": measured,
            "bound": math.nan, "ok": None, "source": row["source"],
            "simulated": math.nan, "error": math.nan}
    if row["model"] not in spec.nemo_models:
        why = spec.nemo_not_modelled.get(row["model"], "no model config in cases.yaml")
        return {**base, "note": f"not simulated: {why}"}
    if int(row["gpus"]) > spec.nemo_max_gpus:
        return {**base, "note": f"not simulated: {row['gpus']} GPUs, more than the suite "
                                f"simulates for a reported row (nemo_max_gpus "
                                f"{spec.nemo_max_gpus})"}
    try:
        m = simulate_fn(scenario_of(row, root, spec, case, kind), case)
    except ConfigError as exc:
        return {**base, "note": f"not simulated: {exc}"}
    precision, recipe = _precision(spec, kind, row)
    ran = f"{row['precision'] or 'unstated precision'} run simulated in {precision}" + (
        f" ({recipe} scaling)" if recipe else "")
    if m.oom:
        return {**base, "note": f"not compared: simulated out of memory (peak "
                                f"{m.peak_memory_gib:.1f} GiB of {GPU_MEMORY_GIB:.0f}) where "
                                f"the measured run fit; {ran}"}
    sim = _simulated(m, row)
    return {**base, "simulated": sim, "error": (sim - measured) / measured, "note": ran}


__all__ = ["BRIDGE_COLUMNS", "KINDS", "NEMO_COLUMNS", "case_id", "nemo_rows", "scenario_of"]
