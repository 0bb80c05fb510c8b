"""The flow fabric's bookkeeping (arrays of bytes left, arrivals batched per update, counter
steps logged and added by np.add.at, remembered solves by shape) against the plain loop
it replaced: one list entry per active flow, counters added at every step, every solve on
every link. Random transfers, with bundles that split, rate caps and wire bytes: the same
end times, link counters and utilisation samples (to a few ulps on link classes)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import simpy

from simulator.network.active import DONE_FRACTION
from simulator.network.bundle import Join, bundle_flows, instances
from simulator.network.fabric import Fabric, Flow, FlowFabric
from simulator.network.solve import Solver

SAMPLE_RTOL = 1e-12


class ListFabric(Fabric):
    """The flow fabric as a plain loop over ``[flow, bytes left, done]`` entries."""

    name = "flow"

    def __init__(self, env, capacity):
        self._solver = Solver(np.asarray(capacity, float))
        super().__init__(env, capacity)
        self._active, self._now, self._last_s = [], self._solver.idle, 0.0
        self._pending, self._generation, self._groups = False, 0, None
        self.occupancy = np.zeros(len(capacity))
        self.wire = np.zeros(len(capacity))

    def track(self, group_of_link, n_groups):
        self._groups = np.asarray(group_of_link, np.int64)
        self._group_capacity = np.bincount(self._groups, weights=self.capacity,
                                           minlength=n_groups)
        self._solver.track(self._groups, n_groups)
        self._now = self._solver.idle

    def _move(self, flow, done):
        self._advance()
        self._active.append([flow, float(flow.size_bytes), done])
        if not self._pending:
            self._pending = True
            self.env.timeout(0).callbacks.append(self._update)

    def _advance(self):
        dt = self.env.now - self._last_s
        if dt > 0 and self._active:
            for entry, rate in zip(self._active, self._now.rates):
                entry[1] -= rate * dt
            self.occupancy[self._now.links] += self._now.occupancy * dt
            self.wire[self._now.links] += self._now.wire * dt
        self._last_s = self.env.now

    def _update(self, _event=None):
        self._pending = False
        self._advance()
        still = []
        for entry in self._active:
            flow, left, done = entry
            if left > DONE_FRACTION * flow.size_bytes:
                still.append(entry)
            elif not isinstance(done, Join):
                self._finish(flow, done)
            else:
                done.left -= 1
                if done.left == 0:
                    self._finish(done.flow, done.done)
        self._active = still
        self._now = self._solver.idle
        if self._active:
            self.solves += 1
            while True:
                solution, split = self._solver.solve([e[0] for e in self._active])
                if solution is not None:
                    break
                active = []
                for entry, cut in zip(self._active, split.tolist()):
                    if cut:
                        self.splits += 1
                        parts = instances(entry[0])
                        join = Join(entry[0], entry[2], len(parts))
                        active.extend([p, entry[1], join] for p in parts)
                    else:
                        active.append(entry)
                self._active = active
            self._now = solution
        if self._groups is not None:
            self.samples.append((self.env.now, self._now.group_load /
                                 np.maximum(self._group_capacity, 1e-300)))
        if not self._active:
            return
        dt = float(np.min(np.array([e[1] for e in self._active]) / self._now.rates))
        dt = max(dt, 4 * np.spacing(max(self.env.now, 1.0)))
        self._generation += 1
        generation = self._generation
        self.env.timeout(dt).callbacks.append(
            lambda _e: self._update() if generation == self._generation else None)


def _workload(rng, n_links: int) -> list[tuple[float, Flow]]:
    """(start, flow): a few prototypes (recurring arrays, so solves are remembered), some
    bundles of instances on shifted links, some with caps or wire bytes."""
    protos = []
    for _ in range(6):
        per = int(rng.integers(1, 4))
        base = rng.choice(n_links // 4, size=per)
        coef = rng.uniform(0.5, 2.0, per)
        wire = coef * rng.uniform(0.5, 1.0, per) if rng.random() < 0.3 else None
        size = float(rng.integers(50, 400))
        cap = float(rng.uniform(2.0, 20.0)) if rng.random() < 0.2 else math.inf
        parts = [Flow(size, base + (n_links // 4) * s, coef, max_rate=cap, wire_coef=wire)
                 for s in range(int(rng.integers(1, 4)))]
        protos.append(bundle_flows(parts))
    return [(float(rng.choice([0.0, rng.uniform(0, 30)])),
             replace(protos[int(rng.integers(len(protos)))],
                     latency_s=float(rng.choice([0.0, 0.5])))) for _ in range(14)]


def _run(make, capacity, work, groups):
    env = simpy.Environment()
    fabric = make(env, capacity)
    fabric.track(groups, int(groups.max()) + 1)
    done = []

    def start(at, flow):
        yield env.timeout(at)
        done.append(fabric.transfer(replace(flow)))
    for at, flow in work:
        env.process(start(at, flow))
    env.run()
    return sorted((e.value.start_s, e.value.end_s) for e in done), fabric


@pytest.mark.parametrize("seed", range(12))
def test_the_fabric_is_the_plain_loop_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    n_links = 16
    capacity = rng.choice([10.0, 10.0, 10.0, 5.0], size=n_links)
    groups = np.arange(n_links) % 3
    work = _workload(rng, n_links)
    ref_ends, ref = _run(ListFabric, capacity, work, groups)
    for classes in (False, True):
        ends, fabric = _run(lambda env, cap: FlowFabric(env, cap, link_classes=classes),
                            capacity, work, groups)
        assert ends == ref_ends
        assert fabric.link_occupancy_bytes.tobytes() == ref.occupancy.tobytes()
        assert fabric.link_bytes.tobytes() == ref.wire.tobytes()
        assert (fabric.solves, fabric.splits) == (ref.solves, ref.splits)
        assert [t for t, _ in fabric.samples] == [t for t, _ in ref.samples]
        for (_, got), (_, want) in zip(fabric.samples, ref.samples):
            if classes:
                np.testing.assert_allclose(got, want, rtol=SAMPLE_RTOL, atol=0)
            else:
                assert got.tobytes() == want.tobytes()


def test_the_ulp_floor_is_numpys_spacing():
    # _schedule_next compares with math.ulp and steps by np.spacing: equal for x >= 1
    xs = np.concatenate([[1.0, 2.0, 3.0, 1e300], np.random.default_rng(0).uniform(1, 1e6, 200)])
    assert all(math.ulp(float(x)) == np.spacing(x) for x in xs)
