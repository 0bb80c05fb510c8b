"""A job on a machine: one Trace's streams, memory pools, collectives and sends.

Each (rank class, stream) is one generator driven as a SimPy process is, running its ops in
order, as a CUDA stream does; ``deps`` wait on ops of other streams (an op's end is an
event only where some op waits on it). A collective starts when every rank class in its
communicator has reached it (so a slow rank delays the group), then all instance groups of
the communicator put their flows on the machine's fabric at once and the op ends when the
last instance finishes (:mod:`simulator.engine.launch`). Neighbouring instances with the
same payload, latency and rate cap go as one bundle (:mod:`simulator.network.bundle`: one
transfer, split by the fabric into groups of its instances, or the instances, where they
stop sharing the links evenly), and so do the members of a send. A ``send``/``recv`` between ranks meets its
partner op and moves its bytes from the sender's GPU to the receiver's
(:mod:`simulator.engine.p2p`). Compute takes the compute model's time, scaled by the
class's slowdown, and by ``1 + overlap_slowdown`` when a communication kernel of the same
class is running as the compute op starts (the factor is fixed for the whole op, not
re-evaluated when that kernel ends), and by the class's rank-to-rank variability factor
when the config asks for it (the slowest of the ranks it synchronises with,
:mod:`simulator.engine.variability`). Memory is each class's
:class:`~simulator.engine.memory.MemoryPool`: the class's static memory plus what ops
allocate at start and free at end, with the caching allocator's back-pressure.

The job's ranks meet the cluster's GPUs only through its
:class:`~simulator.engine.placement.Placement` (the plans of its collectives and sends,
:class:`~simulator.engine.planning.Plans`, and its host copies). It calls the models
through two seams (:mod:`simulator.engine.seams`): a planner (``plan``) and a compute
timer (``op_time_s``).

Op attributes the job reads: ``algorithm``, ``protocol`` and ``root`` pin how a
collective is planned (e.g. ``star`` copies, :mod:`simulator.collectives.copies`);
``repeat`` runs a compute, memcpy or delay op that many times back to back; a ``send`` or
``recv`` with ``host`` (a server index) copies between every GPU of the class and that
server's host memory through NIC ``nic`` (:mod:`simulator.collectives.host`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..collectives.host import host_flow, server_nic
from ..compute.pricing import priced_s
from ..errors import ClusterSimError, ConfigError, TopologyError
from ..network.bundle import bundled
from ..sim import Relay, StreamProcess, after, all_done, countdown
from ..trace.schema import Op, RankClass, Trace
from .launch import Launcher
from .machine import Machine
from .memory import MemoryPool
from .p2p import PointToPoint
from .placement import Placement
from .planning import Plans
from .records import COMM_KINDS, MachineRecord, OpRecord, Timeline
from .seams import CollectivePlanner, ComputeTimer
from .variability import Variability


def kernel_time_s(compute, op: Op, precision: str) -> float:
    """The nominal seconds of compute op ``op``: its trace duration, or its price from the
    timer ``compute`` (:func:`~simulator.compute.pricing.priced_s`, by its attrs) at the
    op's precision (``precision`` where it names none). No variability, straggler slowdown
    or overlap: what the same op costs on the same GPU whoever runs it."""
    if op.duration_s is not None:
        return op.duration_s
    return priced_s(compute, op.op_class, op.flops, op.bytes_accessed, precision, op.attrs)


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """Knobs of one job. ``overlap_slowdown``: extra time fraction of a compute op that
    starts while a communication kernel runs on the same GPU (SM and memory contention);
    ``precision``: the compute precision of ops that name none; ``variability``: op class
    -> sigma of rank-to-rank variability, None for the ideal machine
    (:mod:`simulator.engine.variability`), drawn from ``seed``."""

    overlap_slowdown: float = 0.0
    precision: str = "bf16"
    variability: Mapping[str, float] | None = None
    seed: int = 0


class Job:
    """``trace`` on ``machine``, its ranks on the GPUs of ``placement``, its collectives
    planned by ``planner`` and its kernels timed by ``compute``; ``capacity_bytes`` (GPU
    memory, 0: no limit) enables the out-of-memory check. ``plans``: the
    :class:`~simulator.engine.planning.Plans` of an earlier job of the same trace, planner
    and placement, to plan nothing again (a job run again, as the fleet's co-simulations
    run a job's iterations; its plans and their flows are the same objects, so the fabric
    also knows them). :meth:`start` puts its streams on the machine; after the machine has run (:func:`~simulator.engine.machine.run_jobs`),
    :meth:`timeline` gives what happened.

    :raises ConfigError: where a host copy names a server or NIC the cluster lacks, or the
        placement does not fit the trace and the cluster.
    """

    def __init__(self, machine: Machine, trace: Trace, placement: Placement,
                 planner: CollectivePlanner, compute: ComputeTimer,
                 config: JobConfig | None = None, capacity_bytes: int = 0,
                 plans: Plans | None = None):
        placement.check(machine.cluster.n_gpus, trace.world_size)
        if plans is not None and (plans.coll is not planner or plans.placement != placement):
            raise ValueError("plans are another planner's or placement's")
        self.machine, self.trace, self.placement = machine, trace, placement
        self.compute, self.cfg = compute, config or JobConfig()
        self.capacity = capacity_bytes
        env = self.env = machine.env
        self.records: list[OpRecord] = []
        # class id -> op id -> the event of the op's end, for the ops that others list in
        # ``deps`` only: an event that nobody waits on would change nothing but the count
        self.done: dict[str, dict[int, Relay]] = {}
        self.comm_active = {c.id: 0 for c in trace.classes}
        plans = self.plans = plans if plans is not None else Plans(planner, placement)
        self.vary = (Variability.for_trace(trace, self.cfg.variability, self.cfg.seed)
                     if self.cfg.variability is not None else None)
        self.pools = {c.id: MemoryPool(env, capacity_bytes, c.static_memory_bytes,
                                       [o.mem_alloc_bytes for o in c.ops])
                      for c in trace.classes}
        self.p2p = PointToPoint(env, machine.fabric, plans.p2p, trace.classes)
        self.launcher = Launcher(env, machine.fabric, trace, plans, self.vary)
        self._then: Callable[[Job], None] | None = None     # (:meth:`start`)
        self._streams_left = 0
        self._check_host_copies()

    def _check_host_copies(self) -> None:
        """Every host copy names a server and NIC of the cluster (the one check of a Trace
        that needs the cluster), before the job starts.

        :raises ConfigError: naming the class, the op and ``attrs.host``.
        """
        for cls in self.trace.classes:
            for position, op in enumerate(cls.ops):
                if op.kind not in ("send", "recv") or "host" not in op.attrs:
                    continue
                try:
                    server_nic(self.machine.cluster, op.attrs["host"], op.attrs.get("nic", 0))
                except TopologyError as exc:
                    raise ConfigError(f"rank class {cls.id}, op {op.id} ({op.name}): {exc}",
                                      field=f"classes[{cls.id}].ops[{position}].attrs.host") \
                        from None

    # ------------------------------------------------------------------ running
    def start(self, then: Callable[[Job], None] | None = None) -> None:
        """Put every (class, stream) of the trace on the machine as a process; ``then`` is
        called with the job at the instant its last stream ends (a job that follows it)."""
        self._then = then
        for cls in self.trace.classes:
            done = self.done[cls.id] = {}
            for op in cls.ops:
                for d in op.deps:
                    if d not in done:
                        done[d] = Relay(self.env)
            streams: dict[str, list[tuple[int, Op]]] = {}
            for position, op in enumerate(cls.ops):
                streams.setdefault(op.stream, []).append((position, op))
            self._streams_left += len(streams)      # (each starts at the next event)
            for ops in streams.values():
                StreamProcess(self.env, self._stream(cls, ops))

    def timeline(self, machine: MachineRecord) -> Timeline:
        """What the job did, with ``machine``'s record (:meth:`Machine.record`).

        :raises ClusterSimError: where ops never finished (a deadlock of the trace's
            program: a send whose recv is never reached, a cycle of waits).
        """
        self._check_finished()
        end = max((r.end_s for r in self.records), default=0.0)
        pools = self.pools
        return Timeline(self.records, {c: p.timeline for c, p in pools.items()},
                        {c: p.peak_bytes for c, p in pools.items()},
                        {c: p.oom_at for c, p in pools.items()}, end, machine,
                        self.capacity, dict(self.trace.meta),
                        {c: p.wait_s for c, p in pools.items()})

    def _check_finished(self) -> None:
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
        arrive, append, record = self.launcher.arrive, self.records.append, OpRecord.of
        cid = cls.id
        for position, op in ops:
            deps = op.deps
            if len(deps) == 1:          # most waits
                yield after(env, done[deps[0]])
            elif deps:
                yield all_done(env, [done[d] for d in deps])
            ready = env.now
            if op.mem_alloc_bytes:      # (a request of nothing is granted, and changes nothing)
                granted = pool.request(op.mem_alloc_bytes, position, op.name)
                if granted is not None:
                    yield granted
            kind = op.kind
            if kind not in COMM_KINDS:      # compute, memcpy or delay
                start, plan = env.now, None
                # attrs["repeat"]: the op runs that many times back to back (identical
                # gradient-accumulation micro-steps written once)
                yield env.tick(self._duration(cls, op) * op.attrs.get("repeat", 1))
            elif kind == "collective":      # the k-th on its communicator and stream
                k = uses[op.comm] = uses.get(op.comm, -1) + 1
                active[cid] += 1
                start, plan = yield arrive(op, k)       # (an Outcome)
                active[cid] -= 1
            elif op.is_peer_transfer:
                active[cid] += 1
                start, plan = yield from self.p2p.run(cls, op)
                active[cid] -= 1
            else:                           # send or recv to or from host memory
                start, plan = env.now, None
                yield from self._host_copy(cls, op)
            if op.mem_free_bytes:
                pool.release(op.mem_free_bytes)
            append(record(cid, op, ready_s=ready, start_s=start, end_s=env.now, plan=plan))
            event = done.get(op.id)
            if event is not None:
                event()         # (a Relay: succeeds now)
        self._streams_left -= 1
        if not self._streams_left and self._then is not None:
            self._then(self)

    def _duration(self, cls: RankClass, op: Op) -> float:
        """Time of a compute, memcpy or delay op."""
        if op.kind == "compute":
            base = kernel_time_s(self.compute, op, self.cfg.precision)
            overlap = 1.0 + self.cfg.overlap_slowdown if self.comm_active[cls.id] else 1.0
            if self.vary is not None:
                base *= self.vary.compute_factor(cls.id, op.op_class)
            return base * cls.slowdown * overlap
        if op.kind == "memcpy":
            return op.size_bytes / self.machine.config.host_bytes_per_s
        return float(op.duration_s or 0.0)          # delay

    def _host_copy(self, cls: RankClass, op: Op):
        """``send`` (GPU to host) or ``recv`` (host to GPU) between every GPU of the class
        and the host memory of server ``attrs["host"]``, through its NIC ``attrs["nic"]``
        (:mod:`simulator.collectives.host`); done when the last copy is."""
        server, nic = int(op.attrs["host"]), int(op.attrs.get("nic", 0))
        cluster, gpu = self.machine.cluster, self.placement.gpu
        flows = bundled([host_flow(cluster, gpu(r), server, op.size_bytes, op.kind == "send",
                                   nic, self.machine.config.host_bytes_per_s)
                         for r in cls.ranks])
        done = self.env.event()
        moved = countdown(len(flows), done.succeed)
        for flow in flows:
            self.machine.fabric.transfer(flow, moved)
        yield done
