"""A job's step time where it runs, alone or beside the jobs that share its links.

Jobs whose traffic shares links are co-simulated: one iteration of each, started together
on one :class:`~simulator.engine.Machine` (the engine's machine/job split), each job's step
time being when its own iteration ends. Who shares links with whom: a job whose servers sit
in more than one group (:mod:`simulator.fleet.placement`) crosses the spine from each of the
leaf switches of its servers, so two such jobs under a common leaf share that leaf's
uplinks; a job inside one group uses only its own servers' links (a switch is
non-blocking inside). The jobs linked that way, directly or through others, are simulated
together. A step time alone is cached by (job kind, the shape of its placement: each rank's
server, position and group counted within the job, and its server's kind of links), the
same shape on the same kinds of links giving the same time; a step time under contention by
(each member's kind and exact placement), so it is re-simulated only when the set of
neighbours changes. Before a linked set is co-simulated, each member's peak load on every
link alone is compared with the links' capacities (:mod:`simulator.fleet.headroom`): where
no shared link can fill, no member can slow another and each one's step is its step alone.

While a spine or a link that takes no server out is down (:mod:`simulator.fleet.failures`),
the jobs crossing the spine, and the multi-server jobs on a server whose NIC cable is down,
are rated on the fabric without it (their kind rebuilt there by ``rebuild``; cached by exact
placement: a missing element breaks the fabric's symmetry).

One job alone is ``clustersim run``'s iteration on those GPUs, bit for bit (the scenario's
extrapolated step where it has many identical micro-steps; under contention such a step is
scaled by the co-simulated replay's slowdown over the same replay alone).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from ..energy.timeline import board_w, variability_stretch
from ..engine import Job, JobConfig, Machine, MachineConfig, Placement, replay, run_jobs
from ..engine.planning import Plans
from ..gcpause import gc_paused
from ..trace.schema import Trace
from .headroom import Peaks, cannot_slow, peaks
from .placement import Layout

#: A job's iterations in one co-simulation at most (beside a neighbour of steps this many
#: times longer, it stops before the neighbour's step ends)
MAX_ITERATIONS = 16


@dataclass(eq=False)
class Work:
    """What a job of one kind runs each step: its trace and the models that price it. With
    ``setup`` (a scenario's, :func:`~simulator.pipeline.build_setup`), its step alone is
    ``run``'s (:func:`~simulator.pipeline.run_setup`)."""

    name: str
    trace: Trace
    planner: object
    compute: object
    job: JobConfig = field(default_factory=JobConfig)
    machine: MachineConfig = field(default_factory=MachineConfig)
    capacity_bytes: int = 0
    setup: object = None
    degraded: tuple = ()        # the fabric elements missing where this work was built

    @property
    def extrapolated(self) -> bool:
        return self.setup is not None and self.setup.accum is not None

    def replayed_s(self, placement: Placement) -> float:
        """One replay of ``trace`` alone on ``placement``."""
        return self.replayed(placement).iteration_time_s

    def replayed(self, placement: Placement):
        """The timeline of one replay of ``trace`` alone on ``placement``."""
        return replay(self.trace, self.planner, self.compute, self.job, self.machine,
                      self.capacity_bytes, placement=placement)

    def alone_s(self, placement: Placement) -> float:
        """The step time alone on ``placement``."""
        return self.alone_run(placement)[0]

    def alone_run(self, placement: Placement):
        """(the step time alone on ``placement``, its replayed timeline)."""
        if self.setup is None:
            tl = self.replayed(placement)
            return tl.iteration_time_s, tl
        from ..pipeline import run_setup
        res = run_setup(self.setup, placement)
        return res.metrics.iteration_time_s, res.timeline

    @property
    def trace_ops(self) -> int:
        """Ops of one replay of ``trace`` (an iteration of a co-simulation)."""
        return sum(len(c.ops) for c in self.trace.classes)

    @property
    def step_ops(self) -> int:
        """Ops replayed to price one step alone (each of an extrapolated step's replays)."""
        if self.setup is None:
            return self.trace_ops
        from ..pipeline import replayed_ops
        return replayed_ops(self.setup)

    @property
    def ranks(self) -> dict[str, int]:
        """Rank count of each class of the trace (for the board power of a step)."""
        return {c.id: len(c.ranks) for c in self.trace.classes}


@dataclass
class Counts:
    alone: int = 0          # simulations of one job alone
    together: int = 0       # co-simulations of several jobs
    hits: int = 0           # step times answered from the caches
    ops: int = 0            # op replays: each simulation's ops, times its iterations
    bounded: int = 0        # linked sets whose members cannot slow each other (headroom)
    peaks: int = 0          # replays alone on a member's placement, noting link peaks


class StepTimes:
    """Step times of running jobs on the cluster of ``layout`` (its groups and leaves)."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.where = {g: (s, p) for s, gpus in enumerate(layout.gpus) for p, g in enumerate(gpus)}
        self._alone: dict = {}
        self._replayed_s: dict = {}
        self._together: dict = {}
        self.counts = Counts()
        self.gpu_power = None        # the GPU's phase powers (GpuPower), for board power
        self.board: dict = {}
        self.degraded: tuple = ()    # fabric elements down now (set by the fleet)
        self.slowed: frozenset = frozenset()     # servers whose NIC cable is down
        self.rebuild = None          # (work, degraded) -> the work on that fabric
        self._rebuilt: dict = {}
        # (kind, GPUs) -> the plans of the last co-simulation's members: a member's
        # iterations, and its next co-simulations while it runs, plan nothing again
        self._plans: dict = {}
        self._peaks: dict = {}       # (kind, degraded, GPUs) -> Peaks (or None), while it runs

    def shape(self, placement: Placement) -> tuple:
        """Each rank's (server, position, group, server's kind of links), servers and
        groups numbered within the job."""
        servers: dict[int, int] = {}
        groups: dict[int, int] = {}
        kinds = self.layout.links or (0,) * len(self.layout.gpus)
        out = []
        for g in placement.gpus:
            s, p = self.where[g]
            out.append((servers.setdefault(s, len(servers)), p,
                        groups.setdefault(self.layout.group[s], len(groups)), kinds[s]))
        return tuple(out)

    def _key(self, work: Work, placement: Placement) -> tuple:
        """A step alone's cache key: by shape, or by exact placement on a degraded fabric."""
        return (work.name, placement.gpus if work.degraded else self.shape(placement))

    def crossing(self, placement: Placement) -> frozenset:
        """The leaf switches whose uplinks the job's traffic crosses (none inside a group)."""
        servers = {self.where[g][0] for g in placement.gpus}
        if len({self.layout.group[s] for s in servers}) < 2:
            return frozenset()
        return frozenset().union(*(self.layout.leaves[s] for s in servers))

    def alone(self, work: Work, placement: Placement) -> float:
        key = self._key(work, placement)
        if key in self._alone:
            self.counts.hits += 1
        else:
            self.counts.alone += 1
            self.counts.ops += work.step_ops
            step, tl = work.alone_run(placement)
            self._alone[key] = step
            # the fleet prices a job's GPUs at its step on the nominal placement only
            if self.gpu_power is not None and placement == Placement.first(len(placement.gpus)):
                self.board[key] = board_w(tl, self.gpu_power, work.ranks,
                                          variability_stretch(work.trace, work.job))
        return self._alone[key]

    def board_w(self, work: Work, placement: Placement) -> float | None:
        """Average board power (W) of one GPU of ``work`` alone on ``placement``, the
        cluster's first GPUs (after :meth:`alone` there), None without power data."""
        return self.board.get(self._key(work, placement))

    def together(self, members: list[tuple[Work, Placement]]) -> list[float]:
        """The step time of each member: alone where none can slow another
        (:meth:`_cannot_slow`), else co-simulated (cached by kinds and placements)."""
        key = tuple(sorted((w.name, p.gpus) for w, p in members))
        found = self._together.get(key)
        if found is None:
            if self._cannot_slow(members):
                self.counts.bounded += 1
                steps = [self.alone(w, p) for w, p in members]
            else:
                self.counts.together += 1
                steps = self._co_simulate(members)
            found = self._together[key] = dict(zip(((w.name, p.gpus) for w, p in members),
                                                   steps))
        else:
            self.counts.hits += 1
        return [found[(w.name, p.gpus)] for w, p in members]

    def _co_simulate(self, members: list[tuple[Work, Placement]]) -> list[float]:
        """Each member's step beside the others, on one machine: the slowest member alone
        (its replay) runs one iteration; every other member runs its iterations back to
        back (the next starts when the last of its streams ends, :data:`MAX_ITERATIONS` at
        most) while the slowest runs, so the slowest meets its neighbours' traffic all
        through its step. A member's step is the mean of its iterations after its first
        that end by the slowest's end (its first where none does)."""
        once = [self._replayed(w, p) for w, p in members]
        slowest = once.index(max(once))
        plans = self._keep_plans(members)
        machine = Machine(members[0][0].planner.cluster, members[0][0].machine)
        running: list[Job | None] = [None] * len(members)    # each member's latest iteration
        ends: list[list[float]] = [[] for _ in members]

        def begin(i: int) -> None:
            w, p = members[i]
            job = Job(machine, w.trace, p, w.planner, w.compute, w.job, w.capacity_bytes,
                      plans[i])
            running[i] = job
            job.start(then=lambda _job: ended(i))

        def ended(i: int) -> None:
            ends[i].append(machine.env.now)
            if not ends[slowest] and len(ends[i]) < MAX_ITERATIONS:
                begin(i)
        with gc_paused():
            try:
                for i in range(len(members)):
                    begin(i)
                run_jobs(machine, running)
                for job, e in zip(running, ends):
                    if not e:                   # (raises: its ops never finished)
                        job.timeline(machine.record())
            finally:
                # each job's ``then`` holds ``ended``, whose ``begin`` holds ``running``,
                # which holds the jobs, and ``begin`` and ``ended`` hold each other: cycles
                # through every job, its records and plans and the machine, which the
                # collector (paused here, and afterwards not looking at what the pause
                # filed with the old objects) would not free
                running.clear()
                begin = ended = None    # noqa: F841 (the closures' cells, emptied)
        self.counts.ops += sum(len(e) * w.trace_ops for (w, _), e in zip(members, ends))
        window = ends[slowest][0]
        out = []
        for (w, p), e, t in zip(members, ends, once):
            inside = sum(1 for end in e[1:] if end <= window)
            step = (e[inside] - e[0]) / inside if inside else e[0]
            # an extrapolated step: the replayed iterations' slowdown, on the whole step
            out.append(self.alone(w, p) * (step / t) if w.extrapolated else step)
        return out

    def _cannot_slow(self, members: list[tuple[Work, Placement]]) -> bool:
        """Whether no member can slow another (:func:`~simulator.fleet.headroom.cannot_slow`
        on each member's peaks alone on its placement, noted once while it runs); False
        where the members are not on one flow fabric (only max-min sharing is bounded so)
        or a member's peaks are not known."""
        cluster = members[0][0].planner.cluster
        if any(w.planner.cluster is not cluster or w.machine.fidelity != "flow"
               for w, _ in members):
            return False
        plans = self._keep_plans(members)
        found: list[Peaks | None] = []
        for (w, p), pl in zip(members, plans):
            key = (w.name, w.degraded, p.gpus)
            if key not in self._peaks:
                self.counts.peaks += 1
                self.counts.ops += w.trace_ops
                self._peaks[key] = peaks(w, p, pl)
            found.append(self._peaks[key])
        return None not in found and cannot_slow(found, cluster.capacity_bytes_per_s)

    def _keep_plans(self, members: list[tuple[Work, Placement]]) -> list[Plans]:
        """The members' plans (:meth:`_plans_of`), kept as the last set's, so that the
        co-simulation after a bound that failed plans nothing again."""
        plans = [self._plans_of(w, p) for w, p in members]
        self._plans = {(w.name, p.gpus): pl for (w, p), pl in zip(members, plans)}
        return plans

    def _plans_of(self, work: Work, placement: Placement) -> Plans:
        """The plans ``work`` on ``placement`` had in the last co-simulation, else new
        ones (a plan is the same whichever iteration or co-simulation asks for it)."""
        plans = self._plans.get((work.name, placement.gpus))
        if plans is None or plans.coll is not work.planner:
            plans = Plans(work.planner, placement)
        return plans

    def _replayed(self, work: Work, placement: Placement) -> float:
        """One replay of ``work``'s trace alone on ``placement`` (its step alone, unless
        the step is extrapolated from the replay)."""
        if not work.extrapolated:
            return self.alone(work, placement)
        key = self._key(work, placement)
        if key not in self._replayed_s:
            self.counts.alone += 1
            self.counts.ops += work.trace_ops
            self._replayed_s[key] = work.replayed_s(placement)
        return self._replayed_s[key]

    def _on_fabric(self, work: Work, placement: Placement, crossing: frozenset) -> Work:
        """``work`` on the degraded fabric where its traffic meets it (it crosses the
        spine, or spans servers one of which has a NIC cable down), else ``work``."""
        servers = {self.where[g][0] for g in placement.gpus}
        if not crossing and not (len(servers) > 1 and servers & self.slowed):
            return work
        if self.rebuild is None:
            raise ValueError("a fabric element is down and these step times cannot rebuild "
                             "a job on the degraded fabric (rebuild is None)")
        key = (work.name, self.degraded)
        if key not in self._rebuilt:
            self._rebuilt = {k: w for k, w in self._rebuilt.items() if k[1] == self.degraded}
            self._rebuilt[key] = self.rebuild(work, self.degraded)
        return self._rebuilt[key]

    def steps(self, running: Mapping[Hashable, tuple[Work, Placement]]) -> dict:
        """Job key -> step time for the jobs ``running`` (key -> kind and placement): alone
        where a job shares no link, else co-simulated with the jobs it shares links with."""
        keys = list(running)
        leaves = {k: self.crossing(running[k][1]) for k in keys}
        if self.degraded:
            running = {k: (self._on_fabric(w, p, leaves[k]), p) for k, (w, p) in
                       running.items()}
        parent = {k: k for k in keys}

        def root(k):
            while parent[k] != k:
                parent[k] = parent[parent[k]]
                k = parent[k]
            return k
        owner: dict = {}
        for k in keys:
            for leaf in leaves[k]:
                if leaf in owner:
                    parent[root(k)] = root(owner[leaf])
                else:
                    owner[leaf] = k
        components: dict = {}
        for k in keys:
            components.setdefault(root(k), []).append(k)
        running_now = {(w.name, w.degraded, p.gpus) for w, p in running.values()}
        self._peaks = {k: v for k, v in self._peaks.items() if k in running_now}
        out = {}
        for members in components.values():
            if len(members) == 1:
                out[members[0]] = self.alone(*running[members[0]])
                continue
            for k, step in zip(members, self.together([running[k] for k in members])):
                out[k] = step
        return out
