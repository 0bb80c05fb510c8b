"""Replay a :class:`~simulator.trace.Trace` on a cluster: streams, dependencies, rendezvous.

Each (rank class, stream) is one generator driven as a SimPy process is, running its ops in
order, as a CUDA stream does; ``deps`` wait on ops of other streams (an op's end is an
event only where some op waits on it). A collective starts when every rank class in its
communicator has reached it (so a slow rank delays the group), then all instance groups of
the communicator put their flows on the fabric at once and the op ends when the last
instance finishes (:mod:`simulator.engine.launch`). Neighbouring instances with the same
payload, latency and rate cap go as one bundle (:mod:`simulator.network.bundle`: one
transfer, split by the fabric back into its instances where they stop sharing the links
evenly), and so do the members of a send.
A ``send``/``recv`` between ranks meets its partner op and moves its bytes
from the sender's GPU to the receiver's (:mod:`simulator.engine.p2p`). Compute takes the
compute model's time, scaled by the class's slowdown, and by ``1 + overlap_slowdown`` when
a communication kernel of the same class is running as the compute op starts (the factor
is fixed for the whole op, not re-evaluated when that kernel ends), and by the class's
rank-to-rank variability factor when the config asks for it (the slowest of the ranks it
synchronises with, :mod:`simulator.engine.variability`). Memory is each class's
:class:`~simulator.engine.memory.MemoryPool`: the class's static memory plus what ops
allocate at start and free at end, with the caching allocator's back-pressure.

The engine calls the models through two seams (:mod:`simulator.engine.seams`): a planner
(``plan``) and a compute timer (``op_time_s``).

Op attributes the engine reads: ``algorithm``, ``protocol`` and ``root`` pin how a
collective is planned (e.g. ``star`` copies, :mod:`simulator.collectives.copies`);
``repeat`` runs a compute, memcpy or delay op that many times back to back; a ``send`` or
``recv`` with ``host`` (a server index) copies between every GPU of the class and that
server's host memory through NIC ``nic`` (:mod:`simulator.collectives.host`).

A replay that runs dry with ops unfinished (a send whose recv is never reached, a cycle of
waits) raises a :class:`~simulator.errors.ClusterSimError` naming the ops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..collectives.host import host_flow, server_nic
from ..errors import ClusterSimError, ConfigError, TopologyError
from ..gcpause import gc_paused
from ..lifetime import keep
from ..network.fabric import make_fabric
from ..sim import Environment, Relay, StreamProcess, all_done, countdown
from ..trace.schema import Op, RankClass, Trace
from .launch import Launcher
from .memory import MemoryPool
from .p2p import PointToPoint
from .planning import Plans
from .seams import CollectivePlanner, ComputeTimer
from .variability import Variability

COMM_KINDS = ("collective", "send", "recv")


@dataclass(frozen=True)
class EngineConfig:
    """Knobs of the replay. ``overlap_slowdown``: extra time fraction of a compute op that
    starts while a communication kernel runs on the same GPU (SM and memory contention);
    ``host_bytes_per_s``: bytes/s of host-device copies; ``variability``: op class ->
    sigma of rank-to-rank variability, None for the ideal machine
    (:mod:`simulator.engine.variability`), drawn from ``seed``; ``bundles``: move identical
    instances of a collective or send as one bundle (:mod:`simulator.network.bundle`; the
    same times), False for one flow per instance (the reference, slower at scale);
    ``link_classes``: the flow fabric solves on classes of equivalent links
    (:class:`~simulator.network.fabric.FlowFabric`), False on every link (the reference);
    ``lean``: two SimPy steps fewer per collective (:mod:`simulator.engine.launch`; the
    same order of events but where two unrelated ones fall at the very same time), False
    for the reference schedule."""

    fidelity: str = "flow"
    overlap_slowdown: float = 0.0
    host_bytes_per_s: float = 25e9
    precision: str = "bf16"
    variability: Mapping[str, float] | None = None
    seed: int = 0
    bundles: bool = True
    link_classes: bool = True
    lean: bool = True


@dataclass(slots=True)
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
    # (time_s, fractions) rows, summed where first read (Fabric.deferred_samples)
    link_samples: Sequence[tuple[float, np.ndarray]] = field(default_factory=list)
    memory_wait_s: dict = field(default_factory=dict)    # class -> seconds ops waited
    link_occupancy_bytes: np.ndarray | None = None     # capacity taken (Fabric docstring)
    fabric_stats: dict = field(default_factory=dict)   # solves, bundles split


class _Replayer:
    def __init__(self, trace: Trace, collectives: CollectivePlanner, compute: ComputeTimer,
                 cfg: EngineConfig, capacity_bytes: int):
        self.trace, self.coll, self.compute, self.cfg = trace, collectives, compute, cfg
        self.env = Environment()
        self.fabric = make_fabric(cfg.fidelity, self.env,
                                  collectives.cluster.capacity_bytes_per_s, cfg.link_classes)
        self.capacity = capacity_bytes
        self.link_groups, group_of_link = collectives.cluster.link_type_groups()
        self.fabric.track(group_of_link, len(self.link_groups))
        self.records: list[OpRecord] = []
        # class id -> op id -> the event of the op's end, for the ops that others list in
        # ``deps`` only: an event that nobody waits on would change nothing but the count
        self.done: dict[str, dict[int, Relay]] = {}
        self.comm_active = {c.id: 0 for c in trace.classes}
        self.plans = Plans(collectives)
        self.vary = (Variability.for_trace(trace, cfg.variability, cfg.seed)
                     if cfg.variability is not None else None)
        self.pools = {c.id: MemoryPool(self.env, capacity_bytes, c.static_memory_bytes,
                                       [o.mem_alloc_bytes for o in c.ops])
                      for c in trace.classes}
        self.p2p = PointToPoint(self.env, self.fabric, self.plans.p2p, trace.classes,
                                cfg.bundles, cfg.lean)
        self.launcher = Launcher(self.env, self.fabric, trace, self.plans, self.vary,
                                 cfg.bundles, cfg.lean)
        self._check_host_copies()

    def _check_host_copies(self) -> None:
        """Every host copy names a server and NIC of the cluster (the one check of a Trace
        that needs the cluster), before the replay starts.

        :raises ConfigError: naming the class, the op and ``attrs.host``.
        """
        for cls in self.trace.classes:
            for position, op in enumerate(cls.ops):
                if op.kind not in ("send", "recv") or "host" not in op.attrs:
                    continue
                try:
                    server_nic(self.coll.cluster, op.attrs["host"], op.attrs.get("nic", 0))
                except TopologyError as exc:
                    raise ConfigError(f"rank class {cls.id}, op {op.id} ({op.name}): {exc}",
                                      field=f"classes[{cls.id}].ops[{position}].attrs.host") \
                        from None

    # ------------------------------------------------------------------ running
    def run(self) -> Timeline:
        for cls in self.trace.classes:
            done = self.done[cls.id] = {}
            for op in cls.ops:
                for d in op.deps:
                    if d not in done:
                        done[d] = Relay(self.env)
            streams: dict[str, list[tuple[int, Op]]] = {}
            for position, op in enumerate(cls.ops):
                streams.setdefault(op.stream, []).append((position, op))
            for ops in streams.values():
                StreamProcess(self.env, self._stream(cls, ops))
        self.env.run()
        while True:     # deadlock: the working set does not fit
            stuck = [p for p in self.pools.values() if p.waiting]
            if not stuck:
                break
            min(stuck, key=lambda p: p.oldest_position).admit_oldest()   # marks the OOM
            self.env.run()
        self._check_finished()
        end = max((r.end_s for r in self.records), default=0.0)
        pools = self.pools
        return Timeline(self.records, {c: p.timeline for c, p in pools.items()},
                        {c: p.peak_bytes for c, p in pools.items()},
                        {c: p.oom_at for c, p in pools.items()},
                        self.fabric.link_bytes.copy(), end, self.env.events_processed,
                        self.capacity, dict(self.trace.meta), self.link_groups,
                        self.fabric.deferred_samples(),
                        {c: p.wait_s for c, p in pools.items()},
                        self.fabric.link_occupancy_bytes.copy(),
                        {"solves": self.fabric.solves,
                         "splits": self.fabric.splits})

    def _check_finished(self) -> None:
        """A replay that ran dry with ops left is a deadlock of the trace's program."""
        if len(self.records) == sum(len(c.ops) for c in self.trace.classes):
            return
        ended = {(r.cls, r.op_id) for r in self.records}
        left = [f"rank class {c.id}, op {op.id} ({op.name})" for c in self.trace.classes
                for op in c.ops if (c.id, op.id) not in ended]
        if left:
            why = self.p2p.stuck() or [f"{left[0]} never started or never finished"]
            raise ClusterSimError(f"replay deadlocked with {len(left)} op(s) unfinished: "
                                  + "; ".join(why[:3]) + ("; ..." if len(why) > 3 else ""))

    def _stream(self, cls: RankClass, ops: list[tuple[int, Op]]):
        """The ops of one (class, stream) in order, as a CUDA stream runs them."""
        uses: dict[str, int] = {}
        env, pool, done, active = self.env, self.pools[cls.id], self.done[cls.id], \
            self.comm_active
        request, release, records, launcher = pool.request, pool.release, self.records, \
            self.launcher
        cid = cls.id
        for position, op in ops:
            if op.deps:
                yield all_done(env, [done[d] for d in op.deps])
            ready = env.now
            if op.mem_alloc_bytes:      # (a request of nothing is granted, and changes nothing)
                granted = request(op.mem_alloc_bytes, position, op.name)
                if granted is not None:
                    yield granted
            kind = op.kind
            if kind not in COMM_KINDS:      # compute, memcpy or delay
                start, plan = env.now, None
                # attrs["repeat"]: the op runs that many times back to back (identical
                # gradient-accumulation micro-steps written once)
                yield env.tick(self._duration(cls, op) * op.attrs.get("repeat", 1))
            elif kind == "collective":
                k = uses.get(op.comm, 0)
                uses[op.comm] = k + 1
                event = launcher.arrive(op, k)
                active[cid] += 1
                start, plan = yield event
                active[cid] -= 1
            elif op.is_peer_transfer:
                active[cid] += 1
                start, plan = yield from self.p2p.run(cls, op)
                active[cid] -= 1
            else:                           # send or recv to or from host memory
                start, plan = env.now, None
                yield from self._host_copy(cls, op)
            if op.mem_free_bytes:
                release(op.mem_free_bytes)
            records.append(OpRecord(cid, op.id, op.name, op.stream, kind, op.layer,
                                    op.phase, ready, start, env.now, op.size_bytes,
                                    plan.algo if plan else "", plan.proto if plan else ""))
            event = done.get(op.id)
            if event is not None:
                event()         # (a Relay: succeeds now)

    def _duration(self, cls: RankClass, op: Op) -> float:
        """Time of a compute, memcpy or delay op."""
        if op.kind == "compute":
            if op.duration_s is not None:
                base = op.duration_s
            else:
                attrs = op.attrs
                precision = attrs.get("precision", self.cfg.precision)
                # m, n, k of a GEMM / attention kernel, for timers by shape; a timer of the
                # seam without the ``shape`` parameter is asked without it
                if "m" in attrs:
                    base = self.compute.op_time_s(op.op_class, op.flops, op.bytes_accessed,
                                                  precision,
                                                  shape=(attrs["m"], attrs["n"], attrs["k"]))
                else:
                    base = self.compute.op_time_s(op.op_class, op.flops, op.bytes_accessed,
                                                  precision)
            overlap = 1.0 + self.cfg.overlap_slowdown if self.comm_active[cls.id] else 1.0
            if self.vary is not None:
                base *= self.vary.compute_factor(cls.id, op.op_class)
            return base * cls.slowdown * overlap
        if op.kind == "memcpy":
            return op.size_bytes / self.cfg.host_bytes_per_s
        return float(op.duration_s or 0.0)          # delay

    def _host_copy(self, cls: RankClass, op: Op):
        """``send`` (GPU to host) or ``recv`` (host to GPU) between every GPU of the class
        and the host memory of server ``attrs["host"]``, through its NIC ``attrs["nic"]``
        (:mod:`simulator.collectives.host`); done when the last copy is."""
        server, nic = int(op.attrs["host"]), int(op.attrs.get("nic", 0))
        flows = [host_flow(self.coll.cluster, r, server, op.size_bytes, op.kind == "send",
                           nic, self.cfg.host_bytes_per_s) for r in cls.ranks]
        flows = self.launcher.bundled(flows)
        if not self.cfg.lean:
            yield self.env.all_of([self.fabric.transfer(f) for f in flows])
            return
        done = self.env.event()
        moved = countdown(len(flows), done.succeed)
        for flow in flows:
            self.fabric.transfer(flow, moved)
        yield done


def replay(trace: Trace, collectives: CollectivePlanner, compute: ComputeTimer,
           config: EngineConfig | None = None, capacity_bytes: int = 0, *,
           checked: bool = False) -> Timeline:
    """Run one iteration of ``trace``; ``capacity_bytes`` (GPU memory) enables the OOM check.
    ``checked``: the caller validated ``trace`` and has not changed it since (the pipeline's
    generated traces), so it is not validated again.

    :raises ValueError: if the trace breaks its contract (see :meth:`Trace.validate`).
    :raises ClusterSimError: if the replay deadlocks (ops that can never finish).
    """
    if not checked:
        trace.validate()
    # The events, records and plans of a replay are freed by reference counting (it makes
    # no garbage cycles while it runs); the cyclic collector would only walk them, and the
    # trace and cluster, again and again (a quarter of the replay's time).
    with gc_paused():
        replayer = _Replayer(trace, collectives, compute, config or EngineConfig(),
                             capacity_bytes)
        timeline = replayer.run()
        keep("replay", replayer)    # the executable frees it at exit, not object by object
        return timeline
