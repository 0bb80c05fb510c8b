"""Training strategies: per-layer costs + a parallelism config -> one iteration's Trace.

A strategy is ``build(layers, cfg, world, *, model="", tokens_per_sample=0,
model_flops_per_sample=None) -> Trace``; ``layers`` are ``simulator.models.layer_costs`` of
one micro-batch (``batch = cfg.micro_batch``). ``parse_strategy`` turns a YAML mapping
(``{name: fsdp, sharding: HYBRID_SHARD, ...}``) into the config, raising ConfigError that
names ``strategy.<field>``.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any, Callable

from simulator.errors import ConfigError
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


@dataclass(frozen=True)
class _Deferred:
    """A registry entry whose module loads on first lookup (:func:`_load`)."""
    description: str


class _Registry(MutableMapping):
    """name -> :class:`Strategy`; a :class:`_Deferred` entry is loaded on first lookup, so
    that a scenario naming fsdp loads neither the TensorFlow/Horovod generators nor the 3-D
    parallel stack (``simulator.parallel``) the framework strategies are built on (start-up
    time, README "Speed")."""

    def __init__(self, entries: dict[str, Strategy | _Deferred]):
        self._entries = dict(entries)

    def __getitem__(self, name: str) -> Strategy:
        entry = self._entries[name]
        if isinstance(entry, _Deferred):
            entry = self._entries[name] = Strategy(name, entry.description, *_load(name))
        return entry

    def __setitem__(self, name: str, strategy: Strategy) -> None:
        self._entries[name] = strategy

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def _load(name: str) -> tuple[type[CommonConfig], Callable[..., Trace]]:
    """(config, build) of the deferred strategy ``name``; its imports sit here, so each
    strategy other than DDP and FSDP loads only when a scenario names it."""
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
        from simulator.parallel.frameworks.megatron import MegatronConfig as config
        from simulator.parallel.generate import build_planned as build
    elif name == "torchtitan":
        from simulator.parallel.frameworks.torchtitan import TorchtitanConfig as config
        from simulator.parallel.frameworks.torchtitan import torchtitan as build
    elif name == "deepspeed":
        from simulator.parallel.frameworks.deepspeed import DeepSpeedConfig as config
        from simulator.parallel.frameworks.deepspeed import deepspeed as build
    else:
        raise KeyError(name)
    return config, build


STRATEGIES: MutableMapping[str, Strategy] = _Registry({
    "ddp": Strategy("ddp", "PyTorch DDP: full replicas, bucketed gradient all-reduce "
                    "overlapped with backward", DDPConfig, ddp),
    "fsdp": Strategy("fsdp", "PyTorch FSDP/FSDP2 (ZeRO-3 style): sharded params, all-gather "
                     "per unit, gradient reduce-scatter; HSDP", FSDPConfig, fsdp),
    "tf_mirrored": _Deferred("TensorFlow MirroredStrategy (one machine): NcclAllReduce "
                             "packs, HierarchicalCopyAllReduce or ReductionToOneDevice after "
                             "backward"),
    "tf_multiworker": _Deferred("TensorFlow MultiWorkerMirroredStrategy: CollectiveAllReduce "
                                "(RING or NCCL) of bytes_per_pack packs"),
    "tf_ps": _Deferred("TensorFlow ParameterServerStrategy: variables on parameter servers, "
                       "asynchronous workers pull variables and push gradients"),
    "tf_central_storage": _Deferred("TensorFlow CentralStorageStrategy: variables in host "
                                    "memory, replicas on the local GPUs"),
    "horovod": _Deferred("Horovod with TensorFlow: fused NCCL all-reduces (fusion threshold, "
                         "cycle time) overlapped with backward"),
    "megatron": _Deferred("Megatron-LM: tensor (+sequence), pipeline (1F1B, interleaved) "
                          "and data parallelism (DDP or distributed optimizer), its argument "
                          "names"),
    "torchtitan": _Deferred("torchtitan: FSDP2 x TP/SP x PP x CP x EP from the [parallelism] "
                            "and [activation_checkpoint] tables of its TOML"),
    "deepspeed": _Deferred("DeepSpeed: ZeRO stage 0-3 (zero_optimization), AutoTP and "
                           "pipeline stages"),
})


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
