"""Bounded reading of profiler files: a decompression budget and checked JSON events.

A trace file is the one input that is large by nature (hundreds of MB, gzip), so it is the
one a hostile or broken file can turn into gigabytes, hours or a crash. Everything read
from it passes here (limits in :data:`simulator.inputs.LIMITS`, docs/inputs.md):

* :class:`simulator.inputs.BudgetReader`: the bytes out of a (gzip) file, refused past
  ``CLUSTERSIM_MAX_TRACE_BYTES`` in all, or past ``CLUSTERSIM_MAX_TRACE_RATIO`` output bytes
  per compressed byte once 64 MiB are out (a gzip bomb: 10 GiB of zeros in 10 MB);
* :func:`json_events`: ijson's parse events, refused past ``CLUSTERSIM_MAX_TRACE_DEPTH``
  levels of nesting or a string or key over ``CLUSTERSIM_MAX_TRACE_STRING`` bytes, before
  anything is built from them; :func:`build_items` builds the elements of one array from
  them, counting them against ``CLUSTERSIM_MAX_TRACE_EVENTS``.
"""

from __future__ import annotations

from typing import Iterator

import ijson
from ijson.common import ObjectBuilder

from ..inputs import GZIP_MAGIC, BudgetReader, limit, over_limit

__all__ = ["GZIP_MAGIC", "BudgetReader", "build_items", "json_events"]
_OPEN = ("start_map", "start_array")
_CLOSE = ("end_map", "end_array")


def json_events(fh, source: str, chunk: int = 1 << 16) -> Iterator[tuple[int, str, object]]:
    """``(level, event, value)`` of the JSON document in ``fh``, checked: ijson's basic
    events (no prefixes: a prefix grows with the depth, and ijson builds them for a whole
    buffer at once) with the nesting ``level`` each belongs to (an opening event has the
    level it opens, a closing one the level it closes; the top-level map is level 1).

    :raises ConfigError: naming ``source`` for nesting past the depth limit, or a string
        or key longer than the string limit.
    """
    max_depth, max_string = limit("trace_depth"), limit("trace_string")
    level = 0
    for event, value in ijson.basic_parse(_QuoteGuard(fh, max_string, source), use_float=True,
                                          buf_size=chunk):
        if event in _OPEN:
            level += 1
            if level > max_depth:
                raise over_limit("trace_depth", "JSON nested too deeply", source)
            yield level, event, value
            continue
        if event in _CLOSE:
            level -= 1
            yield level + 1, event, value
            continue
        if (event == "string" or event == "map_key") and len(value) > max_string:
            raise over_limit("trace_string", f"a {'key' if event == 'map_key' else 'string'} "
                             f"of {len(value):,} characters", source)
        yield level, event, value


class _QuoteGuard:
    """``fh`` refusing a run of more than ``most`` bytes without a quote: in a trace
    (every event has quoted keys) that is one string or value over the string limit,
    caught as the bytes arrive, before the parser gathers it (which takes time growing
    with the square of its length)."""

    def __init__(self, fh, most: int, source: str):
        self.fh, self.most, self.source, self.run = fh, most, source, 0

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(n)
        first = data.find(b'"')
        if first < 0:
            self.run += len(data)
        else:
            self.run += first
            if self.run <= self.most:
                self.run = len(data) - data.rfind(b'"') - 1
        if self.run > self.most:
            raise over_limit("trace_string", f"more than {self.most:,} bytes without a "
                             f"quote (one string or value that long)", self.source)
        return data


def build_items(events, level: int, source: str, most: int | None = None) -> Iterator:
    """The elements of the array that ``events`` start with, opened at ``level`` (2: a
    top-level map's ``traceEvents``, once the caller has read up to its key; 1: a bare
    top-level array), built from the checked ``events``; none if they do not start with
    an array. At most ``most`` of them (default: the event limit).

    :raises ConfigError: naming ``source`` past the event limit.
    """
    most = most or limit("trace_events")
    first = next(events, None)
    if first is None or first[:2] != (level, "start_array"):
        return
    count, builder = 0, None
    for at, event, value in events:
        if builder is None:
            if at == level and event == "end_array":
                return
            count += 1
            if count > most:
                raise over_limit("trace_events", f"more than {most:,} events", source)
            if event not in _OPEN:
                yield value                     # a scalar element
                continue
            builder = ObjectBuilder()
        builder.event(event, value)
        if at == level + 1 and event in _CLOSE:
            yield builder.value
            builder = None
