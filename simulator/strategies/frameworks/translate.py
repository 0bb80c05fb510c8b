"""What the framework strategies (``torchtitan``, ``deepspeed``) share: their checkpointing
spelled as the common config's, and the trace of a plan that is data parallelism only.

A plan with ``pp = tp = cp = ep = 1`` and ``dp_mode`` fsdp or ddp is the job the existing,
validated data-parallel generators already replay (:func:`simulator.strategies.fsdp.fsdp`
with an FSDP2 mesh ``[dp_replicate, dp_shard]``, :func:`simulator.strategies.ddp.ddp`);
:func:`data_parallel_config` gives the equivalent config, so such a job costs what the same
job under ``strategy: fsdp`` costs.
"""

from __future__ import annotations

from typing import Any

from simulator.errors import ConfigError

from ..base import CommonConfig
from ..ddp import DDPConfig, ddp
from ..fsdp import fsdp
from ..fsdp_config import FSDPConfig
from ..parallel.plan import ParallelPlan

# CommonConfig fields a framework strategy hands on to the data-parallel generators
SHARED_FIELDS = ("precision", "micro_batch", "grad_accum", "activation_checkpointing",
                 "selective_ac_option", "activation_offload", "optimizer", "optimizer_impl",
                 "param_dtype", "reduce_dtype", "host_dispatch")


def has_ac_modes() -> bool:
    """Whether this build's common config takes none | full | selective checkpointing."""
    return "selective_ac_option" in CommonConfig.model_fields


def ac_fields(mode: str, option: str | int | None, field: str) -> dict[str, Any]:
    """The common config's checkpointing fields for a framework's ``mode`` (none | full |
    selective) and selective option (``op``, ``attention`` or every Nth block)."""
    if has_ac_modes():
        out: dict[str, Any] = {"activation_checkpointing": mode}
        if mode == "selective" and option is not None:
            out["selective_ac_option"] = option
        return out
    if mode == "selective":
        raise ConfigError("selective checkpointing is not in this build (none or full)",
                          field=field)
    return {"activation_checkpointing": mode == "full"}


def pure_data_parallel(plan: ParallelPlan) -> bool:
    """Whether ``plan`` is a job the data-parallel generators replay as it is (their FSDP is
    FSDP2's, with its copy kernels; Megatron-FSDP's buffers go to the model-parallel one)."""
    return (plan.pp == plan.tp == plan.cp == plan.ep == 1
            and (plan.dp_mode == "fsdp" and plan.fsdp_copies != "none"
                 or plan.dp_mode == "ddp" and plan.dp_shard == 1))


def data_parallel_config(cfg: CommonConfig, plan: ParallelPlan,
                         **extra: Any) -> FSDPConfig | DDPConfig:
    """The ``fsdp`` (FSDP2 mesh) or ``ddp`` config of a :func:`pure_data_parallel` plan."""
    shared = {k: getattr(cfg, k) for k in SHARED_FIELDS if k in CommonConfig.model_fields}
    shared.update(extra)
    if plan.dp_mode == "ddp":
        return DDPConfig(name="ddp", **shared)
    return FSDPConfig(name="fsdp", mesh=[plan.dp_replicate, plan.dp_shard],
                      reshard_after_forward=plan.reshard_after_forward, **shared)


def full_layers(layers, cfg: CommonConfig, spec, seq_len: int, flash: bool,
                autocast: bool, compile: bool = False, fp8_recipe: str | None = None,
                elementwise: str = "fused", dp_fp8_weights: bool = False):
    """``layers`` if given, else the unsharded per-layer costs of one micro-batch (what
    the data-parallel generators take; a planned strategy is called without them), their
    blocks' GEMMs in FP8 where ``fp8_recipe`` is given (their weights gathered in FP8
    where ``dp_fp8_weights``, :meth:`~simulator.strategies.base.CommonConfig.
    fp8_weight_gathers`), their weight gradients accumulating into the config's gradient
    buffer where it keeps one (:meth:`with_main_grad`)."""
    if layers is not None:
        return layers
    from simulator.models import layer_costs
    from simulator.precision import FP8
    if fp8_recipe is not None:
        layers = layer_costs(spec, cfg.micro_batch, seq_len, FP8, flash, autocast=autocast,
                             compile=compile, fp8_recipe=fp8_recipe, elementwise=elementwise,
                             fp8_weight_reuse=cfg.fp8_weight_reuse(fp8_recipe),
                             dp_fp8_weights=dp_fp8_weights)
    else:
        layers = layer_costs(spec, cfg.micro_batch, seq_len, cfg.precision, flash,
                             autocast=autocast, compile=compile, elementwise=elementwise)
    return cfg.with_main_grad(layers)


def build_framework(layers, cfg, world, dp_trace, *, spec=None, seq_len: int = 0,
                    flash: bool = True, autocast: bool = False, compile: bool = False,
                    fp8_recipe: str | None = None, elementwise: str = "fused", **meta):
    """A framework strategy's trace: a :func:`pure_data_parallel` plan by ``dp_trace``
    (the FSDP/DDP generators, on full-model layer costs), any other by the model-parallel
    generator (:func:`simulator.strategies.parallel.generate.build_planned`)."""
    plan = cfg.plan(world.world_size, spec.layers if spec is not None else 0)
    cfg.check_fp8(fp8_recipe)
    if pure_data_parallel(plan):
        layers = full_layers(layers, cfg, spec, seq_len, flash, autocast, compile, fp8_recipe,
                             elementwise, cfg.fp8_weight_gathers(fp8_recipe, plan))
        trace = dp_trace(layers, cfg, plan, world, **meta)
        trace.meta["strategy"] = cfg.name
        return trace
    if spec is None:
        raise ConfigError(f"the plan {plan.describe()} needs the model (called without it)",
                          field="strategy")
    from ..parallel.generate import build_planned
    return build_planned(layers, cfg.for_layers(spec.layers), world, spec=spec,
                         seq_len=seq_len, flash=flash, autocast=autocast, compile=compile,
                         fp8_recipe=fp8_recipe, elementwise=elementwise, **meta)


def data_parallel_trace(layers, cfg: CommonConfig, plan: ParallelPlan, world, **meta):
    """The trace of a :func:`pure_data_parallel` plan by the data-parallel generators."""
    dp_cfg = data_parallel_config(cfg, plan)
    build = ddp if isinstance(dp_cfg, DDPConfig) else fsdp
    return build(layers, dp_cfg, world, **meta)
