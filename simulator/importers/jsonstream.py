"""Read a Chrome-trace JSON document (plain or gzip) as a stream of events.

Profilers write one JSON object whose ``traceEvents`` list can hold millions of events
(hundreds of MB). :func:`read_chrome_trace` never holds the document: a first pass reads
only the header (the top-level keys written before ``traceEvents``: Kineto puts
``distributedInfo`` and ``deviceProperties`` there) and stops at ``traceEvents``; the second
parses ``traceEvents`` incrementally with ijson and hands each event to a callback, which
keeps what it needs in compact form. A bare top-level array of events is accepted too.

Both passes read through the bounds of :mod:`.bounded` (decompression budget, nesting
depth, string size, event count). Every problem is one :class:`~simulator.errors.ConfigError`
naming the file: missing, not a regular file (a FIFO would block), empty, not JSON (with a
guess at what it is), a cut gzip stream, truncated or corrupt JSON, JSON that is not a
trace, or a file past a limit.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Callable, Iterable

import ijson
from ijson.common import ObjectBuilder

from ..errors import ConfigError
from ..inputs import regular_file
from .bounded import GZIP_MAGIC, BudgetReader, build_items, json_events

_FOREIGN = ((b"\x89PNG", "a PNG image"), (b"%PDF", "a PDF document"),
            (b"PK\x03\x04", "a zip archive"), (b"\xff\xd8\xff", "a JPEG image"),
            (b"GIF8", "a GIF image"), (b"\x7fELF", "an executable"))
_CHUNK = 1 << 16


def sniff(path: Path, source: str) -> bytes:
    """First bytes of ``path`` (after gunzip); ConfigError for a missing, empty or
    recognisably foreign file."""
    regular_file(path, "trace file")
    try:
        with path.open("rb") as fh:
            head = fh.read(64)
        if head[:2] == GZIP_MAGIC:
            with gzip.open(path, "rb") as fh:
                head = fh.read(64)
    except FileNotFoundError:
        raise ConfigError("no such file", source=source) from None
    except IsADirectoryError:
        raise ConfigError("is a folder, not a trace file", source=source) from None
    except (OSError, EOFError, zlib.error) as exc:
        raise ConfigError(f"unreadable or truncated gzip file ({_why(exc)})",
                          source=source) from None
    if not head.strip():
        raise ConfigError("empty file", source=source)
    for magic, what in _FOREIGN:
        if head.startswith(magic):
            raise ConfigError(f"not a trace: the file is {what}", source=source)
    return head


def open_binary(path: Path) -> BudgetReader:
    """``path`` opened for reading, gunzipped on the fly when it is gzip, within the
    decompression budget (:class:`.bounded.BudgetReader`)."""
    return BudgetReader(path)


def read_chrome_trace(path: str | Path, on_event: Callable[[dict], None],
                      header_keys: Iterable[str] = (), max_events: int | None = None) -> dict:
    """Stream the events of a Chrome-trace file at ``path`` into ``on_event``, in file
    order (so the n-th call is ``traceEvents[n]``, as schema errors name it).

    Returns the top-level ``header_keys`` found before ``traceEvents`` (a dict).
    ``max_events``: refuse a file with more events (default: the event limit,
    ``CLUSTERSIM_MAX_TRACE_EVENTS``).

    :raises ConfigError: naming the file, for a missing, empty, foreign, truncated or
        corrupt file, or JSON that holds no ``traceEvents`` list.
    """
    path = Path(path)
    source = str(path)
    head = sniff(path, source).lstrip()
    if head[:1] not in (b"{", b"["):
        shown = head[:12].decode("utf-8", "replace").split("\n")[0]
        raise ConfigError(f"not a JSON trace (the file starts with {shown!r})", source=source)
    header, level = _guarded(source, lambda: _read_header(path, set(header_keys), source))
    if level is None:
        raise ConfigError("not a trace: JSON without a traceEvents list", source=source)

    def stream():
        with open_binary(path) as fh:
            events = json_events(fh, source, _CHUNK)
            if level == 2:                      # up to the traceEvents key
                next(e for e in events if e[0] == 1 and e[1] == "map_key"
                     and e[2] == "traceEvents")
            items = build_items(events, level, source, max_events)
            for index, event in enumerate(items):
                if not isinstance(event, dict):
                    raise ConfigError(f"event {index} is a {type(event).__name__}, not an "
                                      f"object", source=source, field=f"traceEvents[{index}]")
                on_event(event)

    _guarded(source, stream)
    return header


def _read_header(path: Path, keys: set[str], source: str) -> tuple[dict, int | None]:
    """Top-level ``keys`` before ``traceEvents``, and the level of the events' array
    (2 under ``traceEvents``, 1 for a bare top-level array; None: no events)."""
    header: dict = {}
    builder, building = None, None
    with open_binary(path) as fh:
        for level, event, value in json_events(fh, source, _CHUNK):
            if level == 1 and event == "start_array":
                return header, 1
            if level == 1 and event in ("start_map", "end_map", "map_key"):
                if building is not None:
                    header[building] = builder.value
                    building = None
                if event == "end_map":
                    break
                if value == "traceEvents":
                    return header, 2
                if value in keys:
                    builder, building = ObjectBuilder(), value
                continue
            if building is not None:
                builder.event(event, value)
            elif level == 0:
                break                       # a scalar document: not a trace
    return header, None


def _guarded(source: str, fn):
    """Run ``fn``; turn gzip, I/O and JSON errors into one ConfigError naming ``source``."""
    try:
        return fn()
    except ijson.IncompleteJSONError as exc:
        text = str(exc)
        if "premature EOF" in text or "incomplete" in text.lower():
            raise ConfigError("truncated JSON (the file ends in the middle of the document)",
                              source=source) from None
        raise ConfigError(f"corrupt JSON ({_why(exc)})", source=source) from None
    except ijson.JSONError as exc:
        raise ConfigError(f"not JSON or corrupt JSON ({_why(exc)})", source=source) from None
    except EOFError:
        raise ConfigError("truncated gzip file (the compressed stream is cut short)",
                          source=source) from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise ConfigError(f"corrupt gzip file ({_why(exc)})", source=source) from None
    except UnicodeDecodeError:
        raise ConfigError("not a text trace (undecodable bytes)", source=source) from None
    except OSError as exc:
        raise ConfigError(f"cannot read file ({_why(exc)})", source=source) from None


def _why(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:120] if lines else exc.__class__.__name__
