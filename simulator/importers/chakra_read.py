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

Every field is checked where it is read (:mod:`.chakra_fields`), and so is the whole: one
file per rank, none given twice, the ranks of the file names exactly ``0..N-1`` (a file
named ``x.1000000000.et`` is not a billion-rank world), every rank issuing the same
collectives in the same order on each process group it shares, the metadata of clustersim's
own files the same in every file. A refusal is one ConfigError naming the file and the field
(``node 12.comm_size``, ``GlobalMetadata.clustersim.trace``).
"""

from __future__ import annotations

import heapq
import json
import os
import re
from pathlib import Path

from ..errors import ConfigError
from ..inputs import read_bytes
from ..trace.fields import MAX_RANKS, MAX_SIZE_BYTES
from ..trace.io import trace_from_dict
from ..trace.schema import Communicator, Op, RankClass, Trace
from .chakra import OP_ATTR, RANK_ATTR, TRACE_ATTR, decode
from .chakra_fields import MAX_FLOPS, NodeFields, attrs, check_ids, number

_RANK = re.compile(r"\.(\d+)\.et$")
_STREAM = {"COMP_NODE": "compute", "COMM_COLL_NODE": "comm", "COMM_SEND_NODE": "p2p",
           "COMM_RECV_NODE": "p2p", "MEM_LOAD_NODE": "h2d", "MEM_STORE_NODE": "d2h"}
MAX_GROUPS = 2 ** 16                # GEMMs of one grouped GEMM (an MoE rank's experts)
MAX_DURATION_US = 10 ** 15          # the Trace's duration limit (1e9 s) in microseconds

__all__ = ["attrs", "read_chakra"]


def read_chakra(paths) -> Trace:
    """The Trace of Chakra files ``paths`` (one per rank).

    :raises ConfigError: naming the file (and the field): not a Chakra trace, a field out
        of range, a node type with no op, ranks that do not match, or a Trace that breaks
        its contract.
    """
    files = [Path(p) for p in paths]
    if not files:
        raise ConfigError("no Chakra files given")
    if len(files) > MAX_RANKS:
        raise ConfigError(f"{len(files):,} files; at most {MAX_RANKS:,} ranks",
                          source=str(files[0]))
    _distinct(files)
    parsed = []
    for path in files:
        data = read_bytes(path, "Chakra trace", "trace_file_bytes")
        parsed.append((str(path), *decode(data, str(path))))
    if all(TRACE_ATTR in attrs(meta) for _, meta, _ in parsed):
        return _ours(parsed)
    return _foreign(parsed)


def _distinct(files: list[Path]) -> None:
    """No file given twice (by name or through a link)."""
    seen: dict = {}
    for path in files:
        try:
            st = os.stat(path)
            key = (st.st_dev, st.st_ino)
        except OSError:
            key = str(path)                 # read_bytes words what is wrong with it
        if key in seen:
            raise ConfigError(f"given twice (also as {seen[key]})", source=str(path))
        seen[key] = str(path)


# ----------------------------------------------------------------- clustersim's own files
def _json_attr(a: dict, name: str, source: str, where: str):
    """The JSON document in string attribute ``name`` of ``a`` (``where``: the message)."""
    field = f"{where}.{name}"
    text = a.get(name)
    if not isinstance(text, str):
        raise ConfigError(f"must be a JSON string, got {type(text).__name__}", source=source,
                          field=field)
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise ConfigError(f"not valid JSON ({reason[:60]}): the file is damaged",
                          source=source, field=field) from None
    if not isinstance(value, dict):
        raise ConfigError("must be a JSON object", source=source, field=field)
    return value


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number")


def _whole(source: str, meta) -> tuple[int, dict]:
    """(rank, the Trace's metadata) of one of our files, checked."""
    a = attrs(meta)
    whole = _json_attr(a, TRACE_ATTR, source, "GlobalMetadata")
    field = f"GlobalMetadata.{TRACE_ATTR}"
    world, cls = whole.get("world_size"), whole.get("class")
    if isinstance(world, bool) or not isinstance(world, int) or not 1 <= world <= MAX_RANKS:
        shown = number(world) if isinstance(world, int) else f"{world!r:.40}"
        raise ConfigError(f"must be a whole number in [1, {MAX_RANKS:,}], got {shown}",
                          source=source, field=f"{field}.world_size")
    if not isinstance(cls, dict) or not isinstance(cls.get("ranks"), list) \
            or not cls["ranks"] or not isinstance(cls.get("id"), str):
        raise ConfigError("class must be an object with an id and a list of ranks",
                          source=source, field=f"{field}.class")
    rank = a.get(RANK_ATTR)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank not in cls["ranks"]:
        raise ConfigError(f"must be one of the ranks of class {cls['id']!r:.40}, got "
                          f"{rank!r:.40}", source=source, field=f"GlobalMetadata.{RANK_ATTR}")
    return rank, whole


def _ours(parsed: list) -> Trace:
    """A trace clustersim wrote: the classes of its metadata, ops from each class's first
    member's file."""
    by_rank, first = {}, None
    for source, meta, nodes in parsed:
        rank, whole = _whole(source, meta)
        shared = {k: v for k, v in whole.items() if k != "class"}
        if first is None:
            first = (source, shared)
        elif shared != first[1]:
            raise ConfigError(f"its Trace metadata differ from {first[0]}'s: files of two "
                              f"different traces", source=source,
                              field=f"GlobalMetadata.{TRACE_ATTR}")
        if rank in by_rank:
            raise ConfigError(f"both this file and {by_rank[rank][0]} are rank {rank}",
                              source=source, field=f"GlobalMetadata.{RANK_ATTR}")
        by_rank[rank] = (source, whole["class"], nodes)
    classes = {}
    for rank in sorted(by_rank):
        source, cls, nodes = by_rank[rank]
        if cls["id"] not in classes and rank == cls["ranks"][0]:
            classes[cls["id"]] = {**cls, "ops": [_json_attr(attrs(n), OP_ATTR, source,
                                                            f"node {n.id}") for n in nodes]}
    missing = sorted({by_rank[r][1]["id"] for r in by_rank} - set(classes))
    if missing:
        raise ConfigError(f"the file of the first rank of class {missing[0]!r:.40} is missing",
                          source=parsed[0][0])
    data = {"format": "clustersim-trace", "version": 1, **first[1],
            "classes": list(classes.values())}
    return trace_from_dict(data, source=_sources(parsed))


def _sources(parsed: list) -> str:
    names = [s for s, _, _ in parsed]
    return ", ".join(names[:3]) + (f" (+{len(names) - 3} more)" if len(names) > 3 else "")


# ------------------------------------------------------------------ any other Chakra trace
def _order(nodes, source: str) -> list:
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
        stuck = min(i for i, deps in waiting.items() if deps)
        raise ConfigError(f"the nodes' dependencies form a cycle (node {stuck} is on or "
                          f"behind it)", source=source, field=f"node {stuck}.data_deps")
    return out


def _op(node, source: str) -> Op:
    f = NodeFields(node, source)
    kind = f.kind()
    deps = tuple(sorted({*node.ctrl_deps, *node.data_deps}))
    common = {"id": int(node.id), "name": node.name or f"node{node.id}",
              "stream": _STREAM.get(kind, "compute"), "deps": deps}
    if node.duration_micros > MAX_DURATION_US:
        raise f.fail("duration_micros", f"must be at most {MAX_DURATION_US:,} (1e9 s), got "
                                        f"{node.duration_micros:,}")
    seconds = node.duration_micros / 1e6 if node.duration_micros else None
    if kind == "COMP_NODE":
        if f.flag("is_cpu_op"):
            return Op(kind="delay", duration_s=seconds or 0.0, **{**common, "stream": "host"})
        named = {k: f.text(k) for k in ("precision", "launch") if k in f.a}
        shape = {k: f.whole(k) for k in ("m", "n", "k") if k in f.a}
        if "groups" in f.a:
            shape["groups"] = f.whole("groups", most=MAX_GROUPS, least=1)
        if f.flag("transa"):
            shape["transa"] = True
        return Op(kind="compute", duration_s=seconds, flops=f.amount("num_ops", MAX_FLOPS),
                  bytes_accessed=f.amount("tensor_size", MAX_SIZE_BYTES),
                  op_class=f.text("op_type") or "matmul", **common,
                  attrs={**shape, **named})
    if kind == "COMM_COLL_NODE":
        return Op(kind="collective", collective=f.collective(),
                  size_bytes=f.whole("comm_size"), comm=f.text("pg_name") or "world", **common)
    if kind in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
        send = kind == "COMM_SEND_NODE"
        peer = "comm_dst" if send else "comm_src"
        if peer not in f.a:
            raise f.fail(peer, "missing: the peer rank of a send or recv")
        return Op(kind="send" if send else "recv", size_bytes=f.whole("comm_size"),
                  peer=f.whole(peer, most=MAX_RANKS),
                  attrs={"tag": f.whole("comm_tag", least=-(1 << 63), most=1 << 64)},
                  **common)
    if kind in ("MEM_LOAD_NODE", "MEM_STORE_NODE"):
        return Op(kind="memcpy", size_bytes=f.whole("tensor_size"),
                  attrs={"direction": "h2d" if kind == "MEM_LOAD_NODE" else "d2h"}, **common)
    raise f.fail("type", f"{kind} has no clustersim op (read: COMP, COMM_COLL, COMM_SEND, "
                         f"COMM_RECV, MEM_LOAD, MEM_STORE, METADATA nodes)")


def _ranks(parsed: list) -> list[int]:
    """The rank of each file: from ``PREFIX.<rank>.et``, else its place in the list; the
    ranks must be ``0..N-1`` for N files."""
    ranks, seen = [], {}
    for i, (source, _, _) in enumerate(parsed):
        m = _RANK.search(source)
        rank = int(m.group(1)) if m and len(m.group(1)) <= 9 else i if not m else len(parsed)
        if rank >= len(parsed):
            raise ConfigError(f"the file name says rank {m.group(1)[:12]}, but {len(parsed)} "
                              f"file(s) are given: ranks 0..{len(parsed) - 1}, one file each",
                              source=source)
        if rank in seen:
            raise ConfigError(f"both this file and {seen[rank]} are rank {rank}", source=source)
        seen[rank] = source
        ranks.append(rank)
    return ranks


def _rank_ops(source: str, nodes) -> list[Op]:
    check_ids(nodes, source)
    work = [n for n in nodes if NodeFields(n, source).kind() != "METADATA_NODE"]
    if not work:
        raise ConfigError("no nodes: nothing for this rank to run", source=source)
    return [_op(n, source) for n in _order(work, source)]


def _check_matching(classes: list[RankClass], sources: dict[int, str]) -> None:
    """Every rank issues the same collectives, in the same order, on each process group."""
    first: dict[str, tuple[int, list[str]]] = {}
    for cls in classes:
        rank = cls.ranks[0]
        by_pg: dict[str, list[str]] = {}
        for op in cls.ops:
            if op.kind == "collective":
                by_pg.setdefault(op.comm, []).append(op.collective)
        for pg, seq in by_pg.items():
            if pg not in first:
                first[pg] = (rank, seq)
                continue
            other, want = first[pg]
            if seq != want:
                at = next((i for i, (a, b) in enumerate(zip(seq, want)) if a != b),
                          min(len(seq), len(want)))
                mine = seq[at] if at < len(seq) else "nothing"
                theirs = want[at] if at < len(want) else "nothing"
                raise ConfigError(
                    f"ranks do not match on process group {pg!r:.40}: collective #{at} is "
                    f"{mine} here and {theirs} on rank {other} ({len(seq)} vs {len(want)} "
                    f"collectives); give the files of one job", source=sources[rank])


def _foreign(parsed: list) -> Trace:
    ranks = _ranks(parsed)
    classes, groups, sources = [], {}, {}
    for rank, (source, _, nodes) in zip(ranks, parsed):
        ops = _rank_ops(source, nodes)
        for op in ops:
            if op.kind == "collective":
                groups.setdefault(op.comm, set()).add(rank)
        classes.append(RankClass(f"rank{rank}", (rank,), ops))
        sources[rank] = source
    _check_matching(classes, sources)
    comms = {pg: Communicator(pg, (tuple(sorted(members)),)) for pg, members in groups.items()}
    meta = {"model": "imported", "strategy": "chakra trace", "framework": "chakra",
            "files": [s for s, _, _ in parsed], "global_batch": 0, "tokens_per_sample": 0,
            "model_flops_per_iteration": 0.0}
    trace = Trace(len(parsed), classes, comms, meta)
    try:
        trace.validate()
    except ConfigError as exc:
        raise ConfigError(exc.reason, source=_sources(parsed), field=exc.field) from None
    return trace
