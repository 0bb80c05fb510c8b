"""Training between interruptions: checkpoint cycles in closed form, durability bookkeeping.

Progress ``P`` is measured in iterations (a float: a failure can cut one short). A cycle is
``k`` iterations of ``T`` seconds, then a blocking checkpoint: ``block`` (sync: the whole
save; async: snapshot, after waiting for the previous persist to finish, plus the persist's
slowdown of training charged here) and, if async, a background ``persist`` after which the
checkpoint is durable. Checkpoints sit at multiples of ``k``. Once the cycles repeat exactly
(same regime, no event), whole periods are jumped in one step: steady-state iterations and
checkpoints are never stepped one by one.
"""

from __future__ import annotations

import math

from .plan import JobPlan


class Runner:
    """Progress, checkpoint cycle and durable checkpoints of one trial."""

    def __init__(self, plan: JobPlan):
        self.plan = plan
        c = plan.costs
        self.block_s, self.persist_s, self.copy_s = c.block_s, c.persist_s, c.copy_s
        s = plan.persist_slowdown
        self.extra_s = self.persist_s * s / (1.0 + s) if plan.async_mode else 0.0
        self.t = 0.0
        self.P = 0.0
        self.T = plan.t_base
        self.k = self._k()
        self.in_block = False
        self.block_end = 0.0
        self.block_P = 0.0
        self.inf_P = None         # async checkpoint persisting: progress, done time
        self.inf_done = 0.0
        self.dur_P = None         # latest durable checkpoint of the primary target
        self.dur_count = 0
        self.copy_P = None        # shared-FS copy in flight, and the latest durable one
        self.copy_done = 0.0
        self.copy_dur_P = None
        self.steady = 0           # cycles completed since the last regime change or resume
        self.had_persist = False
        self.replaced: set[int] = set()   # servers swapped since the last durable checkpoint
        self.train_base = 0.0     # seconds: iterations trained x healthy iteration time
        self.degraded = 0.0
        self.ckpt = 0.0
        self.checkpoints = 0
        self.target_P = None      # progress to regain (set by the trial during an episode)
        self.regained_at = None
        self.done = False

    # ----------------------------------------------------------------- regime
    def _k(self) -> int:
        p = self.plan
        if p.interval_s is not None:
            return max(1, math.ceil(p.interval_s / self.T - 1e-9))
        return p.every_iterations

    def set_iteration_time(self, T: float) -> None:
        if T != self.T:
            self.T = T
            self.k, self.steady = self._k(), 0

    # ---------------------------------------------------------------- advance
    def advance(self, t_stop: float) -> None:
        """Train and checkpoint from ``self.t`` to ``t_stop`` (or to the job's end)."""
        N = self.plan.iterations
        while self.t < t_stop and not self.done:
            if self.in_block:
                end = min(self.block_end, t_stop)
                self.ckpt += end - self.t
                self.t = end
                if end == self.block_end:
                    self._finish_checkpoint()
                continue
            self._jump(t_stop)
            nxt = (math.floor(self.P / self.k + 1e-9) + 1) * self.k
            goal = min(nxt, N) if N is not None else nxt
            tp = self.target_P
            if tp is not None and self.P < tp <= goal:
                t_cross = self.t + (tp - self.P) * self.T
                if t_cross <= t_stop:
                    self.regained_at, self.target_P = t_cross, None
            dt = (goal - self.P) * self.T
            if self.t + dt > t_stop:
                self._train((t_stop - self.t) / self.T)
                self.t = t_stop
                return
            self._train(goal - self.P)
            self.P = goal
            self.t += dt
            if N is not None and self.P >= N:
                self.done = True
            else:
                self._start_block()

    def _train(self, iterations: float) -> None:
        self.P += iterations
        self.train_base += iterations * self.plan.t_base
        self.degraded += iterations * (self.T - self.plan.t_base)

    def _start_block(self) -> None:
        extra = self.extra_s if self.had_persist else 0.0
        wait = 0.0
        if self.inf_P is not None:
            wait = max(0.0, self.inf_done - (self.t + extra))
        self.in_block = True
        self.block_P = self.P
        self.block_end = self.t + extra + wait + self.block_s

    def _finish_checkpoint(self) -> None:
        self.in_block = False
        self.checkpoints += 1
        self.steady += 1
        self.promote(self.t)
        if self.plan.async_mode:
            self.inf_P, self.inf_done = self.block_P, self.t + self.persist_s
            self.had_persist = True
            self.promote(self.t)
        else:
            self._durable(self.block_P, self.t)

    def _durable(self, P: float, t: float) -> None:
        self.dur_P = P
        self.dur_count += 1
        self.replaced.clear()
        m = self.plan.copy_every
        if m and self.dur_count % m == 0:
            if self.copy_P is not None and self.copy_done <= t:
                self.copy_dur_P, self.copy_P = self.copy_P, None
            if self.copy_P is None:
                self.copy_P, self.copy_done = P, t + self.copy_s

    def promote(self, t: float) -> None:
        """Make the persists and copies finished by ``t`` durable."""
        if self.inf_P is not None and self.inf_done <= t:
            P, self.inf_P = self.inf_P, None
            self._durable(P, self.inf_done)
        if self.copy_P is not None and self.copy_done <= t:
            self.copy_dur_P, self.copy_P = self.copy_P, None

    # ------------------------------------------------------------------- jump
    def _cycle(self) -> tuple[float, int]:
        """Steady cycle length (s) and the period (cycles) after which state repeats."""
        kT = self.k * self.T
        if self.plan.async_mode:
            L = kT + self.extra_s + max(0.0, self.persist_s - kT - self.extra_s) + self.block_s
        else:
            L = kT + self.block_s
        m = self.plan.copy_every
        if not m:
            return L, 1
        return L, m * max(1, math.ceil(self.copy_s / (m * L) - 1e-9))

    def _jump(self, t_stop: float) -> None:
        """Skip whole periods of identical cycles that end before ``t_stop``."""
        if self.steady < 2 or self.P != self.block_P:
            return
        L, period = self._cycle()
        if self.plan.copy_every and self.steady < period + self.plan.copy_every + 1:
            return
        n = math.floor((t_stop - self.t) / L) - 1
        for limit in (self.plan.iterations, self.target_P):
            if limit is not None:
                n = min(n, math.floor((limit - self.P) / self.k) - 1)
        n = (n // period) * period
        if n < period:
            return
        dP, dt = n * self.k, n * L
        self.t += dt
        self._train(dP)
        self.ckpt += dt - dP * self.T
        self.P = self.block_P = self.block_P + dP
        self.checkpoints += n
        self.dur_count += n
        self.steady += n
        if self.dur_P is not None:
            self.dur_P += dP
        if self.inf_P is not None:
            self.inf_P += dP
            self.inf_done += dt
        if self.copy_P is not None:
            self.copy_P += dP
            self.copy_done += dt
        if self.copy_dur_P is not None:
            self.copy_dur_P += dP

    # -------------------------------------------------------------- interrupt
    def interrupt(self, t: float) -> None:
        """The job stops at ``t``: in-flight checkpoints and copies are lost."""
        self.promote(t)
        self.in_block = False
        self.inf_P = None
        self.copy_P = None

    def resume(self, t: float) -> None:
        self.t = t
        self.in_block = False
        self.block_P = self.P
        self.steady = 0
        self.had_persist = False
