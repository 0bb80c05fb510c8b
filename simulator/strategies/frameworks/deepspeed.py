"""``strategy: {name: deepspeed, zero_optimization: {...}, tensor_parallel: {...},
pipeline: {...}}``: DeepSpeed's JSON config blocks, spelled as DeepSpeed spells them
(``deepspeed/runtime/zero/config.py``), translated into one
:class:`~simulator.strategies.parallel.plan.ParallelPlan`.

========================================  ===================================================
DeepSpeed                                 plan
========================================  ===================================================
zero_optimization.stage 0 / 1 / 2 / 3     dp_mode ddp / zero1 / zero2 / fsdp (ZeRO-3), over
                                          all data-parallel ranks (dp_shard; stage 0:
                                          dp_replicate)
zero_optimization.overlap_comm            overlap_grad_reduce (and the parameter gathers)
zero_optimization.reduce_bucket_size      bucket_params (elements, as DeepSpeed counts)
tensor_parallel.autotp_size               tp (AutoTP training)
pipeline.stages                           pp (PipelineModule's stages, 1F1B as DeepSpeed
                                          schedules them)
========================================  ===================================================

Accepted and checked, with no effect on time or memory here (DeepSpeed's buffer handling):
``contiguous_gradients``, ``allgather_bucket_size``, ``reduce_scatter``,
``allgather_partitions``, ``stage3_prefetch_bucket_size``,
``stage3_param_persistence_threshold``, ``stage3_max_live_parameters``. CPU offload:
``offload_param`` + ``offload_optimizer`` both on ``cpu`` with stage 3 is FSDP's CPU
offload (parameters and gradients in host memory, the optimizer step on the CPU); any
other offload is refused naming the field (not modelled).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from simulator.errors import ConfigError

from ..base import CommonConfig, World
from ..ddp import ddp
from ..fsdp import fsdp
from ..parallel.plan import ParallelPlan
from .translate import build_framework, data_parallel_config

DP_MODES = {0: "ddp", 1: "zero1", 2: "zero2", 3: "fsdp"}
_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


class Offload(BaseModel):
    model_config = _STRICT
    device: Literal["none", "cpu", "nvme"] = "none"
    pin_memory: bool = False
    nvme_path: str | None = None
    buffer_count: int | None = Field(None, ge=1)
    ratio: float | None = Field(None, ge=0.0, le=1.0)


class ZeroOptimization(BaseModel):
    """DeepSpeed's ``zero_optimization`` block (the keys modelled or checked here);
    bucket sizes are elements, as DeepSpeed counts them."""

    model_config = _STRICT
    stage: Literal[0, 1, 2, 3] = 0
    overlap_comm: bool = False
    contiguous_gradients: bool = True
    reduce_bucket_size: int = Field(500_000_000, ge=1)
    allgather_bucket_size: int = Field(500_000_000, ge=1)
    reduce_scatter: bool = True
    allgather_partitions: bool = True
    offload_optimizer: Offload | None = None
    offload_param: Offload | None = None
    stage3_prefetch_bucket_size: int = Field(50_000_000, ge=0)
    stage3_param_persistence_threshold: int = Field(100_000, ge=0)
    stage3_max_live_parameters: int = Field(1_000_000_000, ge=0)

    @field_validator("reduce_bucket_size", "allgather_bucket_size",
                     "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                     "stage3_max_live_parameters", mode="before")
    @classmethod
    def _whole(cls, v):
        """JSON configs write element counts as ``5e8``: a whole float is that integer."""
        return int(v) if isinstance(v, float) and v.is_integer() else v


class TensorParallel(BaseModel):
    model_config = _STRICT
    autotp_size: int = Field(1, ge=1)


class Pipeline(BaseModel):
    model_config = _STRICT
    stages: int = Field(1, ge=1)


class DeepSpeedConfig(CommonConfig):
    """``strategy: {name: deepspeed, ...}``."""

    name: str = "deepspeed"
    zero_optimization: ZeroOptimization = Field(default_factory=ZeroOptimization)
    tensor_parallel: TensorParallel = Field(default_factory=TensorParallel)
    pipeline: Pipeline = Field(default_factory=Pipeline)

    def _check(self) -> None:
        if self.name != "deepspeed":
            raise ConfigError(f"expected 'deepspeed', got {self.name!r}", field="strategy.name")
        if self.pipeline.stages > 1 and self.zero_optimization.stage > 1:
            # DeepSpeed's PipelineEngine asserts this (runtime/pipe/engine.py)
            raise ConfigError(f"ZeRO stage {self.zero_optimization.stage} does not run with "
                              f"pipeline parallelism in DeepSpeed (stage 0 or 1 only)",
                              field="strategy.zero_optimization.stage")
        self.cpu_offload()

    def cpu_offload(self) -> bool:
        """Whether ZeRO-3 keeps parameters and optimizer in host memory (both on ``cpu``).

        :raises ConfigError: an offload this model does not have."""
        z = self.zero_optimization
        devices = {k: (getattr(z, k).device if getattr(z, k) else "none")
                   for k in ("offload_param", "offload_optimizer")}
        if set(devices.values()) == {"none"}:
            return False
        if devices == {"offload_param": "cpu", "offload_optimizer": "cpu"} and z.stage == 3:
            return True
        bad = next(k for k, v in devices.items() if v != "none")
        raise ConfigError("only offload_param and offload_optimizer both on cpu with stage 3 "
                          "is modelled (FSDP's CPU offload)",
                          field=f"strategy.zero_optimization.{bad}.device")

    def plan(self, world: World | int, layers: int = 0) -> ParallelPlan:
        """The plan on ``world`` ranks: the data-parallel ranks are what TP and PP leave."""
        n = world.world_size if isinstance(world, World) else int(world)
        tp, pp = self.tensor_parallel.autotp_size, self.pipeline.stages
        if n % (tp * pp):
            raise ConfigError(f"{n} GPUs are not a multiple of autotp_size x stages = "
                              f"{tp * pp}", field="strategy.tensor_parallel.autotp_size")
        dp = n // (tp * pp)
        z = self.zero_optimization
        mode = DP_MODES[z.stage]
        return ParallelPlan(pp=pp, tp=tp, dp_replicate=dp if mode == "ddp" else 1,
                            dp_shard=1 if mode == "ddp" else dp, dp_mode=mode,
                            overlap_grad_reduce=z.overlap_comm,
                            overlap_param_gather=z.overlap_comm,
                            bucket_params=z.reduce_bucket_size)

    def plan_fields(self) -> dict[str, str]:
        """Plan attribute -> the field a user wrote it as (for ParallelPlan.check)."""
        return {"tp": "strategy.tensor_parallel.autotp_size", "pp": "strategy.pipeline.stages",
                "size": "strategy.tensor_parallel.autotp_size",
                "micro_batches": "training.grad_accum"}

    def for_layers(self, layers: int) -> "DeepSpeedConfig":
        return self


def deepspeed(layers, cfg: DeepSpeedConfig, world: World, **kw) -> Any:
    """The trace of one iteration (:func:`.translate.build_framework`); without TP/PP,
    ZeRO-0 and ZeRO-3 by the DDP/FSDP generators."""
    return build_framework(layers, cfg, world, _data_parallel, **kw)


def _data_parallel(layers, cfg: DeepSpeedConfig, plan: ParallelPlan, world: World, **meta):
    """ZeRO-0 as DDP with gradient buckets of ``reduce_bucket_size`` elements, ZeRO-3 as
    FSDP (with its CPU offload when both offloads are on the CPU)."""
    if plan.dp_mode == "ddp":
        bucket_mb = cfg.zero_optimization.reduce_bucket_size * cfg.grad_reduce_bytes() / (1 << 20)
        # DeepSpeed keeps the 16-bit weights it computes with (no autocast over fp32)
        return ddp(layers, data_parallel_config(
            cfg, plan, bucket_cap_mb=bucket_mb,
            param_dtype=cfg.param_dtype or cfg.default_param_dtype()), world, **meta)
    return fsdp(layers, data_parallel_config(cfg, plan, cpu_offload=cfg.cpu_offload()),
                world, **meta)
