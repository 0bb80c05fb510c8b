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

from ..errors import ConfigError
from ..inputs import GZIP_MAGIC, BudgetReader, limit, over_limit

__all__ = ["GZIP_MAGIC", "BudgetReader", "build_items", "json_events"]
_OPEN = ("start_map", "start_array")
_CLOSE = ("end_map", "end_array")


def json_events(fh, source: str, chunk: int = 1 << 16) -> Iterator[tuple[str, str, object]]:
    """ijson's ``(prefix, event, value)`` of the JSON document in ``fh``, checked.

    :raises ConfigError: naming ``source`` for nesting past the depth limit, or a string
        or key longer than the string limit.
    """
    max_depth, max_string = limit("trace_depth"), limit("trace_string")
    depth = 0
    for prefix, event, value in ijson.parse(fh, use_float=True, buf_size=chunk):
        if event in _OPEN:
            depth += 1
            if depth > max_depth:
                raise over_limit("trace_depth", f"JSON nested deeper than {max_depth} levels "
                                 f"(at {_short(prefix)})", source)
        elif event in _CLOSE:
            depth -= 1
        elif (event == "string" or event == "map_key") and len(value) > max_string:
            raise over_limit("trace_string", f"a {'key' if event == 'map_key' else 'string'} "
                             f"of {len(value):,} characters at {_short(prefix)}", source)
        yield prefix, event, value


def _short(prefix: str) -> str:
    """An ijson prefix as an error shows it: ``traceEvents.item.args...`` at most."""
    return (prefix[:40] + "...") if len(prefix) > 40 else prefix or "the top"


def build_items(events, prefix: str, source: str, most: int | None = None) -> Iterator:
    """The elements of the array at ijson ``prefix`` (``traceEvents.item``), built from
    the checked ``events``; at most ``most`` of them (default: the event limit).

    :raises ConfigError: naming ``source`` past the event limit.
    """
    most = most or limit("trace_events")
    count, builder, depth = 0, None, 0
    for path, event, value in events:
        if builder is None:
            if path != prefix:
                continue
            count += 1
            if count > most:
                raise over_limit("trace_events", f"more than {most:,} events", source)
            if event not in _OPEN:
                yield value                     # a scalar element
                continue
            builder, depth = ObjectBuilder(), 0
        builder.event(event, value)
        depth += 1 if event in _OPEN else -1 if event in _CLOSE else 0
        if depth == 0:
            yield builder.value
            builder = None
