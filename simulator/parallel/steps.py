"""Steps: the op sequences the expert- and context-parallel builders hand the generator.

A :class:`Step` is a kernel (an :class:`~simulator.models.ops.OpCost`), a collective on a
mesh group (``group``: ``"ep"``, ``"cp"``), or a send/recv to the rank ``peer_offset``
away. Steps of one ``stream`` run in list order; ``after`` names earlier steps (by index
in the list) a step also waits for. The generator turns them into Trace ops, choosing the
communicator of the group and the peer of each rank class.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.models.ops import OpCost


@dataclass(frozen=True)
class Step:
    """One op of a builder's sequence (see the module doc)."""

    name: str
    kind: str                       # compute | collective | send | recv
    stream: str = "compute"
    cost: OpCost | None = None      # compute
    collective: str = ""            # collective: all_to_all, all_gather, reduce_scatter
    size_bytes: int = 0             # collective (nccl-tests terms) or send/recv payload
    group: str = ""                 # collective: the mesh group it runs on
    peer_offset: int = 0            # send/recv: partner rank minus this rank
    after: tuple[int, ...] = ()     # indices of earlier steps it waits for


def kernel(cost: OpCost, after: tuple[int, ...] = ()) -> Step:
    """The compute step of ``cost``."""
    return Step(cost.name, "compute", cost=cost, after=after)
