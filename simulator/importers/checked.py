"""The schema of every field the importers read from a Chrome-trace event or header.

A profiler writes numbers as numbers and names as strings; a broken or hostile file may
not. Each reader here returns the field in the one type the importers use, or raises one
:class:`~simulator.errors.ConfigError` naming the file, the event (``traceEvents[i]``) and
the field, so a list where a number belongs is refused instead of being read as 0, and
nothing further down has to guard against it.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import ConfigError
from ..trace.fields import MAX_RANKS

_MISSING = object()
MAX_EVENT_S = 86_400.0   # one event of a profiled step lasts at most a day (a 53-day kernel
                         # in a damaged file would be a 53-day step)
SCALARS = (str, int, float)      # ids (pid, tid, correlation...): hashable, printable


class EventFields:
    """Typed reads of one event ``e`` (the ``index``-th of ``source``)."""

    __slots__ = ("e", "source", "where")

    def __init__(self, e: dict, source: str, index: int, prefix: str = "traceEvents"):
        self.e, self.source, self.where = e, source, f"{prefix}[{index}]"

    def fail(self, key: str, expected: str, value: Any) -> ConfigError:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return ConfigError(f"must be {expected}, got {shown}", source=self.source,
                           field=f"{self.where}.{key}")

    def number(self, key: str, default: float | None = 0.0) -> float | None:
        """A finite number (``ts``, ``dur``...); ``default`` when absent."""
        value = self.e.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise self.fail(key, "a finite number", value)
        return float(value)

    def duration(self, key: str, scale_s: float = 1e-6) -> float:
        """A duration (``dur``, in units of ``scale_s`` seconds): a finite number in
        [0, :data:`MAX_EVENT_S`]; 0 when absent."""
        value = self.number(key)
        if not 0 <= value * scale_s <= MAX_EVENT_S:
            raise self.fail(key, f"a duration in [0, {MAX_EVENT_S / scale_s:,.0f}] (one day)",
                            value)
        return value

    def text(self, key: str, default: str = "") -> str:
        """A string (``name``, ``cat``, ``ph``); a number is taken as its decimal text."""
        value = self.e.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise self.fail(key, "a string", value)

    def ident(self, key: str) -> Any:
        """An id (``pid``, ``tid``, ``id``): a string or a number, or None when absent."""
        value = self.e.get(key)
        if value is None or (isinstance(value, SCALARS) and not isinstance(value, bool)):
            return value
        raise self.fail(key, "a string or a number (an id)", value)

    def args(self) -> "EventFields":
        """The event's ``args`` mapping (empty when absent), to read fields from."""
        value = self.e.get("args")
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise self.fail("args", "a mapping", value)
        sub = EventFields.__new__(EventFields)
        sub.e, sub.source, sub.where = value, self.source, f"{self.where}.args"
        return sub

    def count(self, key: str, most: int | None = None) -> int | None:
        """A whole number >= 0 (element counts, group sizes), at most ``most``; None when
        absent."""
        value = self.e.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(key, "a whole number >= 0", value)
        if most is not None and value > most:
            raise self.fail(key, f"at most {most:,}", value)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        """Any value (kept as it is, for a reader that checks it itself)."""
        return self.e.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.e


def header_mapping(header: dict, key: str, source: str) -> dict:
    """``header[key]`` if it is a mapping (empty when absent)."""
    value = header.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"must be a mapping, got {type(value).__name__}", source=source,
                          field=key)
    return value


def header_list(header: dict, key: str, source: str) -> list:
    """``header[key]`` if it is a list of mappings (empty when absent)."""
    value = header.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError("must be a list of mappings", source=source, field=key)
    return value


def distributed_info(header: dict, source: str) -> dict:
    """Kineto's ``distributedInfo``, checked: ``rank`` a whole number inside
    ``world_size`` (>= 1), ``pg_config`` a list of mappings."""
    info = header_mapping(header, "distributedInfo", source)
    rank, world = info.get("rank"), info.get("world_size")
    for key, value, low in (("rank", rank, 0), ("world_size", world, 1)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < low):
            raise ConfigError(f"must be a whole number >= {low}, got {value!r}",
                              source=source, field=f"distributedInfo.{key}")
    if world is not None and world > MAX_RANKS:
        raise ConfigError(f"must be at most {MAX_RANKS:,} ranks, got {world:,}", source=source,
                          field="distributedInfo.world_size")
    if rank is not None and world is not None and rank >= world:
        raise ConfigError(f"rank {rank} is outside the world of {world} ranks",
                          source=source, field="distributedInfo.rank")
    config = info.get("pg_config")
    if config is not None and (not isinstance(config, list)
                               or not all(isinstance(c, dict) for c in config)):
        raise ConfigError("must be a list of mappings", source=source,
                          field="distributedInfo.pg_config")
    return info
