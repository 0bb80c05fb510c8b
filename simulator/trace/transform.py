"""Trace rewrites that keep the contract: splitting rank classes (stragglers)."""

from __future__ import annotations

from dataclasses import replace

from ..errors import ConfigError
from .schema import RankClass, Trace


def apply_stragglers(trace: Trace, stragglers: dict[int, float]) -> Trace:
    """Split rank classes so that each slowed rank group is a class of its own.

    Symmetry is kept where nothing breaks it: ranks with the same slowdown stay one class.

    :raises ConfigError: (field ``simulation.stragglers``) for a rank outside the world.
    """
    bad = [r for r in stragglers if not 0 <= r < trace.world_size]
    if bad:
        raise ConfigError(f"rank {bad[0]} is outside the world of {trace.world_size} ranks",
                          field="simulation.stragglers")
    if not stragglers:
        return trace
    classes, static = [], dict(trace.meta.get("static_memory_bytes", {}))
    for cls in trace.classes:
        by_factor: dict[float, list[int]] = {}
        for r in cls.ranks:
            by_factor.setdefault(stragglers.get(r, 1.0) * cls.slowdown, []).append(r)
        for factor, ranks in sorted(by_factor.items()):
            cid = cls.id if factor == cls.slowdown else f"{cls.id}@x{factor:g}"
            classes.append(RankClass(cid, tuple(ranks), cls.ops, factor))
            static[cid] = static.get(cls.id, 0)
    return replace(trace, classes=classes, meta={**trace.meta, "static_memory_bytes": static})
