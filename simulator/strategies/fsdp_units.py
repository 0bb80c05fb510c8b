"""FSDP units: which layers (or, with ``wrap: submodule``, which kernels' weights) are
gathered, resharded and reduced together (see :mod:`simulator.strategies.fsdp`), and what
a unit weighs: its flat parameter padded to equal shards and the state a rank keeps of it.

The sizes are the one FSDP arithmetic of both FSDP generators: the data-parallel one
(:mod:`.fsdp`, units by wrap policy) and FSDP under a pipeline (``dp_mode: fsdp`` of
:mod:`.parallel.dp`, a unit per layer): an all-gather and a reduce-scatter move
:func:`padded_numel` elements of a unit, an HSDP all-reduce :func:`shard_numel`, and a
rank's static state is :func:`state_bytes` of its shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from simulator.errors import ConfigError
from simulator.models.fp8 import fp8_gathered_params

from .base import FP32, OPT_MOMENT_BYTES, ceil_div
from .grads import named_weights


def shard_numel(params: int, shard: int) -> int:
    """A rank's shard of a unit of ``params`` parameters over ``shard`` ranks (FSDP pads the
    flat parameter to equal shards)."""
    return ceil_div(params, shard)


def padded_numel(params: int, shard: int) -> int:
    """A unit's flat parameter padded to ``shard`` equal shards: the elements an all-gather
    gathers and a reduce-scatter reduces."""
    return ceil_div(params, shard) * shard


def state_bytes(shard_params: int, optimizer: str) -> int:
    """Static bytes of ``shard_params`` sharded parameters: the fp32 flat parameter (the
    master copy), its fp32 gradient and the optimizer moments (16 for Adam)."""
    return shard_params * (FP32 + FP32 + OPT_MOMENT_BYTES[optimizer])


@dataclass(frozen=True)
class Unit:
    index: int
    name: str
    params: int            # trainable: gathered, reduced, with optimizer state
    root: bool
    frozen_bytes: int = 0  # frozen weights (a fine-tuning's base): gathered, never reduced
    fp8_params: int = 0    # of ``params``, those gathered in FP8 (one byte each; fp8.py)

    @property
    def weighs(self) -> bool:
        """Whether the unit holds any weight (trainable or frozen)."""
        return self.params > 0 or self.frozen_bytes > 0


SUB = -1      # unit_of for a layer whose units are its parametrized kernels (wrap: submodule)


class Units(NamedTuple):
    """A model's FSDP units."""

    units: list[Unit]                      # root first
    unit_of: list[int]                     # per layer, its unit's index (SUB: per kernel)
    sub: dict[tuple[int, str], Unit]       # the per-kernel units, by (layer, weight name)


class Segment(NamedTuple):
    """Consecutive layers of one unit."""

    unit: int                              # the unit's index (SUB: per-kernel units)
    layers: list[int]                      # layer indices, in forward order


def build_units(layers, wrap: str) -> Units:
    """The units of ``layers`` under the ``wrap`` policy."""
    def wrapped(layer) -> bool:
        return (wrap in ("transformer_block", "submodule")
                and layer.kind == "transformer_block") or (
            wrap == "block" and layer.kind.endswith("block"))
    unit_of = [0] * len(layers)
    units = [None]
    sub: dict[tuple[int, str], Unit] = {}
    for i, layer in enumerate(layers):
        if wrapped(layer) and wrap == "submodule":
            if fp8_gathered_params(layer):
                raise ConfigError(f"{layer.name}: per-kernel units of weights gathered in "
                                  f"FP8 are not modelled: use transformer_block",
                                  field="strategy.wrap")
            if _frozen(layer):
                raise ConfigError(f"{layer.name}: per-kernel units of a fine-tuned block "
                                  f"(frozen weights, adapters) are not modelled: use "
                                  f"transformer_block", field="strategy.wrap")
            unit_of[i] = SUB
            weights = named_weights(layer)
            if weights is None:
                raise ConfigError(f"{layer.name}: its kernels do not name their weights, so it "
                                  f"cannot be split into per-kernel units", field="strategy.wrap")
            for weight in weights:
                sub[(i, weight.name)] = Unit(index=len(units), name=f"{layer.name}.{weight.name}",
                                             params=weight.params, root=False)
                units.append(sub[(i, weight.name)])
        elif wrapped(layer):
            unit_of[i] = len(units)
            units.append(Unit(index=len(units), name=layer.name, params=int(layer.params),
                              root=False, frozen_bytes=_frozen(layer),
                              fp8_params=fp8_gathered_params(layer)))
    if wrap == "submodule" and not sub:
        raise ConfigError("splits transformer blocks into per-kernel units; this model has "
                          "none (use transformer_block, block or none)", field="strategy.wrap")
    rest = [layers[i] for i in range(len(layers)) if unit_of[i] == 0]
    units[0] = Unit(index=0, name="root", params=sum(int(x.params) for x in rest), root=True,
                    frozen_bytes=sum(_frozen(x) for x in rest),
                    fp8_params=sum(fp8_gathered_params(x) for x in rest))
    return Units(units=units, unit_of=unit_of, sub=sub)


def _frozen(layer) -> int:
    return int(getattr(layer, "frozen_bytes", 0))


def fp8_saving(count: int, shard: int, weight_bytes: int) -> int:
    """Bytes a rank's shard of a unit's trainable weights is smaller when ``count`` of them
    are gathered at one byte each instead of ``weight_bytes``."""
    return ceil_div(count, shard) * (weight_bytes - 1)


def frozen_shard(frozen_bytes: int, shard: int) -> int:
    """A rank's bytes of a unit's frozen weights sharded over ``shard`` ranks; the padded
    whole (what an all-gather moves) is ``shard`` times this."""
    return ceil_div(frozen_bytes, shard)


def segments(unit_of: list[int]) -> list[Segment]:
    """Maximal runs of consecutive layers of one unit, in forward order."""
    segs: list[Segment] = []
    for i, u in enumerate(unit_of):
        if segs and segs[-1].unit == u:
            segs[-1].layers.append(i)
        else:
            segs.append(Segment(unit=u, layers=[i]))
    return segs
