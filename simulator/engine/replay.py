"""Replay a :class:`~simulator.trace.Trace` on a cluster: streams, dependencies, rendezvous.

Each (rank class, stream) is one SimPy process running its ops in order, as a CUDA stream
does; ``deps`` wait on ops of other streams. A collective starts when every rank class in
its communicator has reached it (so a slow rank delays the group), then all instance groups
of the communicator put their flows on the fabric at once and the op ends when the last
instance finishes. Compute takes the compute model's time, scaled by the class's slowdown
and, while a communication kernel of the same class runs, by ``1 + overlap_slowdown``.
Memory is the class's static memory plus what ops allocate at start and free at end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

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
        end = max((r.end_s for r in self.records), default=0.0)
        return Timeline(self.records, self.memory, self.peak, self.oom,
                        self.fabric.link_bytes.copy(), end, self.env.events_processed,
                        self.capacity, dict(self.trace.meta), self.link_groups,
                        list(getattr(self.fabric, "samples", [])))

    def _stream(self, cls: RankClass, ops: list[Op]):
        uses: dict[str, int] = {}
        for op in ops:
            deps = [self.done[(cls.id, d)] for d in op.deps]
            if deps:
                yield self.env.all_of(deps)
            ready = self.env.now
            self._alloc(cls.id, op.mem_alloc_bytes, op.name)
            if op.kind == "collective":
                k = uses.get(op.comm, 0)
                uses[op.comm] = k + 1
                start, plan = yield from self._collective(cls, op, k)
            else:
                start, plan = ready, None
                yield self.env.timeout(self._duration(cls, op))
            self._alloc(cls.id, -op.mem_free_bytes, op.name)
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
        plans = [self._plan(op.collective, op.size_bytes, grp) for grp in comm.groups]
        transfers = [self.fabric.transfer(p.flow()) for p in plans]
        yield self.env.all_of(transfers)
        rv.done.succeed((start, plans[0]))

    def _plan(self, collective: str, size: int, group: tuple[int, ...]):
        key = (collective, size, group)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self.coll.plan(collective, size, list(group))
        return plan

    def _alloc(self, cls_id: str, delta: int, op_name: str) -> None:
        if not delta:
            return
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
