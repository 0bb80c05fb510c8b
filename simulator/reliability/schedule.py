"""Scheduled failures: ``failures.schedule`` entries mapped onto the cluster's components.

An entry names its component the way the topology does: ``n12`` (server), ``n3.gpu5``,
``n3.nic2``, ``leaf.r0.g1``, ``spine.3``, a link as ``[n0.nic0, leaf.r0.g0]`` (either order),
or a straggler by ``rank`` with ``factor`` and ``duration``. A name the cluster does not have
is an error naming the entry.
"""

from __future__ import annotations

from simulator.errors import ConfigError

from .config import CLASSES, ScheduledEvent
from .inventory import ComponentSet
from .quantities import parse_duration

FIELD = "reliability.failures.schedule"


def map_schedule(entries: list[ScheduledEvent], inv: dict[str, ComponentSet], world: int,
                 source: str) -> list[tuple]:
    """``(t_s, class index or -1, component index, straggler key or None, duration_s)``
    per entry, in time order (ties keep the file's order)."""
    from .steps import straggler_key
    out = []
    for i, e in enumerate(entries):
        where = f"{FIELD}.{i}"
        t = parse_duration(e.at)
        if e.component == "straggler":
            if e.rank is None or e.factor is None or e.duration is None:
                raise ConfigError("a straggler needs rank, factor and duration", source=source,
                                  field=where)
            if e.rank >= world:
                raise ConfigError(f"rank {e.rank} is outside the job (ranks 0-{world - 1})",
                                  source=source, field=f"{where}.rank")
            out.append((t, -1, e.rank, straggler_key(e.factor), parse_duration(e.duration)))
            continue
        comps = inv[e.component]
        index = _find(comps, e.id, e.component, source, where)
        out.append((t, CLASSES.index(e.component), index, None, 0.0))
    return sorted(out, key=lambda row: row[0])


def _find(comps: ComponentSet, ident, cls: str, source: str, where: str) -> int:
    if cls == "software":
        return 0
    if ident is None:
        raise ConfigError(f"a {cls} failure needs an id", source=source, field=f"{where}.id")
    names = {n: i for i, n in enumerate(comps.names)}
    keys = [ident] if isinstance(ident, str) else []
    if isinstance(ident, list) and len(ident) == 2:
        keys = [f"{ident[0]}~{ident[1]}", f"{ident[1]}~{ident[0]}"]
    for key in keys:
        if key in names:
            return names[key]
    sample = ", ".join(comps.names[:3]) + (", ..." if len(comps) > 3 else "")
    raise ConfigError(f"no {cls} {ident!r} in this cluster ({len(comps)} {cls} components"
                      f"{': ' + sample if sample else ''})", source=source, field=f"{where}.id")
