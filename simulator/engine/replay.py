"""Replay a :class:`~simulator.trace.Trace` on a cluster: streams, dependencies, rendezvous.

Each (rank class, stream) is one SimPy process running its ops in order, as a CUDA stream
does; ``deps`` wait on ops of other streams. A collective starts when every rank class in
its communicator has reached it (so a slow rank delays the group), then all instance groups
of the communicator put their flows on the fabric at once and the op ends when the last
instance finishes. Compute takes the compute model's time, scaled by the class's slowdown
and, while a communication kernel of the same class runs, by ``1 + overlap_slowdown``.
Memory is the class's static memory plus what ops allocate at start and free at end.

Op attributes the engine reads: ``algorithm``, ``protocol`` and ``root`` pin how a
collective is planned (e.g. ``star`` copies, :mod:`simulator.collectives.copies`);
``repeat`` runs a compute, memcpy or delay op that many times back to back; a ``send`` or
``recv`` with ``host`` (a server index) copies between every GPU of the class and that
server's host memory through NIC ``nic`` (:mod:`simulator.collectives.host`).

Memory back-pressure (the CUDA caching allocator near the limit). PyTorch allocates in CPU
issue order; when a cudaMalloc fails it frees its cache, synchronises and retries, so the
CPU stops running ahead until the GPU has freed memory. Here an op allocates when it
starts, so an op issued later (a prefetched all-gather) may start first; it may do so only
if it leaves room for the allocations of every op issued before it that has not started yet
(their frees come later). Otherwise it waits, in issue order, until frees make room; time
spent so is ``memory_wait_s``. Only when nothing left running can free memory (the working
set does not fit) is the oldest waiter let through over capacity, and the class is out of
memory at that op.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

from ..collectives.host import host_flow
from ..collectives.model import CollectiveModel
from ..network.fabric import CountingEnvironment, make_fabric
from ..trace.schema import Op, RankClass, Trace

COMM_KINDS = ("collective", "send", "recv")


@dataclass(frozen=True)
class EngineConfig:
    """Knobs of the replay. ``overlap_slowdown``: extra compute time fraction while a
    communication kernel runs on the same GPU (SM and memory contention); ``host_bw``:
    bytes/s of host-device copies."""

    fidelity: str = "flow"
    overlap_slowdown: float = 0.0
    host_bytes_per_s: float = 25e9
    precision: str = "bf16"


@dataclass
class OpRecord:
    """What happened to one op of one rank class (times in seconds)."""

    cls: str
    op_id: int
    name: str
    stream: str
    kind: str
    layer: str
    phase: str
    ready_s: float       # dependencies done, stream free
    start_s: float       # started (after rendezvous for collectives)
    end_s: float
    size_bytes: int = 0
    algorithm: str = ""
    protocol: str = ""

    @property
    def wait_s(self) -> float:
        return self.start_s - self.ready_s


@dataclass
class Timeline:
    """The replay's result."""

    records: list[OpRecord]
    memory: dict[str, list[tuple[float, int]]]
    peak_memory_bytes: dict[str, int]
    oom: dict[str, str | None]
    link_bytes: np.ndarray
    iteration_time_s: float
    events: int
    capacity_bytes: int = 0
    meta: dict = field(default_factory=dict)
    link_groups: list[str] = field(default_factory=list)      # link types
    link_samples: list[tuple[float, np.ndarray]] = field(default_factory=list)
    memory_wait_s: dict = field(default_factory=dict)    # class -> seconds ops waited


class _Fenwick:
    """Prefix sums over op ids with point updates (allocations not made yet)."""

    def __init__(self, values: list[int]):
        self.tree = [0] * (len(values) + 1)
        for i, v in enumerate(values):
            if v:
                self.add(i, v)

    def add(self, i: int, delta: int) -> None:
        i += 1
        while i < len(self.tree):
            self.tree[i] += delta
            i += i & -i

    def prefix(self, i: int) -> int:
        """Sum of values with index < i."""
        total = 0
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total


class _Rendezvous:
    """Collective matching across rank classes: key (comm, stream, k-th use)."""

    def __init__(self, env: simpy.Environment, expected: int):
        self.arrived = 0
        self.expected = expected
        self.all_here = env.event()
        self.done = env.event()


class _Replayer:
    def __init__(self, trace: Trace, collectives: CollectiveModel, compute, cfg: EngineConfig,
                 capacity_bytes: int):
        self.trace, self.coll, self.compute, self.cfg = trace, collectives, compute, cfg
        self.env = CountingEnvironment()
        self.fabric = make_fabric(cfg.fidelity, self.env,
                                  collectives.cluster.capacity_bytes_per_s)
        self.capacity = capacity_bytes
        types = collectives.cluster.link_type
        self.link_groups = sorted(set(types.tolist()))
        if hasattr(self.fabric, "track"):
            index = {t: i for i, t in enumerate(self.link_groups)}
            self.fabric.track(np.array([index[t] for t in types]), len(self.link_groups))
        self.records: list[OpRecord] = []
        self.done: dict[tuple[str, int], simpy.Event] = {}
        self.rendezvous: dict[tuple, _Rendezvous] = {}
        self.members = self._class_members()
        self.comm_active = {c.id: 0 for c in trace.classes}
        static = trace.meta.get("static_memory_bytes", {})
        self.mem = {c.id: int(static.get(c.id, 0)) for c in trace.classes}
        self.memory = {c.id: [(0.0, self.mem[c.id])] for c in trace.classes}
        self.peak = dict(self.mem)
        self.oom = {c.id: ("static memory" if self.mem[c.id] > capacity_bytes > 0 else None)
                    for c in trace.classes}
        self._plans: dict = {}
        self.waiting: dict[str, list[tuple[int, int, str, simpy.Event]]] = {
            c.id: [] for c in trace.classes}
        self.mem_wait = {c.id: 0.0 for c in trace.classes}
        self.unstarted = {c.id: _Fenwick([o.mem_alloc_bytes for o in c.ops]) if capacity_bytes
                          else None for c in trace.classes}

    def _class_members(self) -> dict[str, int]:
        """Per communicator, how many rank classes take part."""
        owner = {}
        for cls in self.trace.classes:
            for r in cls.ranks:
                owner[r] = cls.id
        return {cid: len({owner[r] for grp in comm.groups for r in grp})
                for cid, comm in self.trace.communicators.items()}

    # ------------------------------------------------------------------ running
    def run(self) -> Timeline:
        for cls in self.trace.classes:
            for op in cls.ops:
                self.done[(cls.id, op.id)] = self.env.event()
            streams: dict[str, list[Op]] = {}
            for op in cls.ops:
                streams.setdefault(op.stream, []).append(op)
            for ops in streams.values():
                self.env.process(self._stream(cls, ops))
        self.env.run()
        while any(self.waiting.values()):     # deadlock: the working set does not fit
            cls_id = min((c for c in self.waiting if self.waiting[c]),
                         key=lambda c: self.waiting[c][0][0])
            op_id, nbytes, name, ev = self.waiting[cls_id].pop(0)
            self._alloc(cls_id, nbytes, name, op_id)     # over capacity: marks the OOM
            ev.succeed()
            self.env.run()
        end = max((r.end_s for r in self.records), default=0.0)
        return Timeline(self.records, self.memory, self.peak, self.oom,
                        self.fabric.link_bytes.copy(), end, self.env.events_processed,
                        self.capacity, dict(self.trace.meta), self.link_groups,
                        list(getattr(self.fabric, "samples", [])), dict(self.mem_wait))

    def _stream(self, cls: RankClass, ops: list[Op]):
        uses: dict[str, int] = {}
        for op in ops:
            deps = [self.done[(cls.id, d)] for d in op.deps]
            if deps:
                yield self.env.all_of(deps)
            ready = self.env.now
            if op.mem_alloc_bytes and self.capacity and (
                    self.waiting[cls.id] or not self._fits(cls.id, op.id, op.mem_alloc_bytes)):
                ev = self.env.event()             # _admit allocates, then fires ev
                self.waiting[cls.id].append((op.id, op.mem_alloc_bytes, op.name, ev))
                self.waiting[cls.id].sort(key=lambda w: w[0])
                self._admit(cls.id)
                yield ev
                self.mem_wait[cls.id] += self.env.now - ready
            else:
                self._alloc(cls.id, op.mem_alloc_bytes, op.name, op.id)
            if op.kind == "collective":
                k = uses.get(op.comm, 0)
                uses[op.comm] = k + 1
                start, plan = yield from self._collective(cls, op, k)
            elif op.kind in ("send", "recv") and "host" in op.attrs:
                start, plan = self.env.now, None
                yield from self._host_copy(cls, op)
            else:
                start, plan = self.env.now, None
                # attrs["repeat"]: the op runs that many times back to back (identical
                # gradient-accumulation micro-steps written once)
                yield self.env.timeout(self._duration(cls, op) * op.attrs.get("repeat", 1))
            self._alloc(cls.id, -op.mem_free_bytes, op.name)
            if op.mem_free_bytes and self.waiting[cls.id]:
                self._admit(cls.id)
            self.records.append(OpRecord(cls.id, op.id, op.name, op.stream, op.kind, op.layer,
                                         op.phase, ready, start, self.env.now, op.size_bytes,
                                         plan.algo if plan else "", plan.proto if plan else ""))
            self.done[(cls.id, op.id)].succeed()

    def _duration(self, cls: RankClass, op: Op) -> float:
        if op.kind == "compute":
            if op.duration_s is not None:
                base = op.duration_s
            else:
                precision = op.attrs.get("precision", self.cfg.precision)
                base = self.compute.op_time_s(op.op_class, op.flops, op.bytes_accessed,
                                              precision)
            overlap = 1.0 + self.cfg.overlap_slowdown if self.comm_active[cls.id] else 1.0
            return base * cls.slowdown * overlap
        if op.kind == "memcpy":
            return op.size_bytes / self.cfg.host_bytes_per_s
        if op.kind == "delay":
            return float(op.duration_s or 0.0)
        raise NotImplementedError(f"op kind {op.kind!r} is not replayed yet ({op.name})")

    def _collective(self, cls: RankClass, op: Op, k: int):
        # Classes match their k-th collective on this communicator and stream: every
        # class issues a stream's collectives in the same order (SPMD).
        key = (op.comm, op.stream, k)
        rv = self.rendezvous.get(key)
        if rv is None:
            rv = self.rendezvous[key] = _Rendezvous(self.env, self.members[op.comm])
            self.env.process(self._launch(op, rv))
        rv.arrived += 1
        if rv.arrived == rv.expected:
            rv.all_here.succeed()
        self.comm_active[cls.id] += 1
        start_s, plan = yield rv.done
        self.comm_active[cls.id] -= 1
        return start_s, plan

    def _launch(self, op: Op, rv: _Rendezvous):
        yield rv.all_here
        start = self.env.now
        comm = self.trace.communicators[op.comm]
        plans = [self._plan(op, grp) for grp in comm.groups]
        transfers = [self.fabric.transfer(p.flow()) for p in plans]
        yield self.env.all_of(transfers)
        rv.done.succeed((start, plans[0]))

    def _plan(self, op: Op, group: tuple[int, ...]):
        # attrs may pin the algorithm, protocol and root (a position in the group)
        how = tuple(op.attrs.get(k, d) for k, d in (("algorithm", "auto"),
                                                    ("protocol", "auto"), ("root", 0)))
        key = (op.collective, op.size_bytes, group, how)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self.coll.plan(op.collective, op.size_bytes,
                                                     list(group), *how)
        return plan

    def _host_copy(self, cls: RankClass, op: Op):
        """``send`` (GPU to host) or ``recv`` (host to GPU) between every GPU of the class
        and the host memory of server ``attrs["host"]``, through its NIC ``attrs["nic"]``
        (:mod:`simulator.collectives.host`); done when the last copy is."""
        server, nic = int(op.attrs["host"]), int(op.attrs.get("nic", 0))
        flows = [host_flow(self.coll.cluster, r, server, op.size_bytes, op.kind == "send",
                           nic, self.cfg.host_bytes_per_s) for r in cls.ranks]
        yield self.env.all_of([self.fabric.transfer(f) for f in flows])

    def _admit(self, cls_id: str) -> None:
        """Let waiting allocations through in issue order while they fit."""
        queue = self.waiting[cls_id]
        while queue and self._fits(cls_id, queue[0][0], queue[0][1]):
            op_id, nbytes, name, ev = queue.pop(0)
            self._alloc(cls_id, nbytes, name, op_id)
            ev.succeed()

    def _fits(self, cls_id: str, op_id: int, nbytes: int) -> bool:
        """Room for ``nbytes`` now and for every earlier-issued op not started yet."""
        ahead = self.unstarted[cls_id].prefix(op_id)
        return self.mem[cls_id] + nbytes + ahead <= self.capacity

    def _alloc(self, cls_id: str, delta: int, op_name: str, op_id: int | None = None) -> None:
        if not delta:
            return
        if op_id is not None and self.unstarted[cls_id] is not None:
            self.unstarted[cls_id].add(op_id, -delta)
        self.mem[cls_id] += delta
        self.memory[cls_id].append((self.env.now, self.mem[cls_id]))
        if self.mem[cls_id] > self.peak[cls_id]:
            self.peak[cls_id] = self.mem[cls_id]
            if self.capacity and self.mem[cls_id] > self.capacity and not self.oom[cls_id]:
                self.oom[cls_id] = op_name


def replay(trace: Trace, collectives: CollectiveModel, compute, config: EngineConfig | None = None,
           capacity_bytes: int = 0) -> Timeline:
    """Run one iteration of ``trace``; ``capacity_bytes`` (GPU memory) enables the OOM check.

    :raises ValueError: if the trace breaks its contract (see :meth:`Trace.validate`).
    """
    trace.validate()
    return _Replayer(trace, collectives, compute, config or EngineConfig(),
                     capacity_bytes).run()
