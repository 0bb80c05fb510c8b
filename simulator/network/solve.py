"""The flow fabric's re-solve, remembered: the rates and link loads of a set of flows.

Every arrival or completion re-solves the max-min rates of a connected set of active flows
(the fabric keeps them so, :mod:`simulator.network.active`). One iteration of a training
step repeats the same few sets many times (each micro-batch's collectives and
sends, one after another; a cached plan's flow recurs with the very same arrays), so a
solve is remembered by the identity of its flows' arrays (links, coefficients, wire bytes,
instances) and rate caps (:func:`flow_key`), for the last :data:`Solver.REMEMBERED` sets
seen. A remembered solve holds its flows' arrays, so while it is remembered no other array
can have their ids: a key that matches is those very arrays, with no further check.

A mix of flows in sets that share no link (a TP collective inside one server, a ring over
the NICs of one rail, a send between two stages: all active flows at once, as the plain-loop
reference in the tests solves them, or a set that a bundle's split leaves unconnected) is
solved set by set, :func:`connected`: each set's rates are those of the solve of all flows
to the last bit (:mod:`simulator.network.maxmin`), and each set is remembered by its own
flows' keys, so a new mix of sets seen before solves nothing; the result is a
:class:`Composite` of the sets' solutions.

The solve runs on the links the flows cross only (renumbered,
:func:`~simulator.network.maxmin.on_used_links`), and loads are kept sparse: those links
(sorted), with the capacity taken and the bytes crossing each per second. Adding them to
the counters link by link (:mod:`simulator.network.counters`), or summing them per link
group, gives the same numbers as the dense vectors would (the other links only add zeros).
:class:`Solver` is the solve on every
used link: what ``clustersim collective`` runs (flows that start together, solved a few
times); a replay solves on link classes (:mod:`simulator.network.reduced`), which must
give the same rates to the last bit (tests/test_link_classes.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..uniques import distinct_below
from .bundle import incidence
from .counters import Counters
from .maxmin import on_used_links, share_bandwidth_checked


@dataclass(frozen=True)
class Solution:
    """Rates (payload bytes/s, one per flow), and the load of the links they cross.

    ``fraction`` is ``group_load`` over each group's capacity (the fabric's utilisation
    sample), where the solver was given the groups' capacities; ``rate_list`` the rates as
    Python floats (the fabric's few active flows advance faster so than as an array)."""

    rates: np.ndarray
    links: np.ndarray          # link ids (class ids for a ClassSolver), sorted, each once
    occupancy: np.ndarray      # capacity taken on each (each link of a class), bytes/s
    wire: np.ndarray           # bytes/s crossing each
    group_load: np.ndarray | None = None    # capacity taken per link group, bytes/s
    fraction: np.ndarray | None = None      # group_load / the group's capacity
    rate_list: list = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate_list", self.rates.tolist())

    @property
    def parts(self) -> tuple:
        """The solutions of its connected sets of flows: itself (one set)."""
        return (self,)


class Composite:
    """The solution of flows in several connected sets (no link shared between sets):
    each set's own :class:`Solution` (``parts``, by the set's first flow) and its flows
    (``index``: their positions, ascending, per part), the rates in flow order, and the
    group load summed over the sets (where the solver sums them).
    ``rates``, ``links``, ``occupancy`` and ``wire`` as one :class:`Solution` has them are
    built when asked for (the fabric reads ``rate_list``, ``fraction`` and ``parts``, and
    ``rates`` where a rate is 0)."""

    __slots__ = ("parts", "index", "rate_list", "group_load", "fraction", "_rates",
                 "_merged")

    def __init__(self, parts: tuple, index: tuple, rate_list: list, group_load, fraction):
        self.parts, self.index, self.rate_list = parts, index, rate_list
        self.group_load, self.fraction = group_load, fraction
        self._rates = self._merged = None

    @property
    def rates(self) -> np.ndarray:
        if self._rates is None:
            self._rates = np.array(self.rate_list, float)
            self._rates.setflags(write=False)
        return self._rates

    def _merge(self) -> tuple:
        if self._merged is None:
            links = np.concatenate([p.links for p in self.parts])
            order = np.argsort(links, kind="stable")
            self._merged = tuple(a[order] for a in (
                links, np.concatenate([p.occupancy for p in self.parts]),
                np.concatenate([p.wire for p in self.parts])))
            for a in self._merged:
                a.setflags(write=False)
        return self._merged

    @property
    def links(self) -> np.ndarray:
        return self._merge()[0]

    @property
    def occupancy(self) -> np.ndarray:
        return self._merge()[1]

    @property
    def wire(self) -> np.ndarray:
        return self._merge()[2]


_NO_SPLIT: dict[int, np.ndarray] = {}


def _no_split(n: int) -> np.ndarray:
    """``n`` False, read-only (one array per length, shared by every remembered solve)."""
    found = _NO_SPLIT.get(n)
    if found is None:
        found = _NO_SPLIT[n] = np.zeros(n, bool)
        found.setflags(write=False)
    return found


def connected(footprints: list) -> list[list[int]]:
    """The flows (by index) in sets that share no link: two flows are in one set when they
    cross a link in common, directly or through others of the set (``footprints``: per
    flow, the set of what it crosses). Each set in index order, the sets by first index.

    A union-find over what is crossed: each link names the first flow that crossed it, a
    later flow crossing it joins that flow's set, and a set is named by its lowest flow
    index; the work is the footprints' total size (comparing each flow with every set found
    so far was quadratic in the flows where thousands share nothing)."""
    parent = list(range(len(footprints)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    first: dict = {}            # what is crossed -> the first flow that crossed it
    for i, footprint in enumerate(footprints):
        for x in footprint:
            j = first.setdefault(x, i)
            if j != i:
                a, b = root(i), root(j)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    sets: dict[int, list[int]] = {}
    for i in range(len(footprints)):
        sets.setdefault(root(i), []).append(i)
    return list(sets.values())


def _arrays(flow) -> tuple:
    return flow.links, flow.coef, flow.wire_coef, flow.parts


def flow_key(flow) -> tuple:
    """What a remembered solve knows ``flow`` by: its rate cap and its arrays' ids."""
    return (flow.max_rate, id(flow.links), id(flow.coef), id(flow.wire_coef), id(flow.parts))


class Solver:
    """Max-min solves of a fabric's active flows, the last few remembered; per-link
    counters (``counters``, indexed like a solution's ``links``)."""

    REMEMBERED = 256

    def __init__(self, capacity: np.ndarray):
        self.capacity = capacity
        self._groups: np.ndarray | None = None
        self._n_groups = 0
        self._scale: np.ndarray | None = None
        self._memo: dict = {}
        self._sets: dict = {}        # the solves of connected sets, by their flows' keys
        self._slots: dict = {}       # slots() by links array
        self._checked = False
        empty = np.zeros(0)
        self.idle = Solution(empty, np.zeros(0, np.int64), empty, empty, None)
        self.counters = Counters(len(capacity))

    def per_link(self, counter: np.ndarray) -> np.ndarray:
        """A counter (``counters.occupancy``, ``counters.wire``) per link of the fabric."""
        return counter

    def slots(self, flow, key: tuple) -> frozenset:
        """The slots ``flow`` loads (here its links; ``key``: its :func:`flow_key`),
        remembered by its links array for the last few flows."""
        hit = self._slots.get(key[1])
        if hit is None:
            if len(self._slots) >= self.REMEMBERED:
                self._slots.pop(next(iter(self._slots)))
            hit = self._slots[key[1]] = (flow.links, self._link_set(flow))
        return hit[1]

    def on_split(self, callback) -> None:
        """Call ``callback(src, new)`` before slots ``src`` give links to slots ``new``
        (links never split: never called here)."""

    def track(self, group_of_link: np.ndarray, n_groups: int,
              scale: np.ndarray | None = None) -> None:
        """Also sum each solution's load per link group (``group_of_link[i]``: link i's),
        and divide it by ``scale`` (per group: its capacity) where given."""
        self._groups, self._n_groups, self._scale = group_of_link, n_groups, scale
        self._memo.clear()
        self._sets.clear()
        self.idle = self._solution(self.idle.rates, self.idle.links, self.idle.occupancy,
                                   self.idle.wire, np.zeros(n_groups))

    def _solution(self, rates, links, occupancy, wire, group) -> Solution:
        fraction = None
        if group is not None and self._scale is not None:
            fraction = group / self._scale
            fraction.setflags(write=False)
        return Solution(rates, links, occupancy, wire, group, fraction)

    def solve(self, flows: list,
              keys: tuple | None = None) -> tuple[Solution | Composite | None, np.ndarray]:
        """(solution, split): the rates of ``flows`` and their loads; None and the
        bundles to split (:func:`~simulator.network.maxmin.share_bandwidth_checked`) when
        some bundle's instances would not freeze together. ``keys``: the flows'
        :func:`flow_key`, where the caller keeps them."""
        ids = tuple(map(flow_key, flows)) if keys is None else keys
        hit = self._memo.get(ids)
        if hit is not None and hit[2] == self._stamp():
            return hit[1], _no_split(len(flows))
        if not self._checked:       # share_bandwidth's check, once for the whole fabric
            if np.any(self.capacity <= 0):
                raise ValueError("every link capacity must be > 0")
            self._checked = True
        out, split = self._compute(flows, ids)
        if out is None:
            return None, split
        if len(self._memo) >= self.REMEMBERED:
            self._memo.pop(next(iter(self._memo)))
        self._memo[ids] = ([_arrays(f) for f in flows], out, self._stamp())
        return out, split

    def _stamp(self) -> int:
        """What a remembered solution is valid for (the link numbering never changes)."""
        return 0

    def _compute(self, flows: list, keys: tuple) -> tuple[Solution | Composite | None,
                                                          np.ndarray]:
        """The solve of each connected set of ``flows`` alone (:func:`connected`): the
        same rates, to the last bit, as the solve of all of them (a link's share depends on
        the flows that cross it only, :mod:`simulator.network.maxmin`). A set is
        remembered by its flows' keys, so a new mix of sets seen before solves nothing."""
        held = self._held(flows, keys)
        sets = connected(self._footprints(flows, held)) if len(flows) > 1 else None
        if sets is None or len(sets) == 1:
            return self._compute_one(flows, held)
        stamp, memo = self._stamp(), self._sets
        parts, split = [], None
        for index in sets:
            set_keys = tuple([keys[i] for i in index])
            hit = memo.get(set_keys)
            if hit is not None and hit[2] == stamp:
                parts.append((index, hit[1]))
                continue
            subset = [flows[i] for i in index]
            out, cut = self._compute_one(subset, [held[i] for i in index])
            if out is None:
                if split is None:
                    split = np.zeros(len(flows), bool)
                split[index] = cut
                continue
            if len(memo) >= self.REMEMBERED:
                memo.pop(next(iter(memo)))
            memo[set_keys] = ([_arrays(f) for f in subset], out, stamp)
            parts.append((index, out))
        if split is not None:
            return None, split
        return self._composite(len(flows), parts), _no_split(len(flows))

    def _held(self, flows: list, keys: tuple) -> list:
        """Per flow, what :meth:`_footprints` and :meth:`_compute_one` take of it."""
        return flows

    def _footprints(self, flows: list, held: list) -> list[frozenset]:
        """Per flow, the links it crosses."""
        return [self._link_set(f) for f in flows]

    def _link_set(self, flow) -> frozenset:
        """The links ``flow`` crosses, each once (made from its distinct ids, not from
        every entry: a huge flow has several entries per link, and a Python int each in
        between would take hundreds of MB)."""
        return frozenset(distinct_below(flow.links, len(self.capacity)).tolist())

    def _composite(self, n: int, parts: list) -> Composite:
        """The solutions of ``parts`` ((flow indices, Solution) per set) as one."""
        rate_list = [0.0] * n
        for index, out in parts:
            for i, rate in zip(index, out.rate_list):
                rate_list[i] = rate
        group = fraction = None
        if self._groups is not None:
            group = parts[0][1].group_load + parts[1][1].group_load
            for _, out in parts[2:]:
                group += out.group_load
            group.setflags(write=False)
            if self._scale is not None:
                fraction = group / self._scale
                fraction.setflags(write=False)
        return Composite(tuple(out for _, out in parts), tuple(index for index, _ in parts),
                         rate_list, group, fraction)

    def _compute_one(self, flows: list, held: list) -> tuple[Solution | None, np.ndarray]:
        """The solve of one connected set of flows."""
        inc, links = on_used_links(incidence(flows), len(self.capacity))
        rates, split = share_bandwidth_checked(inc, self.capacity[links])
        if split.any():
            return None, split
        return self._loads(flows, inc, links, rates), split

    def _loads(self, flows: list, inc, links: np.ndarray, rates: np.ndarray) -> Solution:
        n = len(links)
        owner_rate = np.repeat(rates, np.diff(inc.ptr))
        occupancy = np.bincount(inc.link, weights=inc.coef * owner_rate, minlength=n)
        if all(f.wire_coef is None for f in flows):
            wire = inc.coef
        elif len(flows) == 1:       # its own array, not a copy (a huge flow's is large)
            wire = flows[0].wire_coef
        else:
            wire = np.concatenate([f.coef if f.wire_coef is None else f.wire_coef
                                   for f in flows])
        wire_load = np.bincount(inc.link, weights=wire * owner_rate, minlength=n)
        group = None
        if self._groups is not None:
            group = np.bincount(self._groups[links], weights=occupancy,
                                minlength=self._n_groups)
        for a in (rates, links, occupancy, wire_load):
            a.setflags(write=False)
        return self._solution(rates, links, occupancy, wire_load, group)
