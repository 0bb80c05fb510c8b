"""Chakra execution traces (ASTRA-sim's workload format): a Trace to one ``.et`` file per
rank, and ``.et`` files back to a Trace.

A file is a stream of length-prefixed (varint) protobuf messages: one ``GlobalMetadata``,
then the rank's ``Node`` messages (:mod:`.chakra_pb`, built from ``et_def.proto``). Each op
becomes a node with the fields a Chakra consumer reads: ``COMP_NODE`` (``num_ops`` FLOPs,
``tensor_size`` bytes, ``duration_micros`` when the op has a measured duration, ``m``,
``n``, ``k`` of a GEMM or attention kernel and its own ``precision`` where the op has them;
a ``delay`` is a CPU ``COMP_NODE``), ``COMM_COLL_NODE`` (``comm_type``, ``comm_size`` in nccl-tests
terms, ``pg_name``), ``COMM_SEND_NODE``/``COMM_RECV_NODE`` (``comm_src``, ``comm_dst``,
``comm_size``, ``comm_tag``), ``MEM_LOAD_NODE``/``MEM_STORE_NODE`` (host copies); the previous
op of the same stream is a ``ctrl_dep``, the op's own ``deps`` are ``data_deps``. Each node
also carries its exact clustersim op (``clustersim.op``, JSON) and the metadata the Trace
(``clustersim.trace``), so a clustersim trace reads back unchanged; a foreign Chakra trace
(no such attributes) is read from the standard fields, one rank class per file.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError
from ..inputs import limit, over_limit
from ..outpaths import atomic_write_bytes
from ..trace.io import trace_to_dict
from ..trace.schema import Trace
from .chakra_pb import COLLECTIVE_TYPES, METADATA, NODE, NODE_TYPES

VERSION = "0.0.4"                # the Chakra schema version the files declare
OP_ATTR, TRACE_ATTR, RANK_ATTR = "clustersim.op", "clustersim.trace", "clustersim.rank"
_KIND_TYPE = {"compute": "COMP_NODE", "delay": "COMP_NODE", "collective": "COMM_COLL_NODE",
              "send": "COMM_SEND_NODE", "recv": "COMM_RECV_NODE"}


# ------------------------------------------------------------------------------ framing
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def encode(messages) -> bytes:
    """Messages as Chakra writes them: each one's size (varint), then its bytes."""
    parts = []
    for m in messages:
        data = m.SerializeToString(deterministic=True)
        parts += [_varint(len(data)), data]
    return b"".join(parts)


def decode(data: bytes, source: str) -> tuple:
    """(GlobalMetadata, [Node]) of one file's bytes."""
    chunks, pos = [], 0
    while pos < len(data):
        size = shift = 0
        while True:
            if pos >= len(data):
                raise ConfigError("truncated Chakra trace (a message size runs past the end)",
                                  source=source)
            byte = data[pos]
            pos += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
            if shift >= 64:                 # a varint is at most 10 bytes
                raise ConfigError("not a Chakra execution trace (a message size of more "
                                  "than 10 bytes)", source=source)
        if pos + size > len(data):
            raise ConfigError("truncated Chakra trace (a message runs past the end)",
                              source=source)
        chunks.append(data[pos:pos + size])
        pos += size
        if len(chunks) > limit("trace_events") + 1:     # the metadata, then one per node
            raise over_limit("trace_events", f"more than {limit('trace_events'):,} nodes",
                             source)
    if not chunks:
        raise ConfigError("empty Chakra trace: no GlobalMetadata", source=source)
    try:
        meta = METADATA.FromString(chunks[0])
        return meta, [NODE.FromString(c) for c in chunks[1:]]
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError and others
        raise ConfigError(f"not a Chakra execution trace ({type(exc).__name__})",
                          source=source) from None


def standard_only(data: bytes, source: str = "<chakra>") -> bytes:
    """The bytes of a file without clustersim's own attributes (``clustersim.op`` and the
    metadata's): a plain Chakra trace, read from the standard fields."""
    meta, nodes = decode(data, source)
    meta.ClearField("attr")
    for n in nodes:
        keep = [a for a in n.attr if a.name != OP_ATTR]
        n.ClearField("attr")
        n.attr.extend(keep)
    return encode([meta, *nodes])


# ------------------------------------------------------------------------------- export
def _attr(node, name: str, kind: str, value) -> None:
    a = node.attr.add(name=name)
    setattr(a, f"{kind}_val", value)


def _node(op, cls, rank: int, prev: int | None, exact: dict):
    kind = _KIND_TYPE.get(op.kind, "COMP_NODE")
    if op.kind == "memcpy" or (op.kind in ("send", "recv") and "host" in op.attrs):
        to_host = op.attrs.get("direction") == "d2h" or op.kind == "send"
        kind = "MEM_STORE_NODE" if to_host else "MEM_LOAD_NODE"
    node = NODE(id=op.id, name=op.name, type=NODE_TYPES.index(kind),
                data_deps=list(op.deps), ctrl_deps=[] if prev is None else [prev])
    if op.duration_s is not None:
        node.duration_micros = round(op.duration_s * 1e6)
    _attr(node, "is_cpu_op", "bool", op.kind == "delay")
    if kind == "COMP_NODE" and op.kind == "compute":
        _attr(node, "num_ops", "int64", round(op.flops))
        _attr(node, "tensor_size", "uint64", round(op.bytes_accessed))
        _attr(node, "op_type", "string", op.op_class)
        for key in ("m", "n", "k", "groups"):          # GEMM / attention shape (docs/compute.md)
            if key in op.attrs:
                _attr(node, key, "int64", int(op.attrs[key]))
        for key in ("precision", "launch"):   # a kernel's own precision; how it launches
            if op.attrs.get(key):
                _attr(node, key, "string", op.attrs[key])
        if op.attrs.get("transa"):            # a weight gradient's transposed A
            _attr(node, "transa", "bool", True)
    elif kind == "COMM_COLL_NODE":
        _attr(node, "comm_type", "int64", COLLECTIVE_TYPES.index(op.collective.upper()))
        _attr(node, "comm_size", "int64", op.size_bytes)
        _attr(node, "pg_name", "string", op.comm)
    elif kind in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
        peer = cls.peer_of(op, rank)
        src, dst = (rank, peer) if op.kind == "send" else (peer, rank)
        _attr(node, "comm_src", "int32", src)
        _attr(node, "comm_dst", "int32", dst)
        _attr(node, "comm_size", "int64", op.size_bytes)
        tag = op.attrs.get("tag")
        _attr(node, "comm_tag", "int64", tag if isinstance(tag, int) else 0)
    elif kind in ("MEM_LOAD_NODE", "MEM_STORE_NODE"):
        _attr(node, "tensor_size", "uint64", op.size_bytes)
    _attr(node, OP_ATTR, "string", json.dumps(exact, sort_keys=True))
    return node


def rank_messages(trace: Trace, cls, rank: int, exact: list[dict]) -> list:
    """The GlobalMetadata and Nodes of ``rank`` (a member of ``cls``); ``exact``: the ops
    of ``cls`` as the trace file writes them (:func:`simulator.trace.io.trace_to_dict`)."""
    whole = {"world_size": trace.world_size, "meta": trace.meta,
             "communicators": {cid: [list(g) for g in c.groups]
                               for cid, c in trace.communicators.items()},
             "class": {"id": cls.id, "ranks": list(cls.ranks), "slowdown": cls.slowdown,
                       "static_memory_bytes": cls.static_memory_bytes}}
    meta = METADATA(version=VERSION)
    for name, kind, value in ((RANK_ATTR, "int64", rank),
                              (TRACE_ATTR, "string", json.dumps(whole, sort_keys=True))):
        a = meta.attr.add(name=name)
        setattr(a, f"{kind}_val", value)
    last: dict[str, int] = {}
    nodes = []
    for op, op_dict in zip(cls.ops, exact):
        nodes.append(_node(op, cls, rank, last.get(op.stream), op_dict))
        last[op.stream] = op.id
    return [meta, *nodes]


def write_chakra(trace: Trace, prefix: str | Path, overwrite: bool = False) -> list[Path]:
    """Write ``PREFIX.<rank>.et`` for every rank (ASTRA-sim reads one file per NPU), each
    renamed into place once complete (:func:`simulator.outpaths.atomic_write_bytes`)."""
    prefix = Path(prefix)
    paths = {r: prefix.with_name(f"{prefix.name}.{r}.et") for c in trace.classes
             for r in c.ranks}
    clash = [p for p in paths.values() if p.exists() or p.is_symlink()]
    if clash and not overwrite:
        raise ConfigError(f"{len(clash)} file(s) exist (first {clash[0]}); pass --overwrite",
                          source=str(prefix))
    prefix.parent.mkdir(parents=True, exist_ok=True)
    as_dicts = trace_to_dict(trace)["classes"]
    for cls, data in zip(trace.classes, as_dicts):
        for rank in cls.ranks:
            atomic_write_bytes(paths[rank], encode(rank_messages(trace, cls, rank,
                                                                 data["ops"])))
    return [paths[r] for r in sorted(paths)]
