"""Chakra ``.et`` files (one per rank) -> a Trace (:mod:`.chakra` writes them).

Files clustersim wrote carry the exact ops and the Trace's metadata: they read back as the
same Trace (ranks of one class share its first member's ops). Any other Chakra trace is read
from the standard fields, one rank class per file (the rank from ``PREFIX.<rank>.et``, else
the order given): ``COMP_NODE`` is a compute op (its ``duration_micros`` when set, else
``num_ops`` FLOPs and ``tensor_size`` bytes), a CPU one (``is_cpu_op``) a delay;
``COMM_COLL_NODE`` a collective on process group ``pg_name`` (all ranks if none);
``COMM_SEND_NODE``/``COMM_RECV_NODE`` a send/recv with ``comm_dst``/``comm_src`` and
``comm_tag``; ``MEM_LOAD_NODE``/``MEM_STORE_NODE`` a host copy. Nodes run in dependency
order (``ctrl_deps`` and ``data_deps``, ties by id) on one stream per kind.
"""

from __future__ import annotations

import heapq
import json
import re
from pathlib import Path

from ..errors import ConfigError
from ..inputs import read_bytes
from ..trace.io import trace_from_dict
from ..trace.schema import Communicator, Op, RankClass, Trace
from .chakra import OP_ATTR, RANK_ATTR, TRACE_ATTR, decode
from .chakra_pb import COLLECTIVE_TYPES, NODE_TYPES

_RANK = re.compile(r"\.(\d+)\.et$")
_STREAM = {"COMP_NODE": "compute", "COMM_COLL_NODE": "comm", "COMM_SEND_NODE": "p2p",
           "COMM_RECV_NODE": "p2p", "MEM_LOAD_NODE": "h2d", "MEM_STORE_NODE": "d2h"}


def attrs(message) -> dict:
    """``{name: value}`` of a node's or metadata's AttributeProto list."""
    out = {}
    for a in message.attr:
        kind = a.WhichOneof("value")
        value = getattr(a, kind) if kind else None
        out[a.name] = list(value.values) if kind and kind.endswith("_list") else value
    return out


def read_chakra(paths) -> Trace:
    """The Trace of Chakra files ``paths`` (one per rank).

    :raises ConfigError: naming the file: not a Chakra trace, a node type with no op, or
        a Trace that breaks its contract.
    """
    files = [Path(p) for p in paths]
    if not files:
        raise ConfigError("no Chakra files given")
    parsed = []
    for path in files:
        data = read_bytes(path, "Chakra trace", "trace_file_bytes")
        parsed.append((str(path), *decode(data, str(path))))
    if all(TRACE_ATTR in attrs(meta) for _, meta, _ in parsed):
        return _ours(parsed)
    return _foreign(parsed)


def _ours(parsed: list) -> Trace:
    """A trace clustersim wrote: the classes of its metadata, ops from each class's first
    member's file."""
    by_rank, whole = {}, None
    for source, meta, nodes in parsed:
        a = attrs(meta)
        whole = json.loads(a[TRACE_ATTR])
        by_rank[int(a[RANK_ATTR])] = (source, whole["class"], nodes)
    classes = {}
    for rank in sorted(by_rank):
        source, cls, nodes = by_rank[rank]
        if cls["id"] not in classes and rank == cls["ranks"][0]:
            classes[cls["id"]] = {**cls, "ops": [json.loads(attrs(n)[OP_ATTR]) for n in nodes]}
    missing = sorted({by_rank[r][1]["id"] for r in by_rank} - set(classes))
    if missing:
        raise ConfigError(f"the file of the first rank of class {missing[0]!r} is missing",
                          source=parsed[0][0])
    data = {"format": "clustersim-trace", "version": 1, "world_size": whole["world_size"],
            "meta": whole["meta"], "communicators": whole["communicators"],
            "classes": list(classes.values())}
    return trace_from_dict(data, source=", ".join(s for s, _, _ in parsed[:3]))


def _order(nodes) -> list:
    """Nodes in dependency order, ties by id (Kahn's algorithm on a heap)."""
    by_id = {n.id: n for n in nodes}
    waiting = {n.id: {d for d in (*n.ctrl_deps, *n.data_deps) if d in by_id} for n in nodes}
    users: dict[int, list[int]] = {}
    for i, deps in waiting.items():
        for d in deps:
            users.setdefault(d, []).append(i)
    ready = [i for i, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(by_id[i])
        for j in users.get(i, ()):
            waiting[j].discard(i)
            if not waiting[j]:
                heapq.heappush(ready, j)
    if len(out) != len(nodes):
        raise ConfigError("the nodes' dependencies form a cycle")
    return out


def _op(node, source: str) -> Op:
    kind, a = NODE_TYPES[node.type], attrs(node)
    deps = tuple(sorted({*node.ctrl_deps, *node.data_deps}))
    common = {"id": int(node.id), "name": node.name or f"node{node.id}",
              "stream": _STREAM.get(kind, "compute"), "deps": deps}
    seconds = node.duration_micros / 1e6 if node.duration_micros else None
    if kind == "COMP_NODE":
        if a.get("is_cpu_op"):
            return Op(kind="delay", duration_s=seconds or 0.0, **{**common, "stream": "host"})
        return Op(kind="compute", duration_s=seconds, flops=float(a.get("num_ops", 0)),
                  bytes_accessed=float(a.get("tensor_size", 0)),
                  op_class=a.get("op_type") or "matmul", **common,
                  attrs={k: a[k] for k in ("m", "n", "k", "groups", "precision") if k in a})
    if kind == "COMM_COLL_NODE":
        return Op(kind="collective", collective=COLLECTIVE_TYPES[a.get("comm_type", 0)].lower(),
                  size_bytes=int(a.get("comm_size", 0)), comm=a.get("pg_name") or "world",
                  **common)
    if kind in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
        send = kind == "COMM_SEND_NODE"
        return Op(kind="send" if send else "recv", size_bytes=int(a.get("comm_size", 0)),
                  peer=int(a.get("comm_dst" if send else "comm_src", -1)),
                  attrs={"tag": int(a.get("comm_tag", 0))}, **common)
    if kind in ("MEM_LOAD_NODE", "MEM_STORE_NODE"):
        return Op(kind="memcpy", size_bytes=int(a.get("tensor_size", 0)),
                  attrs={"direction": "h2d" if kind == "MEM_LOAD_NODE" else "d2h"}, **common)
    raise ConfigError(f"node {node.id} ({node.name}): {kind} has no clustersim op",
                      source=source)


def _foreign(parsed: list) -> Trace:
    ranks = []
    for i, (source, _, _) in enumerate(parsed):
        m = _RANK.search(source)
        ranks.append(int(m.group(1)) if m else i)
    if len(set(ranks)) != len(ranks):
        raise ConfigError("two files name the same rank", source=parsed[0][0])
    world = max(ranks) + 1
    classes, groups = [], {}
    for rank, (source, _, nodes) in zip(ranks, parsed):
        ops = [_op(n, source) for n in _order([n for n in nodes
                                               if NODE_TYPES[n.type] != "METADATA_NODE"])]
        for op in ops:
            if op.kind == "collective":
                groups.setdefault(op.comm, set()).add(rank)
        classes.append(RankClass(f"rank{rank}", (rank,), ops))
    comms = {pg: Communicator(pg, (tuple(sorted(members)),)) for pg, members in groups.items()}
    meta = {"model": "imported", "strategy": "chakra trace", "framework": "chakra",
            "files": [s for s, _, _ in parsed], "global_batch": 0, "tokens_per_sample": 0,
            "model_flops_per_iteration": 0.0}
    trace = Trace(world, classes, comms, meta)
    try:
        trace.validate()
    except ConfigError as exc:
        raise ConfigError(str(exc), source=", ".join(s for s, _, _ in parsed[:3])) from None
    return trace
