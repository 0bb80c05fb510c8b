"""Max-min fair sharing of link bandwidth among flows: a pure function, no SimPy.

A *flow* here is SimGrid's "action": one rate variable that consumes capacity on several
links, ``coef`` bytes on link ``l`` for each payload byte. A plain point-to-point flow has
coefficient 1 on each link of its route; a pipelined ring collective is one flow whose
coefficient on a link is the number of ring edges (divided by the channel count) that cross
it, so every edge of the ring advances at the same rate, as a pipeline does.

The allocation is the max-min fair one (progressive filling): all unfrozen flows grow at the
same pace; when a link fills, the flows crossing it freeze; repeat. It is the unique rate
vector in which no flow can gain without taking from a flow that has no more than it has.
Each round computes every link's *share* (the capacity its frozen flows left, over its
active flows' coefficients); the least share, or rate cap, is the next level, and the flows
of that link (or cap) freeze at it. A share depends on nothing but the flows that cross the
link, so flows in sets that share no link get the same rates, to the last bit, solved
together or each set alone (the fabric solves and remembers each set by itself,
:mod:`simulator.network.solve`); the rates are the exact allocation's to a few ulps
(tested against rational arithmetic).

A flow may stand for several identical *instances* (the groups of one collective, the
members of one send): ``part`` names the instance of each entry. Such a bundle is one rate
variable, so the solve is exact only while its instances would freeze together;
:func:`share_bandwidth_checked` reports the bundles where, in some round, some of the
instances reach a full link and others do not (the exact solve would give them different
rates), so the caller can split them and solve again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..uniques import distinct_where


@dataclass(frozen=True)
class FlowIncidence:
    """Flows in compressed sparse form: flow ``f`` uses links ``link[ptr[f]:ptr[f+1]]``.

    ``coef`` holds the matching bytes consumed on each link per payload byte (> 0).
    ``max_rate`` is an optional per-flow cap in payload bytes per second (``inf`` = none).
    """

    ptr: np.ndarray       # (F+1,) int64
    link: np.ndarray      # (nnz,) int64 link ids
    coef: np.ndarray      # (nnz,) float64
    max_rate: np.ndarray  # (F,) float64
    part: np.ndarray | None = None        # (nnz,) int64 instance of each entry, or None
    part_owner: np.ndarray | None = None  # (P,) int64 flow of each instance

    @property
    def n_flows(self) -> int:
        return len(self.ptr) - 1

    @classmethod
    def from_lists(cls, links: list, coefs: list | None = None,
                   max_rate: list | None = None) -> "FlowIncidence":
        """Build from one sequence of link ids (and optional coefficients) per flow."""
        lengths = [len(x) for x in links]
        ptr = np.zeros(len(links) + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        link = np.concatenate([np.asarray(x, dtype=np.int64) for x in links]) if links else \
            np.zeros(0, dtype=np.int64)
        if coefs is None:
            coef = np.ones(len(link))
        else:
            coef = np.concatenate([np.asarray(c, dtype=float) for c in coefs]) if coefs else \
                np.zeros(0)
        caps = np.full(len(links), np.inf) if max_rate is None else np.asarray(max_rate, float)
        return cls(ptr, link, coef, caps)


def on_used_links(flows: FlowIncidence, n_links: int) -> tuple[FlowIncidence, np.ndarray]:
    """(``flows`` with link ids renumbered 0..U-1, the U links they use, sorted): a solve on
    the used links' capacities gives the same rates, to the last bit, as on every link (a
    link no flow crosses takes no part in any round), in time that does not grow with the
    links of the whole fabric."""
    used, local = renumbered(flows.link, n_links)
    return FlowIncidence(flows.ptr, local, flows.coef, flows.max_rate,
                         flows.part, flows.part_owner), used


def renumbered(ids: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct ``ids`` of 0..n-1, sorted; each of ``ids`` numbered 0.. in that
    order)."""
    if n > 16 * len(ids) + 1024:       # many possible, few used: sort the few
        used, local = distinct_where(ids, inverse=True)
        return used, local.astype(np.int64)
    mark = np.zeros(n, dtype=bool)
    mark[ids] = True
    used = np.flatnonzero(mark)
    index = np.empty(n, dtype=np.int64)
    index[used] = np.arange(len(used))
    return used, index[ids]


def share_bandwidth(flows: FlowIncidence, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates (payload bytes/s) for ``flows`` over links of ``capacity`` bytes/s.

    Flows that cross no link and have no cap get ``inf``. ``flows.part`` is not looked at:
    a bundle is one flow here.

    :raises ValueError: if a capacity is not positive or a coefficient is not positive.
    """
    return _progressive_filling(flows, capacity, None)[0]


def share_bandwidth_checked(flows: FlowIncidence,
                            capacity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rates, split): :func:`share_bandwidth` with bundles (``flows.part``) checked.

    ``split[f]`` is True where bundle ``f``'s instances do not all freeze in the same round
    (some reach a full link, others not): its rate is then not theirs and the caller must
    split it. Where no bundle needs splitting, every rate is what the solve with one flow
    per instance gives its instances, to the last bit (the same entries in the same order,
    the same steps).
    """
    part = flows.part
    return share_bandwidth_split(
        flows, capacity, None if part is None else lambda full: _partly_full(flows, part, full))


def share_bandwidth_split(flows: FlowIncidence, capacity: np.ndarray,
                          partly) -> tuple[np.ndarray, np.ndarray]:
    """(rates, split): :func:`share_bandwidth` with the caller's split check: in each round
    where some link fills, ``partly(full)`` (``full``: per link) says per flow whether only
    some of its instances cross a full link; None for no check."""
    return _progressive_filling(flows, capacity, partly)


def _progressive_filling(flows: FlowIncidence, capacity: np.ndarray,
                         partly) -> tuple[np.ndarray, np.ndarray]:
    n = flows.n_flows
    split = np.zeros(n, dtype=bool)
    if n == 0:
        return np.zeros(0), split
    if np.any(capacity <= 0):
        raise ValueError("every link capacity must be > 0")
    if np.any(flows.coef <= 0):
        raise ValueError("every link coefficient must be > 0")
    owner = np.repeat(np.arange(n), np.diff(flows.ptr)) if n > 1 else None
    link, coef, max_rate = flows.link, flows.coef, flows.max_rate
    rate = np.zeros(n)
    active = np.ones(n, dtype=bool)
    n_links = len(capacity)
    taken = np.zeros(n_links)       # per link, the capacity the frozen flows hold
    while True:
        if active.all():        # the first round: no entry to leave out, nothing to copy
            load = np.bincount(link, weights=coef, minlength=n_links)
        else:
            entry_active = active[owner]
            load = np.bincount(link[entry_active], weights=coef[entry_active],
                               minlength=n_links)
        used = np.flatnonzero(load > 0)
        # each link's share: what its frozen flows left, per unit of its active load; the
        # level is the least share (or rate cap) of all, and only flows of the link or cap
        # that sets it freeze: a share depends on nothing but the flows that cross the link
        share = np.maximum(capacity[used] - taken[used], 0.0) / load[used]
        level = float(min(share.min(initial=np.inf), max_rate[active].min()))
        if level == np.inf:
            rate[active] = np.inf
            break
        frozen = active & (max_rate <= level)
        full = np.zeros(n_links, dtype=bool)
        full[used[share == level]] = True
        if full.any():
            frozen[owner[full[link]] if owner is not None else 0] = True
            frozen &= active
            if partly is not None:
                split |= active & partly(full)
        rate[frozen] = level
        active &= ~frozen
        if not active.any():        # (always so after the first round of a lone flow)
            break
        entry_frozen = frozen[owner]
        taken += np.bincount(link[entry_frozen], weights=coef[entry_frozen] * level,
                             minlength=n_links)
    return rate, split


def _partly_full(flows: FlowIncidence, part: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Per flow: some of its instances cross a full link and some do not."""
    owner = flows.part_owner
    hit = np.zeros(len(owner), dtype=bool)
    hit[part[full[flows.link]]] = True
    n = flows.n_flows
    count = np.bincount(owner[hit], minlength=n)
    return (count > 0) & (count < np.bincount(owner, minlength=n))
