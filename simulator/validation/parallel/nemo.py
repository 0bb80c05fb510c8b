"""The NeMo 24.07 rows on DGX H100 (``nemo_h100_3d.csv``): reported, not gated.

Each row whose model ``cases.yaml`` names (``nemo_models``) runs as a ``megatron`` scenario
on ``dgx-h100-superpod`` with the row's TP, PP, CP, VP, global and micro batch, set up as
NeMo's performance recipes run (sequence parallelism when TP > 1, the distributed
optimizer, fused/flash attention, no recompute), in FP8 as they were measured: the
blocks' Linear GEMMs in FP8 with Transformer Engine's delayed scaling and its
cast-transpose kernels (NeMo 24.07 runs TE's ``fp8: hybrid``), everything else bf16.
Compared: tokens per second per GPU.
"""

from __future__ import annotations

import math
from pathlib import Path

from simulator.errors import ConfigError
from simulator.validation.parallel.cases import CasesFile, nemo_id, read_rows
from simulator.validation.parallel.iteration import simulate

NEMO_COLUMNS = ["model", "gpus", "TP", "PP", "CP", "VP", "GBS", "MBS", "seq_len",
                "tokens_per_s_per_gpu", "source"]
PRECISION = "fp8"         # the rows ran FP8 with Transformer Engine
FP8_RECIPE = "delayed"


def _degree(row, col: str) -> int:
    value = row[col]
    return int(value) if str(value).strip() else 1


def scenario_of(row, root: Path, spec: CasesFile, name: str) -> dict:
    """The scenario mapping of one NeMo row (its model in ``spec.nemo_models``)."""
    tp, pp, cp, vp = (_degree(row, c) for c in ("TP", "PP", "CP", "VP"))
    gpus = int(row["gpus"])
    dp = gpus // (tp * pp * cp)
    micro = int(row["MBS"])
    model = spec.nemo_models[row["model"]]
    strategy = {"name": "megatron", "tensor_model_parallel_size": tp,
                "pipeline_model_parallel_size": pp, "context_parallel_size": cp,
                "sequence_parallel": tp > 1, "use_distributed_optimizer": True,
                "optimizer": "adam"}
    if vp > 1:
        strategy["virtual_pipeline_model_parallel_size"] = vp
    return {"name": name,
            "model": str(Path(root) / model) if model.endswith(".yaml") else model,
            "training": {"micro_batch": micro, "seq_len": int(row["seq_len"]),
                         "grad_accum": int(row["GBS"]) // (micro * dp),
                         "precision": PRECISION, "fp8_recipe": FP8_RECIPE,
                         "flash_attention": True},
            "cluster": {"topology": spec.topologies["nemo"], "nodes": -(-gpus // 8)},
            "strategy": strategy}


def _simulated(metrics, row) -> float:
    tokens = int(row["GBS"]) * int(row["seq_len"])
    return tokens / metrics.iteration_time_s / int(row["gpus"])


def nemo_rows(root: Path, spec: CasesFile, simulate_fn=None) -> list[dict]:
    """One reported row per NeMo row (not simulated: no model config, or what the
    simulator refused)."""
    simulate_fn = simulate_fn or simulate
    out = []
    for row in read_rows(root, spec.files.nemo, NEMO_COLUMNS).to_dict("records"):
        case = f"parallel/nemo/{nemo_id(row)}"
        measured = float(row["tokens_per_s_per_gpu"])
        base = {"case": case, "kind": "nemo", "model": row["model"],
                "mode": f"TP{row['TP']} PP{row['PP']} CP{row['CP']} VP{row['VP']}",
                "quantity": "tokens/s per GPU", "unit": "tokens/s", "measured": measured,
                "bound": math.nan, "ok": None, "source": row["source"],
                "simulated": math.nan, "error": math.nan}
        if row["model"] not in spec.nemo_models:
            out.append({**base, "note": "not simulated: no model config in cases.yaml"})
            continue
        if int(row["gpus"]) > spec.nemo_max_gpus:
            out.append({**base, "note": f"not simulated: {row['gpus']} GPUs, more than the "
                                        f"suite simulates for a reported row "
                                        f"(nemo_max_gpus {spec.nemo_max_gpus})"})
            continue
        try:
            m = simulate_fn(scenario_of(row, root, spec, case), case)
        except ConfigError as exc:
            out.append({**base, "note": f"not simulated: {exc}"})
            continue
        sim = _simulated(m, row)
        out.append({**base, "simulated": sim, "error": (sim - measured) / measured,
                    "note": f"{row['precision']} run simulated in {PRECISION}"})
    return out


__all__ = ["NEMO_COLUMNS", "nemo_rows", "scenario_of"]
