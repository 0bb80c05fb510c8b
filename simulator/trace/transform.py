"""Trace rewrites that keep the contract: splitting rank classes (stragglers)."""

from __future__ import annotations

from dataclasses import replace

from ..errors import ConfigError
from .schema import Op, Trace


def apply_stragglers(trace: Trace, stragglers: dict[int, float]) -> Trace:
    """Split rank classes so that each slowed rank group is a class of its own.

    Symmetry is kept where nothing breaks it: ranks with the same slowdown stay one class.
    A split-off class keeps its static memory, and its sends and recvs between ranks keep
    their partners (``peer`` is relative to a class's first member, which moves).

    :raises ConfigError: (field ``simulation.stragglers``) for a rank outside the world.
    """
    bad = [r for r in stragglers if not 0 <= r < trace.world_size]
    if bad:
        raise ConfigError(f"rank {bad[0]} is outside the world of {trace.world_size} ranks",
                          field="simulation.stragglers")
    if not stragglers:
        return trace
    classes = []
    for cls in trace.classes:
        by_factor: dict[float, list[int]] = {}
        for r in cls.ranks:
            by_factor.setdefault(stragglers.get(r, 1.0) * cls.slowdown, []).append(r)
        for factor, ranks in sorted(by_factor.items()):
            cid = cls.id if factor == cls.slowdown else f"{cls.id}@x{factor:g}"
            classes.append(replace(cls, id=cid, ranks=tuple(ranks), slowdown=factor,
                                   ops=_shift_peers(cls.ops, ranks[0] - cls.ranks[0])))
    return replace(trace, classes=classes)


def _shift_peers(ops: list[Op], shift: int) -> list[Op]:
    """``ops`` for a class whose first member is ``shift`` ranks after the original's."""
    if not shift or not any(op.is_peer_transfer for op in ops):
        return ops
    return [replace(op, peer=op.peer + shift) if op.is_peer_transfer else op for op in ops]
