"""A reference flow fabric for tests: the flow fabric's model as a plain loop.

One list entry per active flow ``[flow, left, since, rate, end, done]``, every active flow
solved at every event on every link (:class:`~simulator.network.solve.Solver`), one timer
for the earliest end, dense per-link counters; a bundle split into its instances where its
solve says so, reporting to one :class:`~simulator.network.bundle.Join`. The product's
:class:`~simulator.network.fabric.FlowFabric` (connected sets, link classes, remembered
solves, counters by stretch) must give the same end times and counters to the last bit
(``tests/test_fabric_reference.py`` on random transfers, ``tests/test_engine_reference.py``
on whole replays)."""

from __future__ import annotations

import math

import numpy as np

from simulator.network.bundle import Join, instances
from simulator.network.fabric import Fabric
from simulator.network.solve import Solver


class ListFabric(Fabric):
    """The flow fabric as a plain loop over ``[flow, left, since, rate, end, done]``."""

    name = "flow"

    def __init__(self, env, capacity):
        self._solver = Solver(np.asarray(capacity, float))
        super().__init__(env, capacity)
        self._active, self._pending, self._timer, self._groups = [], False, None, None
        n = len(capacity)
        self.occupancy, self.wire = np.zeros(n), np.zeros(n)
        self._load, self._load_wire, self._since = np.zeros(n), np.zeros(n), np.zeros(n)
        self._group_load = None

    def _init_counters(self) -> None:
        """The counters are ``wire`` and ``occupancy`` (dense, per link)."""

    @property
    def link_bytes(self):
        return self.wire

    @property
    def link_occupancy_bytes(self):
        return self.occupancy

    def track(self, group_of_link, n_groups):
        self._groups = np.asarray(group_of_link, np.int64)
        self._group_capacity = np.bincount(self._groups, weights=self.capacity,
                                           minlength=n_groups)
        self._group_load = np.zeros(n_groups)

    def _move(self, flow, done):
        self._active.append([flow, float(flow.size_bytes), self.env.now, None, math.inf, done])
        if not self._pending:
            self._pending = True
            self.env.timeout(0).callbacks.append(self._update)

    def _update(self, _event=None):
        self._pending = False
        now = self.env.now
        still = []
        for entry in self._active:
            flow, _, _, _, end, done = entry
            if end > now:
                still.append(entry)
            elif not isinstance(done, Join):
                self._finish(flow, done)
            else:
                done.left -= 1
                if done.left == 0:
                    self._finish(done.flow, done.done)
        self._active = still
        load, load_wire = np.zeros(len(self.capacity)), np.zeros(len(self.capacity))
        if self._active:
            while True:
                solution, split = self._solver.solve([e[0] for e in self._active])
                if solution is not None:
                    break
                active = []
                for entry, cut in zip(self._active, split.tolist()):
                    if cut:
                        self.splits += 1
                        parts = instances(entry[0])
                        join = Join(entry[0], entry[5], len(parts))
                        active.extend([p, *entry[1:5], join] for p in parts)
                    else:
                        active.append(entry)
                self._active = active
            for entry, rate in zip(self._active, solution.rates.tolist()):
                if rate != entry[3]:        # a new stretch where the rate changes
                    if entry[3] is not None:
                        entry[1] -= entry[3] * (now - entry[2])
                    entry[2], entry[3] = now, rate
                    entry[4] = now + entry[1] / rate if rate > 0 else math.inf
            load[solution.links] = solution.occupancy
            load_wire[solution.links] = solution.wire
        changed = (load != self._load) | (load_wire != self._load_wire)
        self.occupancy[changed] += self._load[changed] * (now - self._since[changed])
        self.wire[changed] += self._load_wire[changed] * (now - self._since[changed])
        self._load[changed], self._load_wire[changed] = load[changed], load_wire[changed]
        self._since[changed] = now
        if self._groups is not None:
            fraction = np.bincount(self._groups, weights=load, minlength=len(
                self._group_capacity)) / np.maximum(self._group_capacity, 1e-300)
            if self.samples and self.samples[-1][0] == now:
                self.samples[-1] = (now, fraction)
            else:
                self.samples.append((now, fraction))
        if self._active:
            end = min(e[4] for e in self._active)
            # at the end itself (now + (end - now) may round to another instant)
            self._timer = self.env.call_at(max(end, now), self._fire)

    def _fire(self, event):
        if event is self._timer:
            self._update()
