"""From one rank's :class:`~simulator.importers.ir.RankTrace` to Trace ops with dependencies.

The host (all CPU threads that run the training loop, merged into one timeline: they take
turns, e.g. the main thread and PyTorch's autograd thread) becomes the ``host`` stream, cut
into segments at every point something else depends on: where it launches a group of GPU
kernels, issues a collective, starts or ends a wait, or enters another annotated layer.
Segment durations are the recorded wall time; a wait is not replayed as time but as
dependencies on the ops the host waited for, plus the recorded wake-up delay.

GPU kernels of one stream are grouped while they belong to the same layer (annotation at
their launch) and nothing outside waits on them or they on it. A group becomes a *head* op
(every kernel but the last: it may start once the host reached the first launch) and a
*tail* op (the last kernel: once the host reached the last launch), so a GPU that runs ahead
of a slow host is still paced by it. Durations are the kernels' busy time. Collectives keep
their own op: the replay simulates their time on the topology.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field

from ..trace.schema import Op
from .ir import Block, CommOp, DeviceOp, Labels, RankTrace

HOST = "host"
DISPATCH_MIN_S = 1e-6
SIMULATED = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all")


@dataclass
class _Node:
    start: float
    end: float                       # recorded end: host deps use it
    stream: str
    fields: dict
    deps: set[int] = field(default_factory=set)


class _Builder:
    def __init__(self, rt: RankTrace):
        self.rt = rt
        self.labels = Labels(rt.annotations)
        self.nodes: list[_Node] = []
        self.of_key: dict[int, int] = {}
        self.sources = {k for op in (*rt.device_ops, *rt.comms) for k in op.waits_on}
        self.sources |= {k for b in rt.blocks for k in b.awaited}
        self.pending: list[tuple[int, float]] = []      # (node, host time it depends on)

    def add(self, start, end, stream, **fields) -> int:
        self.nodes.append(_Node(start, end, stream, fields))
        return len(self.nodes) - 1

    # ----------------------------------------------------------------- device side
    def device(self) -> list[float]:
        """Group device ops per stream; return the host times launches depend on."""
        by_stream: dict[str, list] = {}
        for op in (*self.rt.device_ops, *(c for c in self.rt.comms if c.on_device)):
            by_stream.setdefault(op.stream if isinstance(op, DeviceOp) else op.lane,
                                 []).append(op)
        for ops in by_stream.values():
            ops.sort(key=lambda o: (o.ts, o.key))
            group: list[DeviceOp] = []
            for op in ops:
                if isinstance(op, CommOp):
                    self._flush(group)
                    group = []
                    self.comm(op)
                    continue
                if group and (op.waits_on or group[-1].key in self.sources
                              or self.labels.at(op.launch_ts)
                              != self.labels.at(group[0].launch_ts)):
                    self._flush(group)
                    group = []
                group.append(op)
            self._flush(group)
        for c in self.rt.comms:
            if not c.on_device:
                self.comm(c)
        return [t for _, t in self.pending]

    def _flush(self, group: list[DeviceOp]) -> None:
        if not group:
            return
        layer, phase = self.labels.at(group[0].launch_ts)
        parts = [group[:-1], group[-1:]] if len(group) > 1 else [group]
        for i, part in enumerate(parts):
            busy = sum(k.end - k.ts for k in part)
            name = part[0].name[:80] if len(group) == 1 else (
                f"{layer or part[0].stream} ({len(group)} kernels" + (", last)" if i else ")"))
            cats = [k.category for k in part]
            n = self.add(part[0].ts, part[-1].end, part[0].stream, kind="compute", name=name,
                         layer=layer, phase=phase, duration_s=busy,
                         op_class=max(set(cats), key=cats.count),
                         attrs={"kernels": len(part)})
            self.pending.append((n, part[0].launch_ts))
            self._wait(n, part[0].waits_on)
            for k in part:
                self.of_key[k.key] = n

    def comm(self, c: CommOp) -> None:
        layer, phase = self.labels.at(c.issue_ts)
        attrs = {"recorded_s": c.end - c.ts, "recorded_start_s": c.ts - self.rt.window[0],
                 "pg": c.pg, **c.attrs}
        if c.collective in SIMULATED:
            fields = dict(kind="collective", collective=c.collective, size_bytes=c.size_bytes,
                          comm=f"pg:{c.pg}", duration_s=None)
        else:                       # p2p and the like: not simulated, keep the recorded time
            fields = dict(kind="compute", op_class="comm", duration_s=c.end - c.ts)
            attrs["not_simulated"] = c.collective
        dispatch = c.attrs.get("dispatch_s", 0.0)
        if dispatch > DISPATCH_MIN_S:     # the worker started it late: keep that as time
            d = self.add(c.ts - dispatch, c.ts, c.lane, kind="delay", name=f"dispatch: {c.name}",
                         layer=layer, phase=phase or "comm", duration_s=dispatch)
            self.pending.append((d, c.issue_ts))
        n = self.add(c.ts, c.end, c.lane, name=c.name, layer=layer, phase=phase or "comm",
                     attrs=attrs, **fields)
        self.pending.append((n, c.issue_ts))
        self._wait(n, c.waits_on)
        self.of_key[c.key] = n

    def _wait(self, n: int, keys) -> None:
        self.nodes[n].fields.setdefault("_wait_keys", []).extend(keys)

    # ------------------------------------------------------------------- host side
    def host(self, launch_times: list[float]) -> None:
        t0, t1 = self.rt.window
        blocks = _merge_blocks(self.rt.blocks, t0, t1)
        cuts = {t0, t1, *launch_times, *(t for b in blocks for t in (b.ts, b.end)),
                *self.labels.boundaries(t0, t1)}
        cuts = sorted(t for t in cuts if t0 <= t <= t1)
        starts = [b.ts for b in blocks]
        items = [(blk.end, 0, blk) for blk in blocks]        # a wait before what follows it
        for a, b in zip(cuts, cuts[1:]):
            i = bisect.bisect_right(starts, a) - 1
            if b > a and not (i >= 0 and blocks[i].ts <= a and b <= blocks[i].end):
                items.append((a, 1, b))
        for a, is_segment, item in sorted(items, key=lambda x: (x[0], x[1])):
            if is_segment:
                self._segment(a, item)
            else:
                self._resume(item)

    def _segment(self, a: float, b: float) -> None:
        kind = self.rt.host_kind
        layer, phase = self.labels.at((a + b) / 2)
        self.add(a, b, HOST, kind=kind, name=layer or "host", layer=layer, phase=phase,
                 duration_s=b - a, op_class="cpu" if kind == "compute" else "")

    def _resume(self, blk: Block) -> None:
        """The host waited: it goes on when the awaited ops are done, after the recorded
        wake-up delay (the time from the last of them ending to the host going on)."""
        known = [k for k in blk.awaited if k in self.of_key]
        ready = max((self.nodes[self.of_key[k]].end for k in known), default=blk.ts)
        layer, phase = self.labels.at(blk.end)
        first = self.nodes[self.of_key[known[0]]].fields["name"] if known else "?"
        n = self.add(blk.end, blk.end, HOST, kind="delay", name=f"wait: {first}",
                     layer=layer, phase=phase,
                     duration_s=max(0.0, blk.end - max(ready, blk.ts)),
                     attrs={"waited_recorded_s": blk.end - blk.ts})
        self._wait(n, known)

    def link(self) -> None:
        """Turn waits and launch times into dependency edges."""
        host = sorted((nd.end, i) for i, nd in enumerate(self.nodes) if nd.stream == HOST)
        ends = [e for e, _ in host]
        for n, t in self.pending:
            j = bisect.bisect_right(ends, t + 1e-9) - 1
            if j >= 0:
                self.nodes[n].deps.add(host[j][1])
        for nd in self.nodes:
            nd.deps |= {self.of_key[k] for k in nd.fields.pop("_wait_keys", ())
                        if k in self.of_key}

    def ops(self) -> list[Op]:
        order = _toposort(self.nodes)
        ids = {n: i for i, n in enumerate(order)}
        out = []
        for n in order:
            nd = self.nodes[n]
            deps = tuple(sorted(ids[d] for d in nd.deps if d != n))
            out.append(Op(id=ids[n], stream=nd.stream, deps=deps, **nd.fields))
        return out


def _merge_blocks(blocks: list[Block], t0: float, t1: float) -> list[Block]:
    out: list[Block] = []
    for b in sorted(blocks, key=lambda b: b.ts):
        ts, end = max(b.ts, t0), min(b.end, t1)
        if end <= ts:
            continue
        if out and ts <= out[-1].end:
            out[-1].end = max(out[-1].end, end)
            out[-1].awaited = [*out[-1].awaited, *b.awaited]
        else:
            out.append(Block(ts, end, list(b.awaited)))
    return out


def _toposort(nodes: list[_Node]) -> list[int]:
    """Kahn's algorithm, earliest recorded start first; ops of a stream keep their order.
    An edge that would close a cycle (clock noise) is dropped."""
    last: dict[str, int] = {}
    for i in sorted(range(len(nodes)), key=lambda i: (nodes[i].start, i)):
        prev = last.get(nodes[i].stream)
        if prev is not None:
            nodes[i].deps.add(prev)
        last[nodes[i].stream] = i
    indeg = [len(nd.deps - {i}) for i, nd in enumerate(nodes)]
    users: dict[int, list[int]] = {}
    for i, nd in enumerate(nodes):
        for d in nd.deps - {i}:
            users.setdefault(d, []).append(i)
    heap = [(nd.start, i) for i, nd in enumerate(nodes) if indeg[i] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    placed = set()
    while len(order) < len(nodes):
        if not heap:            # a cycle: release the earliest blocked node, drop its edges
            i = min((i for i in range(len(nodes)) if i not in placed),
                    key=lambda i: (nodes[i].start, i))
            nodes[i].deps &= placed
            heap.append((nodes[i].start, i))
        _, i = heapq.heappop(heap)
        if i in placed:
            continue
        placed.add(i)
        order.append(i)
        for u in users.get(i, ()):
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(heap, (nodes[u].start, u))
    return order


def build_ops(rt: RankTrace) -> list[Op]:
    """Ops of one rank's iteration (ids 0..n-1 in a dependency-respecting order)."""
    b = _Builder(rt)
    b.host(b.device())
    b.link()
    return b.ops()
