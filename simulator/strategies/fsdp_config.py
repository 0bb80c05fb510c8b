"""FSDP configuration (FSDP1 and FSDP2 spellings) and the sharding plan it resolves to.

FSDP1 (``FullyShardedDataParallel``): ``sharding`` = FULL_SHARD | SHARD_GRAD_OP | NO_SHARD |
HYBRID_SHARD | _HYBRID_SHARD_ZERO2, ``shard_group_size`` for the hybrid ones (default: the
ranks of one node). FSDP2 (``fully_shard``): ``reshard_after_forward`` true | false | int and
``mesh: [replicate, shard]`` (1-D ``[N]`` or ``[1, N]`` is FSDP, 2-D is HSDP). Both map to
one :class:`ShardPlan`:

====================  =====  =========  ==================================
FSDP1                 shard  replicate  reshard after forward
====================  =====  =========  ==================================
FULL_SHARD            N      1          yes (reshard = N)
SHARD_GRAD_OP         N      1          no
NO_SHARD              1      N          (nothing sharded)
HYBRID_SHARD          S      N/S        yes (reshard = S)
_HYBRID_SHARD_ZERO2   S      N/S        no
====================  =====  =========  ==================================

``reshard_after_forward: k`` (FSDP2 int) keeps 1/k of the params after forward and
all-gathers them in backward within groups of k consecutive ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator

from simulator.errors import ConfigError

from .base import CommonConfig, World, bandwidth_value

SHARDINGS = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
HYBRID = ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
FSDP1_KEYS = ("sharding", "shard_group_size")
FSDP2_KEYS = ("reshard_after_forward", "mesh")


class FSDPConfig(CommonConfig):
    """``strategy: {name: fsdp, ...}``. ``param_dtype`` defaults to the compute precision
    (``MixedPrecision(param_dtype=bf16)`` for bf16); ``reduce_dtype`` to ``param_dtype``."""

    name: str = "fsdp"
    sharding: Literal[SHARDINGS] | None = None        # FSDP1; unset: FULL_SHARD
    shard_group_size: int | None = Field(None, ge=1)  # hybrid only; unset: gpus_per_node
    reshard_after_forward: bool | int | None = None   # FSDP2; unset: true
    mesh: list[int] | None = None                     # FSDP2 [replicate, shard]; unset: [1, N]
    # transformer_block / block: a unit per block; submodule: a unit per LayerNorm and Linear
    # of each block, nested inside the block's activation checkpoint (fsdp_submodule.py)
    wrap: Literal["transformer_block", "block", "submodule", "none"] = "transformer_block"
    backward_prefetch: Literal["BACKWARD_PRE", "BACKWARD_POST"] | None = "BACKWARD_PRE"
    forward_prefetch: bool = False
    limit_all_gathers: bool = True               # rate limiter: 2 units unsharded ahead
    cpu_offload: bool = False                    # params + grads on CPU, CPU optimizer step
    # CPU optimizer speed in bytes of optimizer traffic per second (CPU_OPT_STEP_BYTES/param).
    # An assumption, not a measurement: a multi-core host streaming ~20 B/param.
    cpu_adam_bytes_per_s: float | str = Field("10 GB/s", validate_default=True)
    # clip_grad_norm_(max_norm) before the step (clipping.py); torchtitan's default is 1.0
    grad_clip_norm: float | None = Field(None, gt=0)

    @field_validator("sharding", "backward_prefetch", mode="before")
    @classmethod
    def _upper(cls, v):
        return v.upper() if isinstance(v, str) else v

    @field_validator("cpu_adam_bytes_per_s")
    @classmethod
    def _bandwidth(cls, v):
        return bandwidth_value(v)

    def _check(self) -> None:
        if self.name != "fsdp":
            raise ConfigError(f"expected 'fsdp', got {self.name!r}", field="strategy.name")
        v1 = [k for k in FSDP1_KEYS if getattr(self, k) is not None]
        v2 = [k for k in FSDP2_KEYS if getattr(self, k) is not None]
        if v1 and v2:
            raise ConfigError(f"give the FSDP1 spelling ({', '.join(v1)}) or the FSDP2 "
                              f"spelling ({', '.join(v2)}), not both", field=f"strategy.{v2[0]}")
        if self.shard_group_size is not None and self.sharding not in HYBRID:
            raise ConfigError(f"only applies to {' and '.join(HYBRID)}, not "
                              f"{self.sharding or 'FULL_SHARD'}", field="strategy.shard_group_size")
        raf = self.reshard_after_forward
        if not isinstance(raf, bool) and isinstance(raf, int) and raf < 1:
            raise ConfigError(f"must be true, false or a group size >= 1, got {raf}",
                              field="strategy.reshard_after_forward")
        if self.wrap == "submodule" and (self.backward_prefetch or self.forward_prefetch):
            raise ConfigError("backward_prefetch and forward_prefetch are not modelled for "
                              "per-submodule units; set backward_prefetch: null and "
                              "forward_prefetch: false", field="strategy.wrap")
        if self.mesh is not None and (len(self.mesh) not in (1, 2) or min(self.mesh) < 1):
            raise ConfigError(f"must be [shard] or [replicate, shard] of positive sizes, got "
                              f"{self.mesh}", field="strategy.mesh")


@dataclass(frozen=True)
class ShardPlan:
    """How parameters are spread: ``shard`` ranks hold one copy between them, ``replicate``
    copies exist; ``reshard`` is how many ranks a unit's params are spread over after forward
    (``shard``: full reshard, 0: kept unsharded until after backward, else FSDP2 int)."""

    label: str
    shard: int
    replicate: int
    reshard: int

    def shard_groups(self) -> tuple[tuple[int, ...], ...]:
        return _blocks(self.shard * self.replicate, self.shard)

    def replicate_groups(self) -> tuple[tuple[int, ...], ...]:
        n = self.shard * self.replicate
        return tuple(tuple(range(s, n, self.shard)) for s in range(self.shard))

    def reshard_groups(self) -> tuple[tuple[int, ...], ...]:
        return _blocks(self.shard * self.replicate, self.reshard)


def _blocks(n: int, size: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(range(i, i + size)) for i in range(0, n, size))


def resolve_plan(cfg: FSDPConfig, world: World) -> ShardPlan:
    """The plan for ``world``; ConfigError naming the field when it cannot be laid out."""
    if any(getattr(cfg, k) is not None for k in FSDP2_KEYS):
        return _fsdp2_plan(cfg, world)
    return _fsdp1_plan(cfg, world)


def _fsdp1_plan(cfg: FSDPConfig, world: World) -> ShardPlan:
    n, mode = world.world_size, cfg.sharding or "FULL_SHARD"
    if mode == "FULL_SHARD":
        return _normalized(mode, n, 1, n)
    if mode == "SHARD_GRAD_OP":
        return _normalized(mode, n, 1, 0)
    if mode == "NO_SHARD":
        return ShardPlan(mode, 1, n, 0)
    size = cfg.shard_group_size
    if size is not None and (size > n or n % size):
        why = "exceeds" if size > n else "does not divide"
        raise ConfigError(f"{size} ranks per shard group {why} the world size {n}",
                          field="strategy.shard_group_size")
    if size is None:
        size = min(world.gpus_per_node, n)
        if n % size:
            raise ConfigError(f"{mode} shards within a node, but gpus_per_node "
                              f"{world.gpus_per_node} does not divide the world size {n}; "
                              f"set shard_group_size", field="strategy.sharding")
    return _normalized(mode, size, n // size, size if mode == "HYBRID_SHARD" else 0)


def _fsdp2_plan(cfg: FSDPConfig, world: World) -> ShardPlan:
    n = world.world_size
    mesh = list(cfg.mesh or [1, n])
    replicate, shard = ([1] + mesh)[-2:]
    if replicate * shard != n:
        raise ConfigError(f"mesh {cfg.mesh} covers {replicate * shard} ranks, the world has {n}",
                          field="strategy.mesh")
    raf = True if cfg.reshard_after_forward is None else cfg.reshard_after_forward
    if isinstance(raf, bool):
        reshard = shard if raf else 0
    else:
        if raf > shard or shard % raf:
            raise ConfigError(f"{raf} must divide the shard group size {shard}",
                              field="strategy.reshard_after_forward")
        reshard = raf
    return _normalized(f"fsdp2 mesh [{replicate}, {shard}] reshard_after_forward={raf}",
                       shard, replicate, reshard)


def _normalized(label: str, shard: int, replicate: int, reshard: int) -> ShardPlan:
    """Resharding over one rank keeps everything: same as no reshard."""
    return ShardPlan(label, shard, replicate, 0 if reshard <= 1 else reshard)
