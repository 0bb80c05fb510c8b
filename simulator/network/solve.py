"""The flow fabric's re-solve, remembered: the rates and link loads of a set of flows.

Every arrival or completion re-solves the max-min rates of the active flows. One iteration
of a training step repeats the same few sets many times (each micro-batch's collectives and
sends, one after another; a cached plan's flow recurs with the very same arrays), so a
solve is remembered by the identity of its flows' arrays (links, coefficients, wire bytes,
instances) and rate caps (:func:`flow_key`), for the last :data:`Solver.REMEMBERED` sets
seen. A remembered solve holds its flows' arrays, so while it is remembered no other array
can have their ids: a key that matches is those very arrays, with no further check.

The solve runs on the links the flows cross only (renumbered,
:func:`~simulator.network.maxmin.on_used_links`), and loads are kept sparse: those links
(sorted), with the capacity taken and the bytes crossing each per second. Adding them to
the counters link by link (:mod:`simulator.network.counters`), or summing them per link
group, gives the same numbers as the dense vectors would (the other links only add zeros).
:class:`Solver` is the solve on every
used link, the reference for the one on link classes (:mod:`simulator.network.reduced`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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


_NO_SPLIT: dict[int, np.ndarray] = {}


def _no_split(n: int) -> np.ndarray:
    """``n`` False, read-only (one array per length, shared by every remembered solve)."""
    found = _NO_SPLIT.get(n)
    if found is None:
        found = _NO_SPLIT[n] = np.zeros(n, bool)
        found.setflags(write=False)
    return found


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
        self._checked = False
        empty = np.zeros(0)
        self.idle = Solution(empty, np.zeros(0, np.int64), empty, empty, None)
        self.counters = Counters(len(capacity))

    def per_link(self, counter: np.ndarray) -> np.ndarray:
        """A counter (``counters.occupancy``, ``counters.wire``) per link of the fabric."""
        return counter

    def track(self, group_of_link: np.ndarray, n_groups: int,
              scale: np.ndarray | None = None) -> None:
        """Also sum each solution's load per link group (``group_of_link[i]``: link i's),
        and divide it by ``scale`` (per group: its capacity) where given."""
        self._groups, self._n_groups, self._scale = group_of_link, n_groups, scale
        self._memo.clear()
        self.idle = self._solution(self.idle.rates, self.idle.links, self.idle.occupancy,
                                   self.idle.wire, np.zeros(n_groups))

    def _solution(self, rates, links, occupancy, wire, group) -> Solution:
        fraction = None
        if group is not None and self._scale is not None:
            fraction = group / self._scale
            fraction.setflags(write=False)
        return Solution(rates, links, occupancy, wire, group, fraction)

    def solve(self, flows: list,
              keys: tuple | None = None) -> tuple[Solution | None, np.ndarray]:
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

    def _compute(self, flows: list, keys: tuple) -> tuple[Solution | None, np.ndarray]:
        inc, links = on_used_links(incidence(flows), len(self.capacity))
        rates, split = share_bandwidth_checked(inc, self.capacity[links])
        if split.any():
            return None, split
        return self._loads(flows, inc, links, rates), split

    def _loads(self, flows: list, inc, links: np.ndarray, rates: np.ndarray) -> Solution:
        n = len(links)
        owner_rate = np.repeat(rates, np.diff(inc.ptr))
        occupancy = np.bincount(inc.link, weights=inc.coef * owner_rate, minlength=n)
        wire = inc.coef if all(f.wire_coef is None for f in flows) else np.concatenate(
            [f.coef if f.wire_coef is None else f.wire_coef for f in flows])
        wire_load = np.bincount(inc.link, weights=wire * owner_rate, minlength=n)
        group = None
        if self._groups is not None:
            group = np.bincount(self._groups[links], weights=occupancy,
                                minlength=self._n_groups)
        for a in (rates, links, occupancy, wire_load):
            a.setflags(write=False)
        return self._solution(rates, links, occupancy, wire_load, group)
