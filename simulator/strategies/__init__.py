"""Training strategies: per-layer costs + a parallelism config -> one iteration's Trace.

A strategy is ``build(layers, cfg, world, *, model="", tokens_per_sample=0,
model_flops_per_sample=None) -> Trace``; ``layers`` are ``simulator.models.layer_costs`` of
one micro-batch (``batch = cfg.micro_batch``). ``parse_strategy`` turns a YAML mapping
(``{name: fsdp, sharding: HYBRID_SHARD, ...}``) into the config, raising ConfigError that
names ``strategy.<field>``.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any, Callable

from simulator.errors import ConfigError
from simulator.lazy import LazyDict
from simulator.trace import Trace

from .base import CommonConfig, World
from .ddp import DDPConfig, assign_buckets, ddp
from .fsdp import fsdp
from .fsdp_config import SHARDINGS, FSDPConfig, ShardPlan, resolve_plan


@dataclass(frozen=True)
class Strategy:
    name: str
    description: str
    config: type[CommonConfig]
    build: Callable[..., Trace]


# The strategies other than DDP and FSDP: each loads (its module, and the 3-D parallel stack
# behind megatron, torchtitan and deepspeed) when a scenario names it (start-up time).
_DEFERRED = {
    "tf_mirrored": "TensorFlow MirroredStrategy (one machine): NcclAllReduce packs, "
                   "HierarchicalCopyAllReduce or ReductionToOneDevice after backward",
    "tf_multiworker": "TensorFlow MultiWorkerMirroredStrategy: CollectiveAllReduce (RING or "
                      "NCCL) of bytes_per_pack packs",
    "tf_ps": "TensorFlow ParameterServerStrategy: variables on parameter servers, "
             "asynchronous workers pull variables and push gradients",
    "tf_central_storage": "TensorFlow CentralStorageStrategy: variables in host memory, "
                          "replicas on the local GPUs",
    "horovod": "Horovod with TensorFlow: fused NCCL all-reduces (fusion threshold, cycle "
               "time) overlapped with backward",
    "megatron": "Megatron-LM: tensor (+sequence), pipeline (1F1B, interleaved) and data "
                "parallelism (DDP or distributed optimizer), its argument names",
    "torchtitan": "torchtitan: FSDP2 x TP/SP x PP x CP x EP from the [parallelism] and "
                  "[activation_checkpoint] tables of its TOML",
    "deepspeed": "DeepSpeed: ZeRO stage 0-3 (zero_optimization), AutoTP and pipeline stages",
}


def _load(name: str) -> Strategy:
    """The deferred strategy ``name``, its imports done here."""
    if name == "tf_mirrored":
        from .tf_mirrored import MirroredConfig as config, tf_mirrored as build
    elif name == "tf_multiworker":
        from .tf_multiworker import MultiWorkerConfig as config, tf_multiworker as build
    elif name == "tf_ps":
        from .tf_ps import PSConfig as config, tf_ps as build
    elif name == "tf_central_storage":
        from .tf_central import CentralStorageConfig as config, tf_central_storage as build
    elif name == "horovod":
        from .horovod import HorovodConfig as config, horovod as build
    elif name == "megatron":
        from .frameworks.megatron import MegatronConfig as config
        from .parallel.generate import build_planned as build
    elif name == "torchtitan":
        from .frameworks.torchtitan import TorchtitanConfig as config
        from .frameworks.torchtitan import torchtitan as build
    elif name == "deepspeed":
        from .frameworks.deepspeed import DeepSpeedConfig as config
        from .frameworks.deepspeed import deepspeed as build
    else:
        raise KeyError(name)
    return Strategy(name, _DEFERRED[name], config, build)


STRATEGIES: MutableMapping[str, Strategy] = LazyDict({
    "ddp": Strategy("ddp", "PyTorch DDP: full replicas, bucketed gradient all-reduce "
                    "overlapped with backward", DDPConfig, ddp),
    "fsdp": Strategy("fsdp", "PyTorch FSDP/FSDP2 (ZeRO-3 style): sharded params, all-gather "
                     "per unit, gradient reduce-scatter; HSDP", FSDPConfig, fsdp),
}, _DEFERRED, _load)


def parse_strategy(data: Any, source: str | None = None) -> CommonConfig:
    """The config of ``data['name']`` validated from the mapping ``data``."""
    try:
        if not isinstance(data, dict):
            raise ConfigError("must be a mapping with a 'name'", field="strategy")
        name = data.get("name")
        if not isinstance(name, str) or name not in STRATEGIES:
            raise ConfigError(f"unknown strategy {name!r}; valid: {', '.join(STRATEGIES)}",
                              field="strategy.name")
        return STRATEGIES[name].config(**data)
    except ConfigError as exc:
        raise (exc.located(source) if source else exc) from None


def build_trace(layers, cfg: CommonConfig, world: World, **meta: Any) -> Trace:
    """Run the strategy named by ``cfg.name``."""
    return STRATEGIES[cfg.name].build(layers, cfg, world, **meta)


# The TensorFlow and Horovod configs and generators are imported from their own modules
# (simulator.strategies.tf_ps, ...), which load only when used.
__all__ = ["SHARDINGS", "STRATEGIES", "CommonConfig", "DDPConfig", "FSDPConfig", "ShardPlan",
           "Strategy", "World", "assign_buckets", "build_trace", "ddp", "fsdp",
           "parse_strategy", "resolve_plan"]
