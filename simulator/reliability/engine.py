"""One trial of a whole training job: failures, detection, restart, restore, recompute.

A tight event loop (a heap of timed events; SimPy's ordering rule: time, then insertion
order). Events are failures (one pending draw per class), scheduled failures, repairs that
end a degraded fabric, stragglers, and the phases of a recovery. Between events the job
trains in closed form (:class:`~simulator.reliability.running.Runner`).

A recovery (torchrun semantics: every worker is killed and restarted) is
``detection -> teardown -> [wait for nodes: spare pool or repair] -> spare hand-over ->
requeue -> diagnostics -> process start + communicator init -> checkpoint load``; a new
interrupting failure during it starts the recovery over (after its own detection). Every
random draw comes from a stream seeded by (seed, trial, stream name), so the result does not
depend on which process runs the trial, and the failure draws do not depend on the
checkpoint policy (common random numbers across the interval search).
"""

from __future__ import annotations

import heapq
import math
import random

from .plan import JobPlan
from .results import CATEGORIES, Episode, TrialResult
from .running import Runner

FAIL, SCHED, SLOW_END, REPAIRED, STRAGGLE, DETECTED, RESERVE, RESUME = range(8)
REPAIRABLE = ("link", "leaf_switch", "spine_switch")    # down until repaired, then back
DET, WAIT, RESTART, RESTORE = (CATEGORIES.index(c) for c in
                               ("detection", "waiting", "restart", "restore"))


class Trial:
    def __init__(self, plan: JobPlan, seed: int, trial: int, record: bool = False):
        self.plan = plan
        self.run_ = Runner(plan)
        self.rng = {name: random.Random(f"{seed}/{trial}/{name}") for name in (
            "detect", "repair", "straggler", *(c.name for c in plan.classes))}
        self.heap: list = []
        self.seq = 0
        self.down = False
        self.attempt = 0
        self.phases: list[tuple[float, int]] = []
        self.acc = [0.0] * len(CATEGORIES)
        self.pending: set[int] = set()
        self.free = plan.spares
        self.spare_span: tuple[float, float] | None = None   # waiting for repaired servers
        self.returns: list[float] = []
        self.active: dict[int, int] = {}
        self.broken: set[tuple[int, int]] = set()
        self.took = False
        self.weibull: dict[int, list] = {}
        self.failures = [0] * len(plan.classes)
        self.interrupts = 0
        self.events = 0
        self.lost_iters = 0.0
        self.restore_s, self.source = 0.0, "primary"
        self.episode = None       # [t0, progress to regain, failures, last resume]
        self.episodes: list[tuple] = []
        self.timeline = [(0.0, 0.0, False)] if record else None

    # ------------------------------------------------------------------ heap
    def push(self, t: float, kind: int, a=0, b=0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))

    def _next_failure(self, ci: int, t: float) -> None:
        c = self.plan.classes[ci]
        if c.rate_per_s <= 0:
            return
        rng = self.rng[c.name]
        if c.shape is None:
            comp = rng.randrange(len(c.lost)) if len(c.lost) > 1 else 0
            self.push(t + rng.expovariate(c.rate_per_s), FAIL, ci, comp)
            return
        heap = self.weibull.get(ci)
        scale = len(c.lost) / c.rate_per_s / math.gamma(1.0 + 1.0 / c.shape)
        if heap is None:
            heap = [(rng.weibullvariate(scale, c.shape), i) for i in range(len(c.lost))]
            heapq.heapify(heap)
            self.weibull[ci] = heap
        else:   # the component that just failed is renewed
            _, i = heapq.heappop(heap)
            heapq.heappush(heap, (t + rng.weibullvariate(scale, c.shape), i))
        self.push(heap[0][0], FAIL, ci, heap[0][1])

    # ------------------------------------------------------------------- run
    def run(self) -> TrialResult:
        p = self.plan
        for ci in range(len(p.classes)):
            self._next_failure(ci, 0.0)
        for i, ev in enumerate(p.schedule):
            self.push(ev[0], SCHED, i)
        if p.stragglers:
            self.push(self.rng["straggler"].expovariate(p.stragglers[0]), STRAGGLE)
        t_end = p.duration_s if p.duration_s is not None else math.inf
        t_cap = 50.0 * p.iterations * p.t_base + 30 * 86400.0 if p.iterations else math.inf
        r = self.run_
        while True:
            t_ev = self.heap[0][0] if self.heap else math.inf
            t_stop = min(t_ev, t_end, t_cap)
            if self.down:
                self._charge(t_stop)
            else:
                r.advance(t_stop)
                if r.regained_at is not None:
                    self._close_episode(r.regained_at)
                if r.done:
                    break
            if t_ev >= t_end or t_ev >= t_cap:
                break
            t, _, kind, a, b = heapq.heappop(self.heap)
            self.events += 1
            self._handle(t, kind, a, b)
        return self._result(min(r.t, t_end), r.done or p.iterations is None)

    def _handle(self, t: float, kind: int, a, b) -> None:
        if kind == FAIL:
            self._fail(t, a, b)
            self._next_failure(a, t)
        elif kind == SCHED:
            ev = self.plan.schedule[a]
            if ev[1] < 0:
                self._slow(t, ev[3], ev[4])
            else:
                self._fail(t, ev[1], ev[2])
        elif kind == SLOW_END:
            self._slow_end(a)
        elif kind == REPAIRED:
            self.broken.discard((a, b))
            self._slow_end(self.plan.classes[a].slow[b])
        elif kind == STRAGGLE:
            st = self.plan.stragglers
            self._slow(t, st[1], st[2])
            self.push(t + self.rng["straggler"].expovariate(st[0]), STRAGGLE)
        elif a == self.attempt:
            (self._detected, self._reserve, self._resume)[kind - DETECTED](t)

    # -------------------------------------------------------------- failures
    def _fail(self, t: float, ci: int, comp: int) -> None:
        """A component fails: the fabric may degrade until its repair, the job may stop."""
        c = self.plan.classes[ci]
        if (ci, comp) in self.broken:
            return                                   # already down, awaiting repair
        self.failures[ci] += 1
        repair = self._repair(c)
        if c.name in REPAIRABLE:
            self.broken.add((ci, comp))
            self.push(t + repair, REPAIRED, ci, comp)
            if c.slow[comp] >= 0:
                self.active[c.slow[comp]] = self.active.get(c.slow[comp], 0) + 1
                self._regime()
        if c.interrupts[comp]:
            for _ in c.lost[comp]:
                heapq.heappush(self.returns, t + repair)
            self._interrupt(t, c.detect, c.lost[comp])

    def _repair(self, c) -> float:
        if c.repair_exponential and c.repair_s > 0:
            return self.rng["repair"].expovariate(1.0 / c.repair_s)
        return c.repair_s

    def _slow(self, t: float, idx: int, duration: float) -> None:
        self.active[idx] = self.active.get(idx, 0) + 1
        self._regime()
        self.push(t + duration, SLOW_END, idx)

    def _slow_end(self, idx: int) -> None:
        if idx < 0:
            return
        self.active[idx] -= 1
        if not self.active[idx]:
            del self.active[idx]
        self._regime()

    def _regime(self) -> None:
        times = self.plan.slow_times
        self.run_.set_iteration_time(max((times[i] for i in self.active), default=times[0]))

    def _detection_delay(self, mechanisms) -> float:
        to, hb, hb_to, hc, mon = self.plan.detection
        u = self.rng["detect"].random
        draws = {"process_exit": lambda: mon * u(), "heartbeat": lambda: hb_to - hb * u(),
                 "health_check": lambda: hc * u(), "collective_timeout": lambda: to}
        return min(draws[m]() for m in mechanisms)

    # -------------------------------------------------------------- recovery
    def _interrupt(self, t: float, mechanisms, lost) -> None:
        self._settle_spare_wait(t)
        r = self.run_
        self.interrupts += 1
        self.pending.update(lost)
        r.replaced.update(lost)
        self._mark(t)
        if not self.down:
            r.interrupt(t)
            self.down = True
            if self.episode is None:
                self.episode = [t, r.P, 0, t, 0.0]   # start, progress, failures, resumed, spare wait
            else:
                self.episode[1] = max(self.episode[1], r.P)
            r.target_P = None
        self.episode[2] += 1
        self._restore_point()
        self._mark(t)
        if not self.phases or self.phases[0][1] != DET or len(self.phases) > 1:
            self._start(t, [(t + self._detection_delay(mechanisms), DET)], DETECTED)

    def _start(self, t: float, phases: list, event: int) -> None:
        """Begin recovery phases at ``t``; ``event`` fires when the last one ends."""
        self.attempt += 1
        self.phases = phases
        self.push(phases[-1][0], event, self.attempt)

    def _charge(self, t_stop: float) -> None:
        t = self.run_.t
        for end, cat in self.phases:
            seg = min(end, t_stop)
            if seg > t:
                self.acc[cat] += seg - t
                t = seg
        self.run_.t = t_stop

    def _detected(self, t: float) -> None:
        self._start(t, [(t + self.plan.restart_s[0], RESTART)], RESERVE)

    def _reserve(self, t: float) -> None:
        _, swap, requeue, diagnostics, start, comm = self.plan.restart_s
        ready = self._take_nodes(t)
        self.spare_span = (t, ready) if ready > t else None   # the spares ran out
        self._restore_point()
        phases, at = [], t
        for dt, cat in ((ready - t, WAIT), ((swap if self.took else 0.0) + requeue, WAIT),
                        (diagnostics, DET), (start + comm, RESTART), (self.restore_s, RESTORE)):
            at += dt
            phases.append((at, cat))
        self._start(t, phases, RESUME)

    def _take_nodes(self, t: float) -> float:
        """Hand the job its missing servers: spares now, else the next repaired ones."""
        need = len(self.pending)
        self.pending.clear()
        self.took = need > 0
        while self.returns and self.returns[0] <= t:
            heapq.heappop(self.returns)
            self.free += 1
        ready = t
        while need > self.free and self.returns:
            ready = heapq.heappop(self.returns)
            self.free += 1
        self.free -= need
        return ready

    def _settle_spare_wait(self, t: float) -> None:
        """Add to the episode the part of the wait for repaired servers that has passed by
        ``t`` (all of it at the resume; up to a failure that restarts the recovery)."""
        if self.spare_span is not None and self.episode is not None:
            start, ready = self.spare_span
            self.episode[4] += max(0.0, min(t, ready) - start)
        self.spare_span = None

    def _resume(self, t: float) -> None:
        self._settle_spare_wait(t)
        self.down = False
        self.phases = []
        r = self.run_
        r.resume(t)
        self.episode[3] = t
        self._mark(t)
        r.target_P = self.episode[1]
        if r.P >= r.target_P:
            self._close_episode(t)

    def _close_episode(self, t: float) -> None:
        t0, _, failures, resumed, spare_wait = self.episode
        self.episodes.append(Episode(t0, resumed - t0, t - t0, failures, self.source,
                                     spare_wait))
        self.episode = None
        self.run_.target_P = self.run_.regained_at = None

    def _restore_point(self) -> None:
        """Roll progress back to the newest checkpoint that survived, and note its load time."""
        r, p = self.run_, self.plan
        ok = {"shared_fs": True, "local_nvme": not r.replaced,
              "peer_memory": self._peers_ok(r.replaced)}[p.target]
        if r.dur_P is not None and ok:
            P, self.source, self.restore_s = r.dur_P, "primary", p.costs.restore_s
        elif r.copy_dur_P is not None:
            P, self.source, self.restore_s = r.copy_dur_P, "shared copy", p.costs.shared_restore_s
            r.dur_P = None
        else:
            P, self.source, self.restore_s = 0.0, "scratch", 0.0
            r.dur_P = None
        if p.keras_epoch:
            P = math.floor(P / p.keras_epoch + 1e-9) * p.keras_epoch
        if P < r.P:
            self.lost_iters += r.P - P
            r.P = r.block_P = P

    def _peers_ok(self, lost: set[int]) -> bool:
        """Every lost server's shard still has a replica on a server that was not lost
        (replicas of server i on i+1 .. i+r, wrapping)."""
        J, reps = self.plan.job_nodes, self.plan.replicas
        return all(any((i + j) % J not in lost for j in range(1, reps + 1)) for i in lost)

    # ---------------------------------------------------------------- result
    def _mark(self, t: float) -> None:
        if self.timeline is not None:
            self.timeline.append((t, self.run_.P, self.down))

    def _result(self, wall: float, completed: bool) -> TrialResult:
        r, base = self.run_, self.plan.t_base
        self._mark(wall)
        seconds = [r.P * base, r.ckpt, r.degraded, self.lost_iters * base, *self.acc[DET:]]
        return TrialResult(wall, r.P, tuple(seconds), tuple(self.failures), self.interrupts,
                           tuple(self.episodes), int(self.episode is not None),
                           r.checkpoints, self.events + r.checkpoints, completed,
                           tuple(self.timeline) if self.timeline is not None else None)


def run_trial(plan: JobPlan, seed: int, trial: int, record: bool = False) -> TrialResult:
    """Simulate trial number ``trial`` of ``plan`` with base seed ``seed``."""
    return Trial(plan, seed, trial, record).run()
