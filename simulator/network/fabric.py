"""Fabrics: how long bytes take to cross the cluster. One interface, several fidelities.

``Fabric.transfer(flow)`` returns a SimPy event that fires when the flow's bytes have
arrived (``transfer(flow, then)`` calls ``then(flow)`` instead, in the fabric's own step).
Collectives and the replay engine only ever call that (or ``start``, the same at once);
which fidelity answers is chosen by name from :data:`FABRICS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from heapq import heappop
from operator import truediv

import numpy as np
import simpy
from simpy.events import URGENT, Event, Timeout

from ..choices import FIDELITIES
from .active import ActiveFlows
from .bundle import slowest_rate
from .reduced import ClassSolver
from .solve import Solver


@dataclass
class Flow:
    """A transfer: ``size_bytes`` of payload over links with per-byte coefficients.

    ``coef`` is the link capacity (bytes) each payload byte takes: what sets the rate, a
    protocol's or transport's efficiency included. ``wire_coef`` is the bytes that cross
    the link per payload byte, for the counters; None when they are the same as ``coef``.
    ``latency_s`` elapses before the first byte moves (propagation, protocol setup).
    ``max_rate`` caps the payload rate (bytes/s), ``inf`` for no cap. ``parts``: where
    the flow is a bundle of identical instances (:mod:`simulator.network.bundle`), the
    offset of each instance's first entry and, last, the number of entries; else None.
    """

    size_bytes: float
    links: np.ndarray
    coef: np.ndarray
    latency_s: float = 0.0
    max_rate: float = float("inf")
    label: str = ""
    wire_coef: np.ndarray | None = None
    parts: np.ndarray | None = None
    start_s: float = field(default=float("nan"), init=False)
    end_s: float = field(default=float("nan"), init=False)


class Fabric:
    """Base class: owns link capacities and counts what it did.

    Every fidelity counts, per link, ``link_bytes`` (the bytes that crossed it) and
    ``link_occupancy_bytes`` (the capacity the transfers took, bytes at the link's usable
    rate: a protocol that reaches 1/k of the bandwidth takes k bytes per byte it moves;
    over capacity x time it is the utilisation). ``samples`` (the load of
    each link group over time, a fraction of its capacity, after :meth:`track`) is filled
    only by fidelities that share links between concurrent flows; the base, and the
    analytical fabric that sees each transfer alone, leave it empty. ``link_classes``
    concerns fidelities that solve shared load (:class:`FlowFabric`); others ignore it.
    """

    name = "base"

    def __init__(self, env: simpy.Environment, capacity_bytes_per_s: np.ndarray,
                 link_classes: bool = True):
        self.env = env
        self.capacity = np.asarray(capacity_bytes_per_s, dtype=float)
        self._init_counters()
        self.solves = 0
        self.splits = 0         # bundles split back into their instances
        self.samples: list[tuple[float, np.ndarray]] = []

    def _init_counters(self) -> None:
        self.link_bytes = np.zeros(len(self.capacity))
        self.link_occupancy_bytes = np.zeros(len(self.capacity))

    def track(self, group_of_link: np.ndarray, n_groups: int) -> None:
        """Ask for ``samples`` by link group (``group_of_link[i]``: the group of link i);
        a no-op where the fidelity has no shared load to sample."""

    def transfer(self, flow: Flow, then: Callable[[Flow], None] | None = None):
        """Start ``flow`` now; the returned event fires (value: the flow) when it is done.

        With ``then``, no event: ``then(flow)`` is called in the step where the fabric
        finds the flow done (the step before that event would be processed), and None is
        returned; ``then`` may schedule events but not start flows. The flow starts as a
        SimPy process would (an urgent event at this instant, before any event of normal
        priority), without a process: :meth:`start` runs then."""
        done = Event(self.env) if then is None else then
        begin = Event(self.env)
        begin._ok, begin._value = True, None
        begin.callbacks.append(lambda _e: self._begin(flow, done))
        self.env.schedule(begin, URGENT)
        return done if then is None else None

    def start(self, flow: Flow, then: Callable[[Flow], None] | None = None):
        """Start ``flow`` at once, in the caller's step; the rest as :meth:`transfer`.

        The same as :meth:`transfer` where the caller's step is an event of normal priority
        that schedules nothing after this call (no urgent event can be pending then, so the
        urgent start would be the very next thing the environment does)."""
        done = Event(self.env) if then is None else then
        self._begin(flow, done)
        return done if then is None else None

    def _begin(self, flow: Flow, done) -> None:
        flow.start_s = self.env._now
        if flow.latency_s > 0:
            Timeout(self.env, flow.latency_s).callbacks.append(
                lambda _e: self._arrive(flow, done))
        else:
            self._arrive(flow, done)

    def _arrive(self, flow: Flow, done) -> None:
        """The latency has passed: the first byte moves."""
        if flow.size_bytes <= 0:
            self._finish(flow, done)
        else:
            self._move(flow, done)

    def _finish(self, flow: Flow, done) -> None:
        """``flow`` is done: fire its event, or call its ``then``."""
        flow.end_s = self.env._now
        if isinstance(done, simpy.Event):
            done.succeed(flow)
        else:
            done(flow)

    def _move(self, flow: Flow, done: simpy.Event) -> None:  # pragma: no cover - abstract
        """Move the bytes of ``flow``; call :meth:`_finish` when they have arrived."""
        raise NotImplementedError


def wire_coef(flow: Flow) -> np.ndarray:
    """Bytes crossing each of ``flow``'s links per payload byte."""
    return flow.coef if flow.wire_coef is None else flow.wire_coef


def bottleneck_rate(flow: Flow, capacity: np.ndarray,
                    index: tuple[np.ndarray, np.ndarray] | None = None) -> float:
    """Payload rate of ``flow`` alone on the links: min over links of capacity / load;
    ``index``: ``np.unique(flow.links, return_inverse=True)`` where the caller keeps it."""
    if len(flow.links) == 0:
        return flow.max_rate
    # per link its coefficients summed in entry order, as a bincount over all links would
    links, where = np.unique(flow.links, return_inverse=True) if index is None else index
    load = np.bincount(where.ravel(), weights=flow.coef, minlength=len(links))
    used = load > 0
    return float(min(np.min(capacity[links[used]] / load[used]), flow.max_rate))


class AnalyticalFabric(Fabric):
    """Closed form, congestion-unaware: latency + size / bottleneck bandwidth.

    Each transfer sees the links as if it were alone. Use when transfers do not overlap or
    contention is known not to matter; it is the fastest fidelity. It counts what each
    link carried (``link_bytes``, ``link_occupancy_bytes``) but takes no utilisation
    ``samples``: there is no shared load to sample.
    """

    name = "analytical"

    def _move(self, flow: Flow, done: simpy.Event) -> None:
        rate = slowest_rate(flow, lambda f: bottleneck_rate(f, self.capacity))
        self.solves += 1
        duration = flow.size_bytes / rate
        np.add.at(self.link_occupancy_bytes, flow.links, flow.coef * flow.size_bytes)
        np.add.at(self.link_bytes, flow.links, wire_coef(flow) * flow.size_bytes)
        Timeout(self.env, duration).callbacks.append(lambda _e: self._finish(flow, done))


class FlowFabric(Fabric):
    """Flow level: concurrent flows share every link by max-min fairness.

    SimPy only learns the next completion (SimGrid's next-event contract): on each arrival
    or completion the fabric advances all flows, re-solves the rates once for that instant,
    and schedules a timer for the earliest completion (flows that share no link are solved
    set by set, and a set seen before is not solved again, :mod:`simulator.network.solve`).
    Use when transfers overlap and contention matters (oversubscribed uplinks, concurrent
    collectives). The active flows' bytes left are one array
    (:mod:`simulator.network.active`); the link counters' steps are logged and added in
    order (:mod:`simulator.network.counters`).

    With ``link_classes`` (the default) the solves and counters run on classes of links
    that no flow tells apart (:mod:`simulator.network.reduced`): the same rates, times and
    counters to the last bit, in time that follows the classes, not the links; the
    utilisation ``samples`` differ by a few ulps. False solves on every used link (the
    reference the classes are tested against).
    """

    name = "flow"

    def __init__(self, env: simpy.Environment, capacity_bytes_per_s: np.ndarray,
                 link_classes: bool = True):
        self._solver = (ClassSolver if link_classes else Solver)(
            np.asarray(capacity_bytes_per_s, dtype=float))
        super().__init__(env, capacity_bytes_per_s)
        self._active = ActiveFlows()
        self._now = self._solver.idle       # rates and link loads since the last solve
        self._last_s = 0.0
        self._update_pending = False
        self._generation = 0
        self._groups: np.ndarray | None = None

    def _init_counters(self) -> None:
        """The counters live in the solver (per link, or per link class)."""

    @property
    def link_bytes(self) -> np.ndarray:
        return self._solver.per_link(self._solver.counters.wire)

    @property
    def link_occupancy_bytes(self) -> np.ndarray:
        return self._solver.per_link(self._solver.counters.occupancy)

    def track(self, group_of_link: np.ndarray, n_groups: int) -> None:
        """Record, at every re-solve, the load of each link group as a fraction of the
        group's capacity (``samples``: list of (time_s, fractions); a solution's fractions
        are one read-only array, in every sample of that solution)."""
        self._groups = np.asarray(group_of_link, dtype=np.int64)
        capacity = np.bincount(self._groups, weights=self.capacity, minlength=n_groups)
        self._solver.track(self._groups, n_groups, np.maximum(capacity, 1e-300))
        self._now = self._solver.idle

    def _move(self, flow: Flow, done: simpy.Event) -> None:
        self._advance()
        self._active.add(flow, done)
        self._request_update()

    def _request_update(self) -> None:
        # Flows that start at the same instant are solved once, not once each.
        if self._update_pending:
            return
        self._update_pending = True
        Timeout(self.env, 0).callbacks.append(self._update)

    def _advance(self) -> None:
        t = self.env._now
        dt = t - self._last_s
        if dt > 0 and self._active.flows:
            self._active.advance(self._now.rate_list, dt)
            self._solver.counters.add(self._now, dt)
        self._last_s = t

    def _update(self, _event=None) -> None:
        self._update_pending = False
        self._advance()
        for flow, done in self._active.settle():
            self._finish(flow, done)
        self._solve()
        self._schedule_next()

    def _solve(self) -> None:
        active = self._active
        if not active.flows:
            self._now = self._solver.idle
            self._sample()
            return
        self.solves += 1
        while True:
            solution, split = self._solver.solve(active.flows, tuple(active.keys))
            if solution is not None:
                break
            self.splits += active.split(split)
        self._now = solution
        self._sample()

    def _sample(self) -> None:
        if self._groups is not None:
            self.samples.append((self.env._now, self._now.fraction))

    def _schedule_next(self) -> None:
        left = self._active.left
        if not left:
            return
        try:
            dt = float(min(map(truediv, left, self._now.rate_list)))
        except ZeroDivisionError:       # as NumPy divides: inf (or nan for 0 / 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                dt = float((np.array(left) / self._now.rates).min())
        # A step shorter than the clock's resolution at ``now`` would not advance time
        # (now + dt == now): the flow would never drain and the loop never end. Step at
        # least a few ulps; the flow then finishes, late by less than that. (math.ulp is
        # np.spacing for a finite x >= 1, a float; the step stays the NumPy float it was.)
        at = max(self.env._now, 1.0)
        if dt < 4 * math.ulp(at):
            dt = max(dt, 4 * np.spacing(at))
        self._generation += 1
        Timeout(self.env, max(dt, 0.0), self._generation).callbacks.append(self._timer)

    def _timer(self, event) -> None:
        """The completion timer fired (its value: the solve it was set by): re-solve,
        unless a later solve set a newer timer."""
        if event._value == self._generation:
            self._update()


_FABRIC_CLASSES: dict[str, type[Fabric]] = {"analytical": AnalyticalFabric, "flow": FlowFabric}
FABRICS: dict[str, tuple[type[Fabric], str]] = {
    name: (_FABRIC_CLASSES[name], text) for name, text in FIDELITIES.items()}


def make_fabric(name: str, env: simpy.Environment, capacity_bytes_per_s: np.ndarray,
                link_classes: bool = True) -> Fabric:
    """Build the fabric registered as ``name`` (``link_classes``: see :class:`FlowFabric`).

    :raises KeyError: naming the valid fidelities when ``name`` is unknown.
    """
    try:
        cls = FABRICS[name][0]
    except KeyError:
        raise KeyError(f"unknown fidelity {name!r}; choose one of {sorted(FABRICS)}") from None
    return cls(env, capacity_bytes_per_s, link_classes)


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (for benchmarks).

    ``run()`` without ``until`` processes the events in its own loop, the one of
    :meth:`simpy.Environment.step` written out, so the count costs no Python frame per
    event; :meth:`step` (and ``run(until)``, which goes through it) counts too."""

    def __init__(self, initial_time: float = 0):
        super().__init__(initial_time)
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()

    def run(self, until=None):
        if until is not None:
            return super().run(until)
        queue, pop, count = self._queue, heappop, 0
        try:
            while queue:
                self._now, _, _, event = pop(queue)
                count += 1
                callbacks, event.callbacks = event.callbacks, None
                for callback in callbacks:
                    callback(event)
                if not event._ok and not hasattr(event, "_defused"):
                    exc = type(event._value)(*event._value.args)    # as step() raises it
                    exc.__cause__ = event._value
                    raise exc
        finally:
            self.events_processed += count
        return None
