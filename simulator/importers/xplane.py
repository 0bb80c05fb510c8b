"""Decode TensorFlow's ``*.xplane.pb`` (an ``XSpace`` protobuf) without TensorFlow.

The message classes are built at import time from a descriptor written out here, field by
field, from ``tsl/profiler/protobuf/xplane.proto`` (package ``tensorflow.profiler``); only
the ``protobuf`` runtime is needed. An XSpace holds planes (``/host:CPU``, devices); a
plane holds lines (threads, streams) of events; names and stat names live in per-plane
metadata tables. :func:`read_xspace` flattens that into :class:`TfEvent` rows.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from ..errors import ConfigError
from ..inputs import limit, over_limit
from .bounded import BudgetReader
from .checked import MAX_EVENT_S
from .jsonstream import sniff

PROTOBUF_MAX_BYTES = (2 << 30) - 1        # protobuf refuses a larger message

_F = descriptor_pb2.FieldDescriptorProto
I64, U64, DBL, STR, BYT, MSG = (_F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE, _F.TYPE_STRING,
                                _F.TYPE_BYTES, _F.TYPE_MESSAGE)
ONE, REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
PKG = "tensorflow.profiler"
# message -> [(field, number, type, label, message type, oneof)]; from xplane.proto
_SCHEMA = {
    "XSpace": [("planes", 1, MSG, REP, "XPlane", None), ("errors", 2, STR, REP, "", None),
               ("warnings", 3, STR, REP, "", None), ("hostnames", 4, STR, REP, "", None)],
    "XPlane": [("id", 1, I64, ONE, "", None), ("name", 2, STR, ONE, "", None),
               ("lines", 3, MSG, REP, "XLine", None),
               ("event_metadata", 4, MSG, REP, "XPlane.EventMetadataEntry", None),
               ("stat_metadata", 5, MSG, REP, "XPlane.StatMetadataEntry", None),
               ("stats", 6, MSG, REP, "XStat", None)],
    "XLine": [("id", 1, I64, ONE, "", None), ("display_id", 10, I64, ONE, "", None),
              ("name", 2, STR, ONE, "", None), ("display_name", 11, STR, ONE, "", None),
              ("timestamp_ns", 3, I64, ONE, "", None), ("duration_ps", 9, I64, ONE, "", None),
              ("events", 4, MSG, REP, "XEvent", None)],
    "XEvent": [("metadata_id", 1, I64, ONE, "", None), ("offset_ps", 2, I64, ONE, "", 0),
               ("num_occurrences", 5, I64, ONE, "", 0), ("duration_ps", 3, I64, ONE, "", None),
               ("stats", 4, MSG, REP, "XStat", None)],
    "XStat": [("metadata_id", 1, I64, ONE, "", None), ("double_value", 2, DBL, ONE, "", 0),
              ("uint64_value", 3, U64, ONE, "", 0), ("int64_value", 4, I64, ONE, "", 0),
              ("str_value", 5, STR, ONE, "", 0), ("bytes_value", 6, BYT, ONE, "", 0),
              ("ref_value", 7, U64, ONE, "", 0)],
    "XEventMetadata": [("id", 1, I64, ONE, "", None), ("name", 2, STR, ONE, "", None),
                       ("display_name", 4, STR, ONE, "", None),
                       ("metadata", 3, BYT, ONE, "", None), ("stats", 5, MSG, REP, "XStat", None),
                       ("child_id", 6, I64, REP, "", None)],
    "XStatMetadata": [("id", 1, I64, ONE, "", None), ("name", 2, STR, ONE, "", None),
                      ("description", 3, STR, ONE, "", None)],
}
_ONEOF = {"XEvent": "data", "XStat": "value"}
_MAPS = {"EventMetadataEntry": "XEventMetadata", "StatMetadataEntry": "XStatMetadata"}


def _fields(msg, spec) -> None:
    for name, number, ftype, label, type_name, oneof in spec:
        f = msg.field.add(name=name, number=number, type=ftype, label=label)
        if type_name:
            f.type_name = f".{PKG}.{type_name}"
        if oneof is not None:
            f.oneof_index = oneof


def _message_classes() -> dict:
    fd = descriptor_pb2.FileDescriptorProto(name="clustersim_xplane.proto", package=PKG,
                                            syntax="proto3")
    for name, spec in _SCHEMA.items():
        msg = fd.message_type.add(name=name)
        _fields(msg, spec)
        if name in _ONEOF:
            msg.oneof_decl.add(name=_ONEOF[name])
        if name == "XPlane":
            for entry, value in _MAPS.items():
                nested = msg.nested_type.add(name=entry)
                nested.options.map_entry = True
                _fields(nested, [("key", 1, I64, ONE, "", None),
                                 ("value", 2, MSG, ONE, value, None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    make = getattr(message_factory, "GetMessageClass", None) or \
        message_factory.MessageFactory(pool).GetPrototype          # protobuf < 4.22
    return {n: make(pool.FindMessageTypeByName(f"{PKG}.{n}")) for n in _SCHEMA}


XSPACE = _message_classes()["XSpace"]


@dataclass(slots=True)
class TfEvent:
    """One event of a TensorFlow profile; times in seconds."""

    line: str
    name: str
    display: str
    ts: float
    end: float
    stats: dict


def _stat(plane, stat):
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(stat, kind)
    if kind == "ref_value":
        return plane.stat_metadata[value].name if value in plane.stat_metadata else value
    return value


def _check_times(line, source: str, where: str) -> None:
    """Each event's ``offset_ps`` and ``duration_ps`` in [0, one day]: a damaged or hostile
    file gives no 53-day step."""
    most = round(MAX_EVENT_S * 1e12)
    for k, ev in enumerate(line.events):
        for name in ("offset_ps", "duration_ps"):
            value = getattr(ev, name)
            if not 0 <= value <= most:
                raise ConfigError(f"must be in [0, {most:,}] (one day), got {value:,}",
                                  source=source, field=f"{where}.events[{k}].{name}")


def read_xspace(path: str | Path) -> tuple[list[TfEvent], dict]:
    """Events of every plane (``line`` is ``plane name|line name``) and the plane list.

    :raises ConfigError: naming the file, for a missing, empty, foreign, truncated or
        corrupt file, or one that is not an XSpace.
    """
    path, source = Path(path), str(path)
    sniff(path, source)
    space = XSPACE()
    most = min(limit("trace_bytes"), PROTOBUF_MAX_BYTES)
    try:
        with BudgetReader(path, most) as fh:    # plain, or gzip (*.xplane.pb.gz)
            space.ParseFromString(fh.read_all())
    except (DecodeError, RuntimeError, ValueError, OSError, EOFError, zlib.error) as exc:
        raise ConfigError(f"not an XSpace protobuf, or truncated/corrupt ({exc})",
                          source=source) from None
    planes = [p for p in space.planes if p.name]
    if not planes or not any(p.lines for p in planes):
        raise ConfigError("not a TensorFlow profile: no planes with events (is it an "
                          "*.xplane.pb written by tf.profiler?)", source=source)
    events, most_events = [], limit("trace_events")
    for i, plane in enumerate(planes):
        md = plane.event_metadata
        for j, line in enumerate(plane.lines):
            _check_times(line, source, f"planes[{i}].lines[{j}]")
            base_s = line.timestamp_ns * 1e-9
            lname = f"{plane.name}|{line.display_name or line.name}"
            if len(events) + len(line.events) > most_events:
                raise over_limit("trace_events", f"more than {most_events:,} events", source)
            for ev in line.events:
                meta = md[ev.metadata_id] if ev.metadata_id in md else None
                stats = {plane.stat_metadata[s.metadata_id].name: _stat(plane, s)
                         for s in (*(meta.stats if meta else ()), *ev.stats)
                         if s.metadata_id in plane.stat_metadata}
                ts = base_s + ev.offset_ps * 1e-12
                events.append(TfEvent(lname, meta.name if meta else "",
                                      meta.display_name if meta else "", ts,
                                      ts + ev.duration_ps * 1e-12, stats))
    return events, {"planes": [p.name for p in planes], "hostnames": list(space.hostnames)}
