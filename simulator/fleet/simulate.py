"""The fleet: arrivals, a scheduler, placement, step times under contention, failures.

A plain event loop (a heap of timed events, ties broken by insertion order), coarser than
the replay engine: a job runs ``steps`` steps at the step time its current neighbours give it
(:class:`~simulator.fleet.contention.StepTimes`), re-rated only when the set of running jobs
changes; steps themselves are never simulated one by one. All events at one instant are
handled before the scheduler runs once.

A job's length is in steps (a ``duration`` is turned into steps at its *nominal* step: alone
on the cluster's first GPUs, as ``clustersim run`` places it). With a checkpoint policy
(interval ``I``, save ``c``) each step takes ``1 + c / I`` times its step time, a checkpoint
is written every ``I / nominal step`` steps, and a stopped job (preempted, or on a failed
node) keeps the steps up to its last checkpoint and pays ``restore`` when it starts again;
without one it starts over.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from ..engine import Placement
from ..errors import ConfigError
from ..progress import stage
from .contention import StepTimes, Work
from .failures import Component, FailureClass
from .placement import PLACEMENTS, Layout
from .schedulers import SCHEDULERS
from .work import Linked, co_simulated_ops

_DONE_EPS = 1e-9        # steps: a job this close to its last step has ended


@dataclass(frozen=True)
class JobSpec:
    """One job as the fleet sees it (:mod:`simulator.fleet.mix` gives these)."""

    name: str
    arrival_s: float
    work: Work
    gpus: int
    steps: float | None = None          # or duration_s: its time alone, nominal placement
    duration_s: float | None = None
    priority: int = 0
    checkpoint_s: float | None = None   # interval of running time between checkpoints
    save_s: float = 0.0
    restore_s: float = 0.0


@dataclass(eq=False)
class _Job:
    """A job's state in the fleet: its progress (``done`` of ``steps``), where it runs and
    at what pace, and what it has cost so far."""

    spec: JobSpec
    index: int
    nominal_s: float
    steps: float
    done: float = 0.0
    state: str = "waiting"
    placement: Placement | None = None
    step_s: float = 0.0
    overhead_s: float = 0.0         # restore left before steps resume
    last_s: float = 0.0
    version: int = 0
    started_s: float = -1.0
    first_start_s: float | None = None
    end_s: float | None = None
    restarts: int = 0
    preemptions: int = 0
    lost_steps: float = 0.0
    running_s: float = 0.0          # wall time holding GPUs
    stepping_s: float = 0.0         # of which computing steps (no checkpoint, no restore)
    stepped: float = 0.0            # steps computed, lost ones included
    waited_s: float = 0.0
    queued_at: float = 0.0
    board_w: float = 0.0            # a GPU's average board power in its step alone

    @property
    def gpus(self) -> int:
        return self.spec.gpus

    @property
    def priority(self) -> int:
        return self.spec.priority

    @property
    def save_factor(self) -> float:
        s = self.spec
        return 1.0 + s.save_s / s.checkpoint_s if s.checkpoint_s else 1.0


@dataclass(frozen=True)
class FleetPower:
    """The machine's power (power.yaml; docs/energy.md): the GPU's phase powers, one
    server's host and NIC ports (W, DC), the fabric's switches (W, at the wall), the
    supplies' efficiency and the site's PUE."""

    gpu: object                  # GpuPower
    host_w: float
    nics_w: float
    switches_w: float
    psu: float
    pue: float

    def facility_w(self, gpu_w: float, servers_up: int) -> float:
        """((GPU board power + servers up x (host + NICs)) / PSU + switches) x PUE: a
        server that is down draws nothing."""
        return ((gpu_w + servers_up * (self.host_w + self.nics_w)) / self.psu
                + self.switches_w) * self.pue


@dataclass
class FleetResult:
    jobs: list[dict]
    samples: list[dict]
    counts: dict
    n_gpus: int
    end_s: float
    events: int


@dataclass(eq=False)
class Fleet:
    """``specs`` on the cluster of ``layout``, scheduled by ``scheduler`` and placed by
    ``placement`` (registry names). ``components`` fail at their rates (exponential, each
    from its own stream of ``seed``), ``classes`` of them as one process each
    (:class:`~simulator.fleet.failures.FailureClass`), and at the (time, component index)
    pairs of ``scheduled``; by default one component per server (its node), none failing
    at random. Nothing happens after ``horizon_s``."""

    layout: Layout
    specs: list[JobSpec]
    scheduler: str = "easy"
    placement: str = "packed"
    components: tuple[Component, ...] = ()
    seed: int = 0
    horizon_s: float = math.inf
    scheduled: tuple = ()
    gpu: str = ""                       # the cluster's GPU model, for its price
    power: FleetPower | None = None     # the machine's power (None: no power data)
    step_times: StepTimes | None = None
    classes: tuple[FailureClass, ...] = ()
    max_work: float = math.inf          # op replays (limits.max_work; inf: not estimated)
    source: str = ""                    # the mix file, for that refusal
    now: float = 0.0
    queue: list = field(default_factory=list)
    running: list = field(default_factory=list)

    def __post_init__(self):
        self.step_times = self.step_times or StepTimes(self.layout)
        if self.power is not None:
            self.step_times.gpu_power = self.power.gpu
        self.n_gpus = self.layout.n_gpus
        self.free = [list(range(len(g))) for g in self.layout.gpus]
        self.down: dict[int, int] = {}      # server -> its failed components
        self.components = self.components or tuple(
            Component(f"node {s}", (s,)) for s in range(len(self.layout.gpus)))
        self._draws: dict[int, np.random.Generator] = {}    # component -> its stream
        self._failed: set[int] = set()
        self._degrading: dict[int, Component] = {}     # failed, taking no server out
        self._policy = PLACEMENTS[self.placement][0]
        self._schedule = SCHEDULERS[self.scheduler][0]
        self._heap: list = []
        self._seq = 0
        self.samples: list[dict] = []
        self.events = 0

    # ------------------------------------------------------------ what schedulers call
    def free_gpus(self) -> int:
        return sum(len(f) for f in self.free)

    def estimate_s(self, job: _Job) -> float:
        return job.overhead_s + (job.steps - job.done) * job.nominal_s * job.save_factor

    def expected_end(self, job: _Job) -> float:
        """At the job's current pace (its nominal step until it is first rated)."""
        step = job.step_s or job.nominal_s
        return self.now + job.overhead_s + (job.steps - job.done) * step * job.save_factor

    def start(self, job: _Job) -> bool:
        gpus = self._policy(self.layout, self.free, job.gpus)
        if gpus is None:
            return False
        for g in gpus:
            s, p = self.step_times.where[g]
            self.free[s].remove(p)
        self.queue.remove(job)
        self.running.append(job)
        job.state, job.placement, job.started_s, job.last_s = "running", Placement(gpus), \
            self.now, self.now
        job.step_s = 0.0        # rated once the scheduler is done (_rerate)
        job.waited_s += self.now - job.queued_at
        if job.first_start_s is None:
            job.first_start_s = self.now
        return True

    def preempt(self, job: _Job) -> None:
        job.preemptions += 1
        self._stop(job)

    # ------------------------------------------------------------------------ the loop
    def run(self) -> FleetResult:
        """Run the fleet to its end.

        :raises ConfigError: naming ``limits.max_work`` where the op replays estimated once
            each kind's step alone is known (:mod:`simulator.fleet.work`) pass
            ``max_work``, before any co-simulation.
        """
        jobs = self._jobs()
        if self.max_work < math.inf:
            self._check_work(jobs)
        for job in jobs:
            self._push(job.spec.arrival_s, "arrive", job)
        self._failures()
        total, reported = len(jobs), 0
        self.finished = 0
        while self._heap and self._heap[0][0] <= self.horizon_s and self.finished < total:
            self.now = self._heap[0][0]
            self._advance()
            changed = False
            while self._heap and self._heap[0][0] == self.now:
                _, _, kind, what, version = heapq.heappop(self._heap)
                self.events += 1
                changed |= self._handle(kind, what, version)
            if changed:
                self._schedule(self)
                self._rerate()
                self._sample()
            if self.finished * 10 // total > reported:
                reported = self.finished * 10 // total
                stage(f"cluster: {self.finished}/{total} jobs done, {self.now / 3600:.1f} h "
                      f"simulated")
        counts = vars(self.step_times.counts).copy()
        if self.max_work < math.inf:
            counts["ops_estimate"] = self.work_estimate
        return FleetResult([self._row(j) for j in jobs], self.samples, counts, self.n_gpus,
                           self.now, self.events)

    def _check_work(self, jobs: list[_Job]) -> None:
        """The op replays so far (each kind's step alone) and those the co-simulations of
        the multi-server jobs may cost, against ``max_work``."""
        multi = [Linked(j.spec.arrival_s, j.steps * j.nominal_s * j.save_factor, j.nominal_s,
                        j.spec.work.trace_ops)
                 for j in jobs if j.gpus > self.layout.per_server]
        self.work_estimate = self.step_times.counts.ops + co_simulated_ops(multi)
        if self.work_estimate > self.max_work:
            raise ConfigError(f"about {self.work_estimate:.3g} op replays for {len(jobs)} "
                              f"jobs ({len(multi)} of more than one server, co-simulated as "
                              f"they start and end), past the limit of {self.max_work:.3g}: "
                              f"fewer or smaller jobs, or a higher limit", source=self.source,
                              field="limits.max_work")

    def _jobs(self) -> list[_Job]:
        order = sorted(range(len(self.specs)), key=lambda i: (self.specs[i].arrival_s, i))
        jobs = []
        for index, i in enumerate(order):
            spec = self.specs[i]
            first = Placement.first(spec.gpus)
            nominal = self.step_times.alone(spec.work, first)
            if spec.checkpoint_s is not None and spec.checkpoint_s < nominal:
                raise ConfigError(                  # as reliability.checkpoint.interval
                    f"{spec.checkpoint_s:.3g} s is shorter than one of job {spec.name}'s "
                    f"steps ({nominal:.3g} s): checkpoints are taken between steps",
                    field="checkpoint.interval")
            steps = spec.steps if spec.steps is not None else spec.duration_s / nominal
            board = self.step_times.board_w(spec.work, first) if self.power else None
            jobs.append(_Job(spec, index, nominal, float(steps), board_w=board or 0.0))
        return jobs

    def _push(self, t: float, kind: str, what, version: int = 0) -> None:
        heapq.heappush(self._heap, (t, self._seq, kind, what, version))
        self._seq += 1

    def _handle(self, kind: str, what, version: int) -> bool:
        if kind == "arrive":
            what.queued_at = self.now
            self._enqueue(what)
            return True
        if kind == "finish":
            if what.state != "running" or version != what.version:
                return False        # re-rated or stopped since
            what.done = what.steps
            what.state, what.end_s = "done", self.now
            self.finished += 1
            self._release(what)
            return True
        if kind == "fail":
            return self._fail(what)
        if kind == "class":
            return self._class_failure(what)
        self._repair(what)
        return True

    def _enqueue(self, job: _Job) -> None:
        job.state = "waiting"
        at = next((i for i, q in enumerate(self.queue) if q.index > job.index), len(self.queue))
        self.queue.insert(at, job)

    def _release(self, job: _Job) -> None:
        self.running.remove(job)
        for g in job.placement.gpus:
            s, p = self.step_times.where[g]
            if s not in self.down:
                self.free[s].append(p)
                self.free[s].sort()

    def _stop(self, job: _Job) -> None:
        """``job`` leaves its GPUs: back to the queue from its last checkpoint."""
        spec = job.spec
        keep = 0.0
        if spec.checkpoint_s:
            every = spec.checkpoint_s / job.nominal_s
            keep = math.floor(job.done / every + _DONE_EPS) * every
        job.lost_steps += job.done - keep
        job.done = keep
        job.overhead_s = spec.restore_s if (spec.checkpoint_s and keep > 0) else 0.0
        job.version += 1
        self._release(job)
        job.queued_at = self.now
        self._enqueue(job)

    def _advance(self) -> None:
        """Every running job's progress up to ``now`` at its current pace."""
        for job in self.running:
            dt = self.now - job.last_s
            job.last_s = self.now
            job.running_s += dt
            o = min(dt, job.overhead_s)
            job.overhead_s -= o
            steps = (dt - o) / (job.step_s * job.save_factor) if job.step_s else 0.0
            job.done = min(job.steps, job.done + steps)
            job.stepped += steps
            job.stepping_s += (dt - o) / job.save_factor

    def _rerate(self) -> None:
        steps = self.step_times.steps({j.index: (j.spec.work, j.placement)
                                       for j in self.running})
        for job in self.running:
            step = steps[job.index]
            if step == job.step_s:
                continue
            job.step_s = step
            job.version += 1
            self._push(self.expected_end(job), "finish", job, job.version)

    def _sample(self) -> None:
        busy = sum(j.gpus for j in self.running)
        useful = sum(j.gpus * j.nominal_s / (j.step_s * j.save_factor)
                     for j in self.running if j.overhead_s == 0 and j.step_s)
        down = sum(len(self.layout.gpus[s]) for s in self.down)
        sample = {"time_s": self.now, "busy_gpus": busy, "useful_gpus": useful,
                  "down_gpus": down, "running": len(self.running), "queued": len(self.queue)}
        if self.power is not None:
            sample["power_kw"] = self._power_w(busy, down) / 1e3
        self.samples.append(sample)

    def _power_w(self, busy: int, down: int) -> float:
        """The fleet's facility power now: a running job's GPUs draw their step's board
        power for the share of the time they step at the pace they would alone (the useful
        share) and idle power the rest (waiting on neighbours, checkpoint writes, restore),
        like every GPU without a job on a server that is up."""
        idle = self.power.gpu.idle_w
        gpu_w = (self.n_gpus - down - busy) * idle
        for j in self.running:
            u = j.nominal_s / (j.step_s * j.save_factor) if j.overhead_s == 0 and j.step_s \
                else 0.0
            gpu_w += j.gpus * (u * j.board_w + (1 - u) * idle)
        return self.power.facility_w(gpu_w, len(self.layout.gpus) - len(self.down))

    # --------------------------------------------------------------------- failures
    def _failures(self) -> None:
        for at, c in self.scheduled:
            self._push(at, "fail", c)
        for c in range(len(self.components)):
            self._next_failure(c)
        for k in range(len(self.classes)):
            self._next_class_failure(k)

    def _stream(self, key: int) -> np.random.Generator:
        """The stream ``(seed, key)``: a component's own (key: its index) or a class's (key:
        the component count + the class's index)."""
        if key not in self._draws:
            self._draws[key] = np.random.default_rng([self.seed, key])
        return self._draws[key]

    def _next_failure(self, c: int) -> None:
        rate = self.components[c].rate_per_s
        if rate > 0:
            self._push(self.now + float(self._stream(c).exponential(1.0 / rate)), "fail", c)

    def _next_class_failure(self, k: int) -> None:
        rate = self.classes[k].rate_per_s
        if rate > 0:
            draw = self._stream(len(self.components) + k).exponential(1.0 / rate)
            self._push(self.now + float(draw), "class", k)

    def _class_failure(self, k: int) -> bool:
        """A failure of class ``k``: one of its components, drawn uniformly, fails (none
        where that one is down already), and the class's next failure is drawn."""
        cls = self.classes[k]
        c = cls.first + int(self._stream(len(self.components) + k).integers(cls.count))
        self._next_class_failure(k)
        return self._fail(c)

    def _fail(self, c: int) -> bool:
        """Component ``c`` fails (unless it is down already): the jobs on its servers stop,
        the servers are out until its repair; or, for a component that takes no server
        out, the fabric is without it until then (the jobs it slows are re-rated)."""
        if c in self._failed:
            return False
        self._failed.add(c)
        comp = self.components[c]
        self._push(self.now + comp.repair_s, "repair", c)
        if comp.degrades:
            self._degrading[c] = comp
            self._fabric()
            return True
        servers = set(comp.servers)
        for job in [j for j in self.running if any(
                self.step_times.where[g][0] in servers for g in j.placement.gpus)]:
            job.restarts += 1
            self._stop(job)
        for s in servers:
            self.down[s] = self.down.get(s, 0) + 1
            self.free[s] = []
        return True

    def _fabric(self) -> None:
        """Tell the step times what is missing from the fabric now (sorted: one set of
        missing elements is one degraded fabric, whatever order they failed in)."""
        self.step_times.degraded = tuple(sorted(c.degrades for c in self._degrading.values()))
        self.step_times.slowed = frozenset(s for c in self._degrading.values()
                                           for s in c.slows)

    def _repair(self, c: int) -> None:
        self._failed.discard(c)
        if self._degrading.pop(c, None) is not None:
            self._fabric()
        for s in self.components[c].servers:
            self.down[s] -= 1
            if not self.down[s]:
                del self.down[s]
                self.free[s] = list(range(len(self.layout.gpus[s])))
        self._next_failure(c)

    # ------------------------------------------------------------------------ tables
    def _row(self, job: _Job) -> dict:
        spec = job.spec
        alone = job.steps * job.nominal_s
        end = job.end_s
        return {"job": spec.name, "kind": spec.work.name, "gpus": spec.gpus,
                "priority": spec.priority, "arrival_s": spec.arrival_s,
                "start_s": job.first_start_s, "end_s": end,
                "queue_s": (job.first_start_s - spec.arrival_s
                            if job.first_start_s is not None else None),
                "waited_s": job.waited_s, "run_s": job.running_s,
                "alone_s": alone, "steps": job.steps, "step_alone_s": job.nominal_s,
                "slowdown": (job.stepping_s / (job.stepped * job.nominal_s)
                             if job.stepped > 0 else None),
                "goodput": alone / job.running_s if job.running_s > 0 else None,
                "restarts": job.restarts, "preemptions": job.preemptions,
                "lost_steps": job.lost_steps,
                "placement": " ".join(map(str, job.placement.gpus)) if job.placement else "",
                "state": job.state}
