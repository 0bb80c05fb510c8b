"""Fabrics: how long bytes take to cross the cluster. One interface, several fidelities.

``Fabric.transfer(flow)`` returns a SimPy event that fires when the flow's bytes have
arrived (``transfer(flow, then)`` calls ``then(flow)`` instead, in the fabric's own step).
Collectives and the replay engine only ever call that (or ``start``, the same at once);
which fidelity answers is chosen by name from :data:`FABRICS`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush

import numpy as np
import simpy
from simpy.events import Event, Timeout

from ..choices import FIDELITIES
from ..sim import Tick
from ..uniques import distinct_where
from .active import FlowSet
from .bundle import Splitter, groups_of, incidence, instances, keeps_order, slowest_rate
from .maxmin import on_used_links, share_bandwidth
from .reduced import ClassSolver
from .solve import Composite, Solver, flow_key


@dataclass(slots=True)
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

    def fresh(self) -> Flow:
        """A copy not started yet: the same transfer, to start again (a planned flow is
        cached and started at every use). Its fields in their order (a class called with
        keywords builds a dict of them first), checked by ``tests/test_fabric.py``."""
        return Flow(self.size_bytes, self.links, self.coef, self.latency_s, self.max_rate,
                    self.label, self.wire_coef, self.parts)


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

    def deferred_samples(self) -> Sequence:
        """``samples`` as they are now, worked out where first read (a replay's timeline
        holds them; only outputs and studies read them)."""
        return list(self.samples)

    def transfer(self, flow: Flow, then: Callable[[Flow], None] | None = None):
        """Start ``flow`` now; the returned event fires (value: the flow) when it is done.

        With ``then``, no event: ``then(flow)`` is called in the step where the fabric
        finds the flow done (the step before that event would be processed), and None is
        returned; ``then`` may schedule events but not start flows. The flow starts as a
        SimPy process would (an urgent event at this instant, before any event of normal
        priority), without a process: :meth:`start` runs then."""
        done = Event(self.env) if then is None else then
        self.env.call_urgent(lambda _e: self._begin(flow, done))
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
        flow.start_s = self.env.now
        if flow.latency_s > 0:
            self.env.call_later(flow.latency_s, lambda _e: self._arrive(flow, done))
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
        flow.end_s = self.env.now
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
    links, where = distinct_where(flow.links, inverse=True) if index is None else index
    load = np.bincount(where, weights=flow.coef, minlength=len(links))
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

    The active flows are kept in connected sets (:mod:`simulator.network.active`): flows
    that share a link, directly or through others. Flows that share no link do not affect
    each other's rates (:mod:`simulator.network.maxmin`), so each set is solved when it
    changes (a flow arrives on its links, or one of its flows is done) and is left alone by
    the events of every other set. A flow that arrives on idle links (most flows of a
    parallel plan's step) is solved at once, alone; flows that join
    an active set at one instant are solved with it once, in one step after the last of
    them; a solve seen before is not done again (:mod:`simulator.network.solve`). SimPy
    learns only the next completion of all sets (SimGrid's next-event contract), from a
    heap of each set's earliest end, at that very instant. A flow's bytes and a link's
    counters change only where its rate or load changes (:mod:`simulator.network.counters`):
    the numbers do not depend on how many events the rest of the fabric has, and the
    counters are complete once no transfer is in flight (a transfer still moving counts up
    to its last change). Use when transfers overlap and contention matters (oversubscribed
    uplinks, concurrent collectives).

    With ``link_classes`` (the default) the solves and counters run on classes of links
    that no flow tells apart (:mod:`simulator.network.reduced`): the same rates, times and
    counters to the last bit, in time that follows the classes, not the links; the
    utilisation ``samples`` differ by a few ulps. False solves on every used link: cheaper
    for flows that start together and are solved a few times (``clustersim collective``),
    where refining the classes would cost what the solves do.
    """

    name = "flow"
    GROUPINGS = 256         # the groupings of split bundles remembered (:meth:`_groups_of`)

    def __init__(self, env: simpy.Environment, capacity_bytes_per_s: np.ndarray,
                 link_classes: bool = True):
        self._solver = (ClassSolver if link_classes else Solver)(
            np.asarray(capacity_bytes_per_s, dtype=float))
        super().__init__(env, capacity_bytes_per_s)
        self._sets: dict[int, FlowSet] = {}
        self._owner: dict[int, int] = {}            # per loaded slot: its set's id
        split = weakref.WeakMethod(self._split)     # no cycle fabric -> solver -> fabric
        self._solver.on_split(lambda src, new: split()(src, new))
        self._instances = Splitter()
        self._grouped: dict = {}                    # _groups_of, remembered
        self._last_id = 0
        self._arrivals = 0
        self._dirty: dict[int, FlowSet] = {}        # sets with arrivals not solved yet
        self._heap: list[tuple] = []                # (end, set id, set generation)
        self._armed: Tick | None = None
        self._armed_at = float("inf")
        self._groups: np.ndarray | None = None
        self._sample_at: float | None = None        # an instant whose sample is due
        self._mixes: list = []      # (instant, solutions then active): samples to be

    def _init_counters(self) -> None:
        """The counters live in the solver (per link, or per link class)."""

    @property
    def link_bytes(self) -> np.ndarray:
        return self._solver.per_link(self._solver.counters.wire)

    @property
    def link_occupancy_bytes(self) -> np.ndarray:
        return self._solver.per_link(self._solver.counters.occupancy)

    @property
    def link_class_count(self) -> int:
        """How many classes of equivalent links the solves run on (with ``link_classes``;
        else the links themselves)."""
        classes = getattr(self._solver, "classes", None)
        return len(self.capacity) if classes is None else classes.n

    @property
    def samples(self) -> list:
        if self._sample_at is not None:
            self._sample()
        if self._mixes:
            self._samples.extend(fractions(self._mixes, self._scale))
            self._mixes = []
        return self._samples

    @samples.setter
    def samples(self, value: list) -> None:
        self._samples = value

    def deferred_samples(self) -> Sequence:
        """``samples`` as they are now (the same rows), the noted instants' fractions summed
        only where first read: a replay's timeline holds them, and most runs never read
        them (a big step notes tens of thousands of instants). Nothing of the fabric is
        held, only the notes."""
        if self._sample_at is not None:
            self._sample()
        return LazySamples(list(self._samples), list(self._mixes), self._scale)

    def peak_fractions(self) -> np.ndarray:
        """Each link group's highest load over its capacity at any instant noted so far:
        the column maxima of ``samples``, taken one instant at a time (no rows kept; each
        instant's solutions added in order, as :func:`fractions` adds them)."""
        if self._sample_at is not None:
            self._sample()
        peak = np.zeros(len(self._scale))
        for _, row in self._samples:
            np.maximum(peak, row, out=peak)
        for _, solutions in self._mixes:
            load = np.zeros(len(self._scale))
            for solution in solutions:
                load += solution.group_load
            np.maximum(peak, load / self._scale, out=peak)
        return peak

    def track(self, group_of_link: np.ndarray, n_groups: int) -> None:
        """Record, at each instant where some set changes, the load of each link group as
        a fraction of the group's capacity (``samples``: list of (time_s, fractions), the
        fractions read-only rows of one array; the solutions of each instant are noted as
        it passes and summed when ``samples`` is read)."""
        self._groups = np.asarray(group_of_link, dtype=np.int64)
        capacity = np.bincount(self._groups, weights=self.capacity, minlength=n_groups)
        self._scale = np.maximum(capacity, 1e-300)
        self._solver.track(self._groups, n_groups, self._scale)

    # ------------------------------------------------------------ arrivals
    def _move(self, flow: Flow, done) -> None:
        now = self.env.now
        self._due(now)
        key = flow_key(flow)
        slots = self._solver.slots(flow, key)
        owner = self._owner
        hit = {owner[k] for k in slots if k in owner}
        self._arrivals += 1
        if hit:
            s = self._merge(sorted(hit))
            s.add(flow, key, done, (self._arrivals,), now)
        else:
            self._last_id += 1
            s = self._sets[self._last_id] = FlowSet.alone(self._last_id, flow, key, done,
                                                          (self._arrivals,), now)
        for k in slots:
            owner[k] = s.id
        s.owned.update(slots)
        if not hit:     # on idle links: solved at once, alone (what _refresh does with a
            # new set: nothing has ended, no loads are held)
            for p, solution in self._solve(s, now):
                p.segments = [(solution, now)]
            self._arm()
            return
        if not self._dirty:
            Timeout(self.env, 0).callbacks.append(self._solve_arrivals)
        self._dirty[s.id] = s

    def _merge(self, ids: list[int]) -> FlowSet:
        """The sets ``ids`` made one (the first's id; ids in ascending order)."""
        target = self._sets[ids[0]]
        owner = self._owner
        others = []
        for i in ids[1:]:
            other = self._sets.pop(i)
            self._dirty.pop(i, None)
            for k in other.owned:
                owner[k] = target.id
            others.append(other)
        if others:
            target.absorb(others)
        target.generation += 1
        return target

    def _solve_arrivals(self, _event) -> None:
        now = self.env.now
        self._due(now)
        dirty, self._dirty = self._dirty, {}
        finished: list = []
        for s in dirty.values():
            self._refresh(s, now, finished)
        self._done(finished)
        self._arm()

    # ------------------------------------------------------------ completions
    def _arm(self) -> None:
        """Make the next event of the fabric fire at the earliest end of any set."""
        heap, sets = self._heap, self._sets
        while heap:
            _, set_id, generation = heap[0]
            s = sets.get(set_id)
            if s is not None and s.generation == generation:
                break
            heappop(heap)
        if not heap or heap[0][0] >= self._armed_at:
            return
        at = max(heap[0][0], self.env.now)
        self._armed, self._armed_at = self.env.call_at(at, self._complete), at

    def _complete(self, event) -> None:
        if event is not self._armed:
            return              # an earlier end was armed since
        self._armed, self._armed_at = None, float("inf")
        now = self.env.now
        heap, sets = self._heap, self._sets
        due = []
        while heap and heap[0][0] <= now:
            _, set_id, generation = heappop(heap)
            s = sets.get(set_id)
            if s is not None and s.generation == generation:
                due.append(s)
        if due:
            self._due(now)
            finished: list = []
            for s in due:
                self._refresh(s, now, finished)
            self._done(finished)
        self._arm()

    def _done(self, finished: list) -> None:
        """Finish the flows done at this instant, in order of arrival."""
        if len(finished) > 1:
            finished.sort(key=lambda item: item[0])
        for _, flow, done in finished:
            self._finish(flow, done)

    # ------------------------------------------------------------ solves
    def _refresh(self, s: FlowSet, now: float, finished: list) -> None:
        """Set ``s`` changed at ``now`` (arrivals, or flows whose end has come): drop what
        is done, solve the rest (cut where it is no longer connected), and count.

        A flow done leaves its slots to its set until the set is solved unconnected or
        ends (so a flow arriving there meanwhile joins it, and the solve cuts it off)."""
        done, gone = s.settle(now)
        finished.extend(done)
        old = s.segments
        if gone:
            s.drop(gone)
            if not len(s):
                del self._sets[s.id]
                s.generation += 1
                owner = self._owner
                for k in s.owned:
                    del owner[k]
                counters = self._solver.counters
                for solution, since in old:
                    if since is not None:
                        counters.close(solution, since, now)
                held = [solution for solution, since in old if since is None]
                if held:
                    counters.change(held, [], now)
                return
        if old:
            self._hold_segments(s)
        solved = self._solve(s, now)
        if old:
            self._solver.counters.change([solution for solution, _ in s.segments],
                                         [solution for _, solution in solved], now)
            for p, solution in solved:
                p.segments = [(solution, None)]
        else:
            for p, solution in solved:
                p.segments = [(solution, now)]

    def _solve(self, s: FlowSet, now: float) -> list[tuple]:
        """Solve ``s``, splitting bundles that stop being identical: (set, solution) per
        connected set it holds (the solve tells them apart: it is cut there); each timed."""
        while True:
            solution, split = self._solver.solve(s.flows, tuple(s.keys))
            if solution is not None:
                break
            self.splits += s.split(split, self._instances,
                                  self._groups_of(s.flows, tuple(s.keys), split))
        self.solves += 1
        pairs = self._cut(s, solution) if isinstance(solution, Composite) else [(s, solution)]
        for p, part in pairs:
            p.generation += 1
            end = p.apply(part.rate_list, now)
            if end < float("inf"):
                heappush(self._heap, (end, p.id, p.generation))
        return pairs

    def _cut(self, s: FlowSet, solution) -> list[tuple]:
        """``s`` cut into the connected sets of ``solution`` (a
        :class:`~simulator.network.solve.Composite`; the first keeps the id): (set, its
        part of the solution) each; slots no flow of any of them crosses are let go."""
        owner, slots = self._owner, self._solver.slots
        pairs = []
        for k, (index, part) in enumerate(zip(solution.index, solution.parts)):
            if k == 0:
                part_id = s.id
            else:
                self._last_id += 1
                part_id = self._last_id
            p = s.part(index, part_id)
            if k == 0:      # stale heap entries of ``s`` name its id and generation
                p.segments, p.generation = s.segments, s.generation
            for flow, key in zip(p.flows, p.keys):
                p.owned.update(slots(flow, key))
            for k2 in p.owned:
                owner[k2] = part_id
            self._sets[part_id] = p
            pairs.append((p, part))
        for k in s.owned.difference(*(p.owned for p, _ in pairs)):
            del owner[k]
        return pairs

    def _groups_of(self, flows: list, keys: tuple, split: np.ndarray) -> dict:
        """Per bundle marked in ``split`` (by position; ``keys``: the flows'
        :func:`~simulator.network.solve.flow_key`), its instances grouped by their rate
        in a solve of ``flows`` with those bundles cut into instances, where there are
        several groups and their bundles keep each link's terms in order
        (:func:`~simulator.network.bundle.keeps_order`); the others are cut into
        instances. A group is a bundle again, which the solve checks as any other: the
        instances of a collective split by an uneven placement (a few kinds of
        position, thousands of instances) move as a few flows, not thousands. Remembered
        by the flows' keys and ``split`` (the same sets split at every layer and
        micro-batch: 93 splits of 5 distinct sets in a replay of TP16 x CP2 x FSDP on
        32,768 GPUs), the entry holding the flows' arrays, as a remembered solve does."""
        key = (keys, split.tobytes())
        hit = self._grouped.get(key)
        if hit is not None:
            return hit[1]
        out = self._grouping(flows, split)
        if len(self._grouped) >= self.GROUPINGS:
            self._grouped.pop(next(iter(self._grouped)))
        self._grouped[key] = ([(f.links, f.coef, f.wire_coef, f.parts) for f in flows], out)
        return out

    def _grouping(self, flows: list, split: np.ndarray) -> dict:
        """:meth:`_groups_of`, worked out."""
        flat, owner = [], []
        for i, f in enumerate(flows):
            parts = instances(f) if split[i] else [f]
            flat.extend(parts)
            owner.extend([i] * len(parts))
        inc, links = on_used_links(incidence(flat), len(self.capacity))
        rates, owner = share_bandwidth(inc, self.capacity[links]), np.array(owner)
        out = {}
        for i in np.flatnonzero(split).tolist():
            groups = groups_of(rates[owner == i])
            if 1 < len(groups) and keeps_order(flows[i], groups):
                out[i] = groups
        return out

    def _split(self, src: np.ndarray, new: np.ndarray) -> None:
        """Slots ``src`` give links to slots ``new``: the sets that load them write their
        loads per slot (the split copies them), and own the new slots too."""
        owner = self._owner
        for k, n in zip(src.tolist(), new.tolist()):
            set_id = owner.get(k)
            if set_id is not None:
                s = self._sets[set_id]
                self._hold_segments(s)
                owner[n] = set_id
                s.owned.add(n)

    def _hold_segments(self, s: FlowSet) -> None:
        counters = self._solver.counters
        for i, (solution, since) in enumerate(s.segments):
            if since is not None:
                counters.hold(solution, since)
                s.segments[i] = (solution, None)

    # ------------------------------------------------------------ samples
    def _due(self, now: float) -> None:
        """Something may change at ``now``: take the sample of the last instant that
        changed, before it does."""
        if self._groups is None:
            return
        if self._sample_at is not None and self._sample_at != now:
            self._sample()
        self._sample_at = now

    def _sample(self) -> None:
        """Note the solutions active at the instant due (summed when read)."""
        self._mixes.append((self._sample_at, [solution for s in self._sets.values()
                                              for solution, _ in s.segments]))
        self._sample_at = None


class LazySamples(Sequence):
    """A fabric's utilisation samples (``(time_s, fractions)`` rows), the rows it had plus
    :func:`fractions` of the instants noted since, worked out when first read."""

    __slots__ = ("_done", "_mixes", "_scale", "_rows")

    def __init__(self, done: list, mixes: list, scale: np.ndarray | None):
        self._done, self._mixes, self._scale = done, mixes, scale
        self._rows: list | None = None

    def _list(self) -> list:
        if self._rows is None:
            self._rows = self._done + (fractions(self._mixes, self._scale)
                                       if self._mixes else [])
            self._done = self._mixes = None
        return self._rows

    def __len__(self) -> int:
        return len(self._list())

    def __getitem__(self, index):
        return self._list()[index]

    def __iter__(self):
        return iter(self._list())

    def __eq__(self, other) -> bool:
        """Row by row: the same instants and the same fractions (arrays compared whole)."""
        if not isinstance(other, (list, LazySamples)):
            return NotImplemented
        mine, theirs = self._list(), list(other)
        return len(mine) == len(theirs) and all(
            t == u and np.array_equal(f, g) for (t, f), (u, g) in zip(mine, theirs))

    def __repr__(self) -> str:
        return f"LazySamples({self._list()!r})"


def fractions(mixes: list, scale: np.ndarray) -> list:
    """(instant, load per link group over its capacity ``scale``) of each mix (instant,
    solutions): its solutions' group loads added in order, as one addition after another
    would, for all mixes at once (a mix of fewer solutions adds zeros, which change no
    float)."""
    rows = {}                   # id of a solution -> its row (0: no load)
    loads = [np.zeros(len(scale))]
    flat, lengths = [], []      # the mixes' rows one after another, and how many each
    for _, solutions in mixes:
        lengths.append(len(solutions))
        for solution in solutions:
            row = rows.get(id(solution))
            if row is None:
                row = rows[id(solution)] = len(loads)
                loads.append(solution.group_load)
            flat.append(row)
    width = max(1, max(lengths))
    index = np.zeros((len(mixes), width), np.int64)
    # each mix's rows at the start of its line (a mask fills in row-major order)
    index[np.arange(width) < np.array(lengths)[:, None]] = flat
    stacked = np.array(loads)
    load = stacked[index[:, 0]]
    for k in range(1, width):
        load += stacked[index[:, k]]
    fraction = load / scale
    fraction.setflags(write=False)
    return [(t, row) for (t, _), row in zip(mixes, fraction)]


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
