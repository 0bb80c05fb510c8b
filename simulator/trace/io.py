"""The Trace on disk: one JSON document (optionally gzip-compressed, by the .gz suffix).

Format (``format: clustersim-trace``, ``version: 1``)::

    {"format": "clustersim-trace", "version": 1, "world_size": 8, "meta": {...},
     "communicators": {"shard": [[0, 1, ..., 7]], ...},
     "classes": [{"id": "all", "ranks": [0, ..., 7], "slowdown": 1.0,
                  "static_memory_bytes": 13476831232,
                  "ops": [{"id": 0, "stream": "unshard", "kind": "collective", ...}, ...]}]}

Op fields are those of :class:`~simulator.trace.schema.Op`; fields at their default value
are omitted. Reading parses the format, the structure and every field name, keeping the
values as written (no rounding of a 1.5 to 1), then checks the contract and every value with
:meth:`Trace.validate` (the one validator), and reports a truncated, corrupt
or contract-breaking file as one ConfigError naming the file. Files written before the
static memory moved onto the classes carry it as ``meta.static_memory_bytes`` ({class id:
bytes}); reading moves it onto the classes.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import zlib
from pathlib import Path

from ..errors import ConfigError
from ..inputs import BudgetReader, decode_text
from ..outpaths import atomic_writer, writable_file
from .fields import is_int
from .schema import Communicator, Op, RankClass, Trace, TraceError

FORMAT, VERSION = "clustersim-trace", 1
_OP_FIELDS = {f.name: f for f in dataclasses.fields(Op)}


def _op_dict(op: Op) -> dict:
    out = {}
    for name, f in _OP_FIELDS.items():
        value = getattr(op, name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
            else f.default
        if name in ("id", "stream", "kind", "name") or value != default:
            out[name] = list(value) if isinstance(value, tuple) else value
    return out


def trace_to_dict(trace: Trace) -> dict:
    return {"format": FORMAT, "version": VERSION, "world_size": trace.world_size,
            "meta": trace.meta,
            "communicators": {cid: [list(g) for g in c.groups]
                              for cid, c in trace.communicators.items()},
            "classes": [{"id": c.id, "ranks": list(c.ranks), "slowdown": c.slowdown,
                         "static_memory_bytes": c.static_memory_bytes,
                         "ops": [_op_dict(op) for op in c.ops]} for c in trace.classes]}


def write_trace(trace: Trace, path: str | Path, overwrite: bool = False) -> Path:
    """Write ``trace`` to ``path`` (gzip if it ends in .gz); never replaces a file unless
    ``overwrite``, and then only once the new one is complete (a link at ``path`` is
    replaced, not written through: :func:`simulator.outpaths.atomic_writer`).

    :raises ConfigError: if the file (or a symbolic link) exists and ``overwrite`` is false
        (:func:`simulator.outpaths.writable_file`).
    """
    path = writable_file(path, overwrite)
    text = json.dumps(trace_to_dict(trace), separators=(",", ":"), default=str)
    with atomic_writer(path, text=path.suffix != ".gz") as raw:
        if path.suffix == ".gz":     # as gzip.open(path, "wt") writes it, the name included
            with io.TextIOWrapper(gzip.GzipFile(filename=str(path), mode="wb", fileobj=raw),
                                  encoding="utf-8") as fh:
                fh.write(text)
        else:
            raw.write(text)
    return path


def read_trace(path: str | Path) -> Trace:
    """Read a trace written by :func:`write_trace`.

    :raises ConfigError: naming the file (and the field) for a missing, truncated, corrupt
        or contract-breaking file.
    """
    path = Path(path)
    source = str(path)
    try:
        with BudgetReader(path, limit_name="trace_file_bytes") as fh:   # plain or gzip
            raw = fh.read_all()
        data = json.loads(decode_text(raw, source, "trace file"))
    except (OSError, EOFError, zlib.error) as exc:
        raise ConfigError(f"unreadable or truncated file ({exc.__class__.__name__})",
                          source=source) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"corrupt or truncated JSON at line {exc.lineno} column "
                          f"{exc.colno}", source=source) from None
    except RecursionError:
        raise ConfigError("JSON nested too deeply to be a trace", source=source) from None
    return trace_from_dict(data, source)


def trace_from_dict(data, source: str = "<trace>") -> Trace:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"not a {FORMAT} document", source=source, field="format")
    if data.get("version") != VERSION:
        raise ConfigError(f"unsupported version {data.get('version')!r} (expected {VERSION})",
                          source=source, field="version")
    try:
        comms = {cid: Communicator(cid, tuple(tuple(g) for g in groups))
                 for cid, groups in data["communicators"].items()}
        meta = dict(data.get("meta", {}))
        legacy = meta.pop("static_memory_bytes", None)
        classes = [_class(c, source, legacy) for c in data["classes"]]
        trace = Trace(data["world_size"], classes, comms, meta)
    except KeyError as exc:
        raise ConfigError("missing required key", source=source, field=str(exc.args[0])) \
            from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"malformed trace: {exc}", source=source) from None
    if legacy is not None:
        _check_legacy_static(legacy, classes, source)
    try:
        trace.validate()
    except TraceError as exc:
        raise exc.located(source) from None
    return trace


def _class(c: dict, source: str, legacy: dict | None) -> RankClass:
    static = c.get("static_memory_bytes")
    if static is not None and legacy is not None:
        raise ConfigError("static memory given twice: in meta.static_memory_bytes (the old "
                          "form) and on the class", source=source,
                          field=f"classes[{c['id']}].static_memory_bytes")
    if static is None:
        static = (legacy or {}).get(c["id"], 0)
    slowdown = c.get("slowdown", 1.0)
    return RankClass(c["id"], tuple(c["ranks"]),
                     [_op(o, source, i, c["id"]) for i, o in enumerate(c["ops"])],
                     float(slowdown) if is_int(slowdown) else slowdown, static)


def _check_legacy_static(legacy: dict, classes: list[RankClass], source: str) -> None:
    unknown = sorted(set(legacy) - {c.id for c in classes})
    if unknown:
        raise ConfigError(f"names rank class(es) {', '.join(map(repr, unknown))} that the "
                          f"trace does not have", source=source,
                          field="meta.static_memory_bytes")


def _op(d: dict, source: str, index: int, cls: str) -> Op:
    unknown = [k for k in d if k not in _OP_FIELDS]
    if unknown:
        raise ConfigError(f"unknown op field(s) {', '.join(map(repr, unknown))}",
                          source=source, field=f"classes[{cls}].ops[{index}]")
    d = dict(d)
    if isinstance(d.get("deps"), list):
        d["deps"] = tuple(d["deps"])
    return Op(**d)
