"""A candidate as a scenario strategy mapping, spelled as a framework spells it, so that
its replay goes through the same strategies ``clustersim run`` uses: torchtitan for FSDP /
HSDP / DDP (with TP, PP, CP), Megatron-LM for the distributed optimizer (zero1)."""

from __future__ import annotations

from ..strategies.frameworks.translate import pure_data_parallel
from ..strategies import STRATEGIES
from .space import Candidate, model_parallel_available

TORCHTITAN_SCHEDULES = {"1f1b": "1F1B", "interleaved_1f1b": "Interleaved1F1B",
                        "gpipe": "GPipe", "zbv": "ZBVZeroBubble"}


def strategy_of(c: Candidate, layers: int) -> dict | None:
    """The strategy mapping that replays ``c``; None when this build has none for it."""
    p = c.plan
    if not pure_data_parallel(p) and not model_parallel_available():
        return None
    if p.dp_mode == "zero1":
        return _megatron(c) if "megatron" in STRATEGIES else None
    if p.schedule not in TORCHTITAN_SCHEDULES:
        return None
    par = {"data_parallel_replicate_degree": p.dp_replicate,
           "data_parallel_shard_degree": p.dp_shard, "tensor_parallel_degree": p.tp,
           "pipeline_parallel_degree": p.pp, "context_parallel_degree": p.cp,
           "pipeline_parallel_schedule": TORCHTITAN_SCHEDULES[p.schedule]}
    if p.ep > 1:
        par["expert_parallel_degree"] = p.ep
    if p.dp_mode == "zero2":               # ZeRO-2 is DeepSpeed's: no torchtitan spelling
        return None
    if p.dp_mode == "fsdp":                # under PP: torchtitan's never (its default)
        par["fsdp_reshard_after_forward"] = ("always" if p.pp == 1 and p.reshard_after_forward
                                             else "never")
    if p.vp > 1:
        par["pipeline_parallel_layers_per_stage"] = layers // (p.pp * p.vp)
    ac = {"mode": c.ac} | ({"selective_ac_option": "op"} if c.ac == "selective" else {})
    return {"name": "torchtitan", "parallelism": par, "activation_checkpoint": ac}


def _megatron(c: Candidate) -> dict:
    p = c.plan
    out = {"name": "megatron", "tensor_model_parallel_size": p.tp,
           "pipeline_model_parallel_size": p.pp, "context_parallel_size": p.cp,
           "sequence_parallel": p.sequence_parallel, "use_distributed_optimizer": True,
           "overlap_grad_reduce": True}
    if p.vp > 1:
        out["virtual_pipeline_model_parallel_size"] = p.vp
    if p.ep > 1:
        out["expert_model_parallel_size"] = p.ep
    if c.ac != "none":
        out["recompute_granularity"] = c.ac
    return out
