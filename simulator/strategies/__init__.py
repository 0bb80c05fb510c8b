"""Training strategies: per-layer costs + a parallelism config -> one iteration's Trace.

A strategy is ``build(layers, cfg, world, *, model="", tokens_per_sample=0,
model_flops_per_sample=None) -> Trace``; ``layers`` are ``simulator.models.layer_costs`` of
one micro-batch (``batch = cfg.micro_batch``). ``parse_strategy`` turns a YAML mapping
(``{name: fsdp, sharding: HYBRID_SHARD, ...}``) into the config, raising ConfigError that
names ``strategy.<field>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from simulator.errors import ConfigError
from simulator.parallel.frameworks.deepspeed import DeepSpeedConfig, deepspeed
from simulator.parallel.frameworks.megatron import MegatronConfig
from simulator.parallel.frameworks.torchtitan import TorchtitanConfig, torchtitan
from simulator.parallel.generate import build_planned
from simulator.trace import Trace

from .base import CommonConfig, World
from .ddp import DDPConfig, assign_buckets, ddp
from .fsdp import fsdp
from .fsdp_config import SHARDINGS, FSDPConfig, ShardPlan, resolve_plan
from .horovod import HorovodConfig, horovod
from .tf_central import CentralStorageConfig, tf_central_storage
from .tf_mirrored import MirroredConfig, tf_mirrored
from .tf_multiworker import MultiWorkerConfig, tf_multiworker
from .tf_ps import PSConfig, tf_ps


@dataclass(frozen=True)
class Strategy:
    name: str
    description: str
    config: type[CommonConfig]
    build: Callable[..., Trace]


STRATEGIES: dict[str, Strategy] = {
    "ddp": Strategy("ddp", "PyTorch DDP: full replicas, bucketed gradient all-reduce "
                    "overlapped with backward", DDPConfig, ddp),
    "fsdp": Strategy("fsdp", "PyTorch FSDP/FSDP2 (ZeRO-3 style): sharded params, all-gather "
                     "per unit, gradient reduce-scatter; HSDP", FSDPConfig, fsdp),
    "tf_mirrored": Strategy("tf_mirrored", "TensorFlow MirroredStrategy (one machine): "
                            "NcclAllReduce packs, HierarchicalCopyAllReduce or "
                            "ReductionToOneDevice after backward", MirroredConfig, tf_mirrored),
    "tf_multiworker": Strategy("tf_multiworker", "TensorFlow MultiWorkerMirroredStrategy: "
                               "CollectiveAllReduce (RING or NCCL) of bytes_per_pack packs",
                               MultiWorkerConfig, tf_multiworker),
    "tf_ps": Strategy("tf_ps", "TensorFlow ParameterServerStrategy: variables on parameter "
                      "servers, asynchronous workers pull variables and push gradients",
                      PSConfig, tf_ps),
    "tf_central_storage": Strategy("tf_central_storage", "TensorFlow CentralStorageStrategy: "
                                   "variables in host memory, replicas on the local GPUs",
                                   CentralStorageConfig, tf_central_storage),
    "horovod": Strategy("horovod", "Horovod with TensorFlow: fused NCCL all-reduces "
                        "(fusion threshold, cycle time) overlapped with backward",
                        HorovodConfig, horovod),
    "megatron": Strategy("megatron", "Megatron-LM: tensor (+sequence), pipeline (1F1B, "
                         "interleaved) and data parallelism (DDP or distributed optimizer), "
                         "its argument names", MegatronConfig, build_planned),
    "torchtitan": Strategy("torchtitan", "torchtitan: FSDP2 x TP/SP x PP x CP x EP from the "
                           "[parallelism] and [activation_checkpoint] tables of its TOML",
                           TorchtitanConfig, torchtitan),
    "deepspeed": Strategy("deepspeed", "DeepSpeed: ZeRO stage 0-3 (zero_optimization), "
                          "AutoTP and pipeline stages", DeepSpeedConfig, deepspeed),
}


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


__all__ = ["SHARDINGS", "STRATEGIES", "CentralStorageConfig", "CommonConfig", "DDPConfig",
           "FSDPConfig", "HorovodConfig", "MirroredConfig", "MultiWorkerConfig", "PSConfig",
           "ShardPlan", "Strategy", "World", "assign_buckets", "build_trace", "ddp", "fsdp",
           "horovod", "parse_strategy", "resolve_plan", "tf_central_storage", "tf_mirrored",
           "tf_multiworker", "tf_ps"]
