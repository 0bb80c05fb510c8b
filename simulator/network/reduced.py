"""The fabric's solve on link classes: its cost follows the classes, not the links.

:class:`ClassSolver` is :class:`~simulator.network.solve.Solver` with every flow restricted
to one link of each class it crosses (:mod:`simulator.network.orbits`). Each class then
stands for links whose loads are the same floats in every round of progressive filling
(the same capacities, the same entries in the same order), so the rates are those of the
solve on every link, to the last bit, and so are the per-link loads and counters, kept once
per class. A bundle's split check (:func:`~simulator.network.maxmin.share_bandwidth_checked`:
do all its instances reach a full link in the same round?) looks at classes too: a class
every instance crosses hits all of them when full; for a class only some instances cross,
the restriction keeps which.

The one sum that is not the same float is each link group's load (``group_load``, the
utilisation samples): per link, in link order, on the whole fabric; here per class, times
the class's size. Its relative difference is a few ulps of the sum (bounded in the tests).
"""

from __future__ import annotations

import numpy as np

from .maxmin import FlowIncidence, renumbered, share_bandwidth_split
from .orbits import LinkClasses
from .solve import Solution, Solver


class ClassSolver(Solver):
    """Max-min solves on link classes; counters per class (``per_link`` expands them).

    A solution here is a few numbers per class, not per link, so many more are remembered
    (a big step meets hundreds of distinct connected sets of flows,
    :mod:`simulator.network.active`). A connected set not seen
    before is often one seen on other classes (the same transfers of another stage or
    server): the solve on local classes is remembered by what it is made of (each flow's
    content, :attr:`~simulator.network.orbits.Restricted.token`; which entries share a
    class; the rate caps), and only the classes and group loads are its own (many solves
    of one set share a few such shapes). Two flows share a class
    only where they share its every link (the partition's invariant), so the sets connected
    by classes are the sets connected by links: the fabric keeps its sets by the classes
    each flow crosses (:meth:`slots`)."""

    REMEMBERED = 16384

    def __init__(self, capacity: np.ndarray):
        super().__init__(capacity)
        self._shapes: dict = {}
        self.classes = LinkClasses(capacity)
        self.counters = self.classes.counters

    def per_link(self, counter: np.ndarray) -> np.ndarray:
        return self.classes.per_link(counter)

    def slots(self, flow, key: tuple) -> frozenset:
        return self.classes.footprint(flow, key)

    def on_split(self, callback) -> None:
        self.classes.before_split = callback

    def track(self, group_of_link: np.ndarray, n_groups: int,
              scale: np.ndarray | None = None) -> None:
        super().track(group_of_link, n_groups, scale)
        self.classes.split_by_group(group_of_link)

    def _stamp(self) -> int:
        return self.classes.version

    def _held(self, flows: list, keys: tuple) -> list:
        return self.classes.restricted(flows, keys)

    def _footprints(self, flows: list, held: list) -> list[frozenset]:
        return [r.footprint for r in held]

    def _compute_one(self, flows: list, rs: list) -> tuple[Solution | None, np.ndarray]:
        classes, local = renumbered(np.concatenate([r.links for r in rs]), self.classes.n)
        max_rate = np.array([f.max_rate for f in flows], float)
        # what the solve on local classes is made of: each flow's content (token), which
        # entries share a class, the caps (the split check's data follows from them too)
        shape = (tuple(r.token for r in rs), local.tobytes(), max_rate.tobytes())
        loads = self._shapes.get(shape)
        if loads is None:
            loads = _loads(rs, local, self.classes.capacity[classes], max_rate,
                           _pairs(rs, classes) if any(len(r.pair_class) for r in rs) else None)
            if len(self._shapes) >= self.REMEMBERED:
                self._shapes.pop(next(iter(self._shapes)))
            self._shapes[shape] = loads
        rates, split, occupancy, wire_load = loads
        if split.any():
            return None, split.copy()
        group = None
        if self._groups is not None:
            group = np.bincount(self.classes.group[classes],
                                weights=occupancy * self.classes.count[classes],
                                minlength=self._n_groups)
        classes.setflags(write=False)
        return self._solution(rates, classes, occupancy, wire_load, group), split


def _loads(rs: list, local: np.ndarray, capacity: np.ndarray, max_rate: np.ndarray,
           pairs) -> tuple:
    """(rates, split, occupancy, wire load) of the solve of ``rs`` on classes numbered 0..
    (``local``; ``capacity`` per local class; ``pairs``: :func:`_pairs`), read-only."""
    lengths = [len(r.links) for r in rs]
    coef = np.concatenate([r.coef for r in rs])
    wire = np.concatenate([r.wire for r in rs])
    ptr = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=ptr[1:])
    inc = FlowIncidence(ptr, local, coef, max_rate)
    check = None if pairs is None else _partly_full_check(inc, *pairs)
    rates, split = share_bandwidth_split(inc, capacity, check)
    owner_rate = np.repeat(rates, lengths)
    n = len(capacity)
    occupancy = np.bincount(local, weights=coef * owner_rate, minlength=n)
    wire_load = np.bincount(local, weights=wire * owner_rate, minlength=n)
    for a in (rates, split, occupancy, wire_load):
        a.setflags(write=False)
    return rates, split, occupancy, wire_load


def _pairs(rs: list, classes: np.ndarray) -> tuple:
    """What the split check needs of the restricted flows, by local class: per entry,
    whether every instance crosses its class; per flow, its instances and where they
    start in a numbering over all flows; per (class, instance) pair, the local class and
    the instance in that numbering. All of it follows from the flows' tokens (their pairs
    and ``whole`` by index into their classes, ``n_parts``) and their local classes."""
    whole = np.concatenate([r.whole for r in rs])
    n_parts = np.array([r.n_parts for r in rs], np.int64)
    offset = np.zeros(len(rs) + 1, np.int64)
    np.cumsum(n_parts, out=offset[1:])
    pair_local = np.concatenate([np.searchsorted(classes, r.pair_class) for r in rs])
    pair_key = np.concatenate([offset[i] + r.pair_part for i, r in enumerate(rs)])
    return whole, n_parts, offset, pair_local, pair_key


def _partly_full_check(inc: FlowIncidence, whole: np.ndarray, n_parts: np.ndarray,
                       offset: np.ndarray, pair_local: np.ndarray, pair_key: np.ndarray):
    """The split check on classes (:func:`_pairs`): per flow, do some instances but not all
    cross a full class (``full``: per local class)?"""
    n = inc.n_flows
    owner = np.repeat(np.arange(n), np.diff(inc.ptr))

    def partly(full: np.ndarray) -> np.ndarray:
        out = np.zeros(n, bool)
        hit = full[pair_local]
        if not hit.any():
            return out          # no instance hit apart from its bundle's others
        all_hit = np.zeros(n, bool)
        all_hit[owner[full[inc.link] & whole]] = True
        # per flow, how many of its instances cross a full class (each counted once: an
        # instance may cross several); a mark per instance, summed per flow's span (every
        # flow has at least one instance, so no span is empty)
        instance_hit = np.zeros(offset[-1], bool)
        instance_hit[pair_key[hit]] = True
        count = np.add.reduceat(instance_hit, offset[:-1], dtype=np.int64)
        return ~all_hit & (count > 0) & (count < n_parts)

    return partly
