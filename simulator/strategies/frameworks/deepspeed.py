"""DeepSpeed: its JSON config blocks, spelled as DeepSpeed spells them
(``deepspeed/runtime/zero/config.py``), in a scenario (``strategy: {name: deepspeed,
zero_optimization: {...}, tensor_parallel: {...}, pipeline: {...}}``) or in the JSON itself
(``clustersim run --config ds_config.json``), and their translation into one
:class:`~simulator.strategies.parallel.plan.ParallelPlan`. The blocks are read as they are
and validated once, by :class:`DeepSpeedConfig`, whichever way they came in.

========================================  ===================================================
DeepSpeed                                 plan
========================================  ===================================================
zero_optimization.stage 0 / 1 / 2 / 3     dp_mode ddp / zero1 / zero2 / fsdp (ZeRO-3), over
                                          all data-parallel ranks (dp_shard; stage 0:
                                          dp_replicate)
zero_optimization.overlap_comm            overlap_grad_reduce (and the parameter gathers)
zero_optimization.reduce_bucket_size      bucket_params (elements, as DeepSpeed counts)
(stage 3's own copy kernels)              fsdp_copies deepspeed (simulator/strategies/
                                          fsdp_copies.py: the per-parameter cat after a
                                          coalesced gather, the bucket copy, interleave and
                                          pre-divide before a reduce-scatter)
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

The JSON (:func:`read_file`) gives, besides those blocks: ``train_micro_batch_size_per_gpu``,
``gradient_accumulation_steps``, ``train_batch_size`` -> ``training.micro_batch``,
``training.grad_accum``, the global batch; ``bf16.enabled`` / ``fp16.enabled`` ->
``training.precision``. A value ``"auto"`` (the Hugging Face integration fills it in) is
left to the scenario and listed as ignored. Everything else (optimizer, scheduler,
logging, activation_checkpointing: the model code decides whether to checkpoint) is
listed as ignored.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from simulator.errors import ConfigError
from simulator.inputs import check_finite, decode_text, read_bytes

from ..base import CommonConfig, World
from ..ddp import ddp
from ..fsdp import fsdp
from ..parallel.plan import ParallelPlan
from .pieces import ConfigPieces, Doc, check_depth, flat_keys
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
                              f"{tp * pp}", field="strategy.pipeline.stages" if n % tp == 0
                              else "strategy.tensor_parallel.autotp_size")
        dp = n // (tp * pp)
        z = self.zero_optimization
        mode = DP_MODES[z.stage]
        return ParallelPlan(pp=pp, tp=tp, dp_replicate=dp if mode == "ddp" else 1,
                            dp_shard=1 if mode == "ddp" else dp, dp_mode=mode,
                            overlap_grad_reduce=z.overlap_comm,
                            overlap_param_gather=z.overlap_comm,
                            bucket_params=z.reduce_bucket_size, fsdp_copies="deepspeed")

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
                world, copies=plan.fsdp_copies, **meta)


# ------------------------------------------------------------------ the JSON
# the zero_optimization keys a JSON gives the strategy: the config's own fields, and
# ZeRO++'s hierarchical partitioning, read so that the config refuses it by name (not
# modelled) rather than the run going on without it
ZERO_KEYS = (*ZeroOptimization.model_fields, "zero_hpz_partition_size")
BATCH_KEYS = {"train_micro_batch_size_per_gpu": "micro_batch",
              "gradient_accumulation_steps": "grad_accum"}
AUTO = "auto"
GLOBAL_BATCH_KEY = "train_batch_size"


def file_key(field: str) -> str:
    """A strategy field as the JSON spells it (the same dotted key)."""
    return field


def _no_constant(name: str):
    raise ValueError(name)


def load_json(path) -> dict:
    """The checked document of a JSON file (bounded size and depth, UTF-8, no NaN)."""
    source = str(path)
    text = decode_text(read_bytes(path, "DeepSpeed config", "config_bytes"), source,
                       "DeepSpeed config")
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc.msg} at line {exc.lineno}, column "
                          f"{exc.colno}", source=source) from None
    except ValueError as exc:            # NaN, Infinity: parse_constant
        raise ConfigError(f"must be a finite number, got {exc}", source=source) from None
    except RecursionError:
        raise ConfigError("not valid JSON: nested too deeply", source=source) from None
    if not isinstance(data, dict):
        raise ConfigError("top level must be an object of keys", source=source)
    return check_finite(check_depth(data, source), source)


def read_file(path) -> ConfigPieces:
    """The scenario pieces of a DeepSpeed JSON config."""
    data = load_json(path)
    doc = Doc(str(path))
    out = ConfigPieces("deepspeed", str(path), strategy={"name": "deepspeed"})
    seen = _zero(data, doc, out) | _batch(data, doc, out) | _precision(data, doc, out)
    seen |= _degrees(data, doc, out)
    for key in flat_keys(data):
        if key not in seen:
            out.ignore(key)
    return out


def _zero(data: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    if "zero_optimization" not in data:
        return set()
    table = doc.table(data["zero_optimization"], "zero_optimization")
    zero, seen = {}, set()
    for key in ZERO_KEYS:
        if key not in table:
            continue
        where = f"zero_optimization.{key}"
        seen |= {where} | {k for k in flat_keys(table, "zero_optimization")
                           if k.startswith(where + ".")}
        if table[key] == AUTO:
            out.ignore(where, "auto")
            continue
        zero[key] = table[key]
        out.use(where)
    out.strategy["zero_optimization"] = zero
    return seen


def _batch(data: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    seen = set()
    for key, ours in BATCH_KEYS.items():
        if key in data:
            seen.add(key)
            if data[key] == AUTO:
                out.ignore(key, "auto")
            else:
                out.training[ours] = doc.integer(data[key], key)
                out.use(key)
    if "train_batch_size" in data:
        seen.add("train_batch_size")
        if data["train_batch_size"] == AUTO:
            out.ignore("train_batch_size", "auto")
        else:
            out.global_batch = doc.integer(data["train_batch_size"], "train_batch_size")
            out.use("train_batch_size")
    return seen


def _precision(data: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    seen = set()
    for section, precision in (("bf16", "bf16"), ("fp16", "fp16")):
        if section not in data:
            continue
        table = doc.table(data[section], section)
        if "enabled" not in table:
            continue
        seen.add(f"{section}.enabled")
        if table["enabled"] == AUTO:
            out.ignore(f"{section}.enabled", "auto")
        elif doc.boolean(table["enabled"], f"{section}.enabled"):
            if "precision" in out.training:
                raise doc.fail(f"{section}.enabled", "bf16 and fp16 are both enabled")
            out.training["precision"] = precision
            out.use(f"{section}.enabled")
        else:
            out.use(f"{section}.enabled")
    return seen


def _degrees(data: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    seen = set()
    for section, key in (("tensor_parallel", "autotp_size"), ("pipeline", "stages")):
        if section not in data:
            continue
        table = doc.table(data[section], section)
        if key not in table:
            continue
        seen.add(f"{section}.{key}")
        if table[key] == AUTO:
            out.ignore(f"{section}.{key}", "auto")
            continue
        out.strategy[section] = {key: table[key]}
        out.use(f"{section}.{key}")
    return seen
