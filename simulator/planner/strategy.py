"""A candidate as a scenario strategy mapping, spelled as a framework spells it, so that
its replay goes through the same strategies ``clustersim run`` uses: torchtitan for FSDP /
HSDP (with TP, PP, CP) and DDP without model parallelism, Megatron-LM for the distributed
optimizer (zero1) and for DDP with TP or PP (torchtitan trains those in fp32).

The scenario's own strategy settings of either framework go into that framework's
candidates (:func:`carried`): what the plan searches (the degrees, the schedule, the
checkpointing, the data-parallel mode) it sets itself; what holds for one layout only (a
pipeline layout, first/last stage sizes, expert TP) is left out and said; the rest (FP8 parameters, TP overlap, CUDA graphs, the loss fusion, ...)
is carried, so a candidate of the scenario's own layout costs what ``run`` gives it. A
scenario of another strategy (``fsdp``, ``ddp``, ``deepspeed``, ...) carries nothing: its
settings other than what the plan searches are said."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..strategies.frameworks.translate import pure_data_parallel
from ..strategies import STRATEGIES
from .space import Candidate, model_parallel_available

# the strategies a candidate is spelled in (:func:`strategy_of`)
SPELLINGS = ("torchtitan", "megatron", "fsdp", "ddp")
TORCHTITAN_SCHEDULES = {"1f1b": "1F1B", "interleaved_1f1b": "Interleaved1F1B",
                        "gpipe": "GPipe", "zbv": "ZBVZeroBubble"}
# what a candidate sets (the search: degrees, schedule, checkpointing, the data-parallel
# mode, the batch), in any strategy's spelling; of the frameworks the candidates are
# spelled in, their own keys for it
SEARCHED_ANYWHERE = frozenset({"name", "micro_batch", "grad_accum", "activation_checkpointing",
                               "selective_ac_option", "sharding"})
SEARCHED = {
    "megatron": SEARCHED_ANYWHERE | {
        "tensor_model_parallel_size", "pipeline_model_parallel_size",
        "context_parallel_size", "virtual_pipeline_model_parallel_size",
        "expert_model_parallel_size", "sequence_parallel", "use_distributed_optimizer",
        "use_torch_fsdp2", "use_megatron_fsdp", "overlap_grad_reduce",
        "recompute_granularity", "recompute_method", "recompute_num_layers",
        "recompute_modules"},
    "torchtitan": SEARCHED_ANYWHERE | {"activation_checkpoint"},
}
# settings of one layout only: not carried into other layouts
LAYOUT_ONLY = {
    "megatron": frozenset({
        "pipeline_model_parallel_layout", "decoder_first_pipeline_num_layers",
        "decoder_last_pipeline_num_layers", "account_for_embedding_in_pipeline_split",
        "account_for_loss_in_pipeline_split", "expert_tensor_parallel_size"}),
    "torchtitan": frozenset(),
}
def _zero1(plan) -> bool:
    """Whether ``plan`` runs Megatron's distributed optimizer."""
    return plan.dp_mode == "zero1"


# the workload's settings, not a framework's: how an MoE layer's tokens are routed (the
# data and the router), carried into the candidates of every framework that takes it
WORKLOAD = ("moe_load",)
# carried settings that need a degree or a data-parallel mode the candidate may not have:
# in those candidates only (Megatron refuses the EP all-to-all overlap without expert
# parallelism, and the parameter all-gather's overlap, FP8 parameters and the
# precision-aware optimizer's dtypes without the distributed optimizer: a Megatron DDP
# candidate keeps bf16 parameters and fp32 optimizer state)
ONLY_WHERE = {"overlap_moe_expert_parallel_comm": lambda plan: plan.ep > 1,
              **dict.fromkeys(("overlap_param_gather", "fp8_param_gather",
                               "use_precision_aware_optimizer", "main_grads_dtype",
                               "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype",
                               "store_param_remainders"), _zero1)}
# torchtitan's [parallelism] keys that are not degrees or the schedule
TORCHTITAN_CARRIED_PARALLELISM = frozenset({
    "enable_async_tensor_parallel", "disable_loss_parallel", "context_parallel_rotate_method"})


@dataclass(frozen=True)
class Carried:
    """The scenario's strategy settings the candidates of ``framework`` take (``settings``,
    and torchtitan's ``parallelism`` keys), and those no candidate takes (``left``, as
    ``strategy.<key>``); ``of``: the scenario's strategy name."""

    of: str = ""
    framework: str = ""
    settings: dict = field(default_factory=dict)
    parallelism: dict = field(default_factory=dict)
    left: tuple[str, ...] = ()
    # the scenario's :data:`WORKLOAD` settings, which every framework's candidates take
    workload: dict = field(default_factory=dict)
    # the step's FP8 recipe is Transformer Engine's, which torchtitan does not run (torchao's
    # float8 only): the candidates without model parallelism are spelled as PyTorch's own
    # FSDP2 (``fsdp``, its mesh) or DDP (``ddp``), which run it as llm-foundry's Composer does
    te_fp8: bool = False


def carried(strategy: dict) -> Carried:
    """What of the scenario's ``strategy`` mapping the candidates carry (module doc)."""
    name = str(strategy.get("name", ""))
    if name not in SEARCHED:
        return Carried(name, left=tuple(f"strategy.{k}" for k in sorted(strategy)
                                        if k not in SEARCHED_ANYWHERE))
    settings = {k: v for k, v in strategy.items()
                if k not in SEARCHED[name] and k not in LAYOUT_ONLY[name] and k != "parallelism"}
    left = [f"strategy.{k}" for k in sorted(strategy) if k in LAYOUT_ONLY[name]]
    par = strategy.get("parallelism") or {}
    left += [f"strategy.parallelism.{k}" for k in sorted(par)
             if k == "pipeline_parallel_split_points"]
    return Carried(name, name, settings,
                   {k: v for k, v in par.items() if k in TORCHTITAN_CARRIED_PARALLELISM},
                   tuple(left), {k: strategy[k] for k in WORKLOAD if k in strategy})


def taken_by(carry: Carried, framework: str) -> dict:
    """The scenario's settings ``framework``'s candidates take: all carried ones where the
    scenario is of that framework, its workload's (:data:`WORKLOAD`) otherwise."""
    return carry.settings if carry.framework == framework else carry.workload


def strategy_of(c: Candidate, layers: int, carry: Carried = Carried()) -> dict | None:
    """The strategy mapping that replays ``c`` (with ``carry``'s settings where it is of
    their framework); None when this build has none for it."""
    p = c.plan
    if not pure_data_parallel(p) and not model_parallel_available():
        return None
    # ZeRO-1 is Megatron's distributed optimizer; DDP with model parallelism Megatron's
    # DDP too, since torchtitan trains TP or PP without FSDP in fp32 (maybe_enable_amp)
    if p.dp_mode == "zero1" or p.dp_mode == "ddp" and not pure_data_parallel(p):
        if "megatron" not in STRATEGIES:
            return None
        own = taken_by(carry, "megatron")
        return {**{k: v for k, v in own.items() if k not in ONLY_WHERE or ONLY_WHERE[k](p)},
                **_megatron(c)}
    if p.schedule not in TORCHTITAN_SCHEDULES:
        return None
    if carry.te_fp8 and pure_data_parallel(p):
        return _pytorch(c)
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
    if carry.framework != "torchtitan":
        return {**carry.workload, "name": "torchtitan", "parallelism": par,
                "activation_checkpoint": ac}
    return {**carry.settings, "name": "torchtitan",
            "parallelism": {**carry.parallelism, **par}, "activation_checkpoint": ac}


def carried_lines(carry: Carried) -> list[str]:
    """What :func:`carried` made of the scenario's strategy, as lines for the answer."""
    lines = []
    if carry.te_fp8:
        lines.append("a Transformer Engine FP8 recipe: the candidates without model "
                     "parallelism are PyTorch FSDP2 or DDP with Transformer Engine (fsdp, "
                     "ddp), the other FSDP/HSDP ones torchtitan's, which runs torchao's "
                     "float8 only")
    taken = {**{k: v for k, v in carry.settings.items() if k not in carry.workload},
             **{f"parallelism.{k}": v for k, v in carry.parallelism.items()}}
    if taken:
        lines.append(f"the scenario's {carry.framework} settings in its {carry.framework} "
                     f"candidates: " + ", ".join(f"{k}={v}" for k, v in sorted(taken.items())))
    if carry.workload:
        lines.append("the scenario's routing in the candidates of every framework: "
                     + ", ".join(f"{k}={v}" for k, v in sorted(carry.workload.items())))
    if carry.left:
        why = ("they hold for one layout" if carry.framework else
               f"the candidates carry the settings of a torchtitan or megatron scenario "
               f"only; this one's strategy is {carry.of}")
        lines.append(f"not in any candidate ({why}): {', '.join(carry.left)}")
    return lines


def _pytorch(c: Candidate) -> dict:
    """A candidate without model parallelism as PyTorch's own FSDP2 (its [replicate,
    shard] mesh) or DDP: the same trace as torchtitan's spelling of it
    (:func:`~simulator.strategies.frameworks.translate.data_parallel_config`)."""
    p = c.plan
    ac = {"activation_checkpointing": c.ac} | (
        {"selective_ac_option": "op"} if c.ac == "selective" else {})
    if p.dp_mode == "ddp":
        return {"name": "ddp", **ac}
    return {"name": "fsdp", "mesh": [p.dp_replicate, p.dp_shard],
            "reshard_after_forward": p.reshard_after_forward, **ac}


def _megatron(c: Candidate) -> dict:
    p = c.plan
    out = {"name": "megatron", "tensor_model_parallel_size": p.tp,
           "pipeline_model_parallel_size": p.pp, "context_parallel_size": p.cp,
           "sequence_parallel": p.sequence_parallel,
           "use_distributed_optimizer": p.dp_mode == "zero1", "overlap_grad_reduce": True}
    if p.vp > 1:
        out["virtual_pipeline_model_parallel_size"] = p.vp
    if p.ep > 1:
        out["expert_model_parallel_size"] = p.ep
    if c.ac != "none":
        out["recompute_granularity"] = c.ac
    return out
