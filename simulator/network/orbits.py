"""Link classes: the links a max-min solve need not tell apart, kept as flows appear.

A training step puts the same transfer on many identical servers, rails and switches (the
TP all-reduce of every server of a stage, the FSDP ring of every rail, one bundle each,
:mod:`simulator.network.bundle`). Progressive filling only looks at links through their
loads, so two links with the same capacity that every flow crosses with the same ordered
coefficients (and wire bytes) have the same load, headroom and fullness in every round of
every solve, and the same counters: one of them can stand for all. A *class* is such a set.

The partition starts from (capacity, link group) and is refined by each new flow (new
arrays: plans are cached, so flows recur by identity): the links of a class are told apart
by the flow's ordered entries on each (none for a link it does not cross). That is
O(entries of the flow), once per distinct flow; a flow seen before changes nothing. So, for
every flow ever seen, every link of a class carries the same ordered per-flow entries, and
any subset of those flows in any order gives every link of a class the same sums.

Each flow is then *restricted*: its entries on one link of each class it crosses, numbered
by class, recomputed only when one of its classes has split since. For a bundle it also
records where its instances differ: the (class, instance) pairs of the classes that only
some of its instances cross; the solve's split check (:mod:`simulator.network.reduced`)
needs no more. The per-class counters (:class:`~simulator.network.counters.Counters`) live
here: a class's links have one history, and a class split from another starts from its
count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..uniques import distinct, distinct_below, distinct_where
from .counters import Counters

_EMPTY = np.zeros(0, np.int64)


@dataclass(frozen=True)
class Restricted:
    """One flow's entries on one link of each class it crosses, by class id."""

    links: np.ndarray        # class id of each kept entry (the flow's entry order)
    coef: np.ndarray
    wire: np.ndarray
    whole: np.ndarray        # per kept entry: every instance crosses its class
    pair_class: np.ndarray   # classes only some instances cross: one per (class, instance)
    pair_part: np.ndarray    # the instance of each pair
    n_parts: int
    classes: np.ndarray      # the classes crossed, sorted
    # one number per distinct content: entries (coefficients, wire bytes, the capacity of
    # each entry's class, ``whole``) and pairs by index into ``classes``, whichever
    # classes they name (:meth:`LinkClasses.token`)
    token: int = 0
    footprint: frozenset = frozenset()      # ``classes`` as a set


class LinkClasses:
    """A partition of a fabric's links into classes, refined by the flows it is shown."""

    # distinct flows kept restricted (others are refined and restricted again on return).
    # A step's distinct flows must fit, or flows that come back in turn are each redone
    # every time: TP2 x CP4 x FSDP on 8,192 GPUs meets 11,533 (its CP sends, split per
    # server), and with 4,096 kept 323,368 of its 330,031 refinements were of flows seen
    # before. About 1.7 KB a small flow: 110 MB at most.
    REMEMBERED = 65536

    def __init__(self, capacity: np.ndarray):
        n = len(capacity)
        _, of_link = distinct_where(capacity, inverse=True)
        self.of_link = of_link.astype(np.int64)
        self.n = int(self.of_link.max()) + 1 if n else 0
        # per class (room for one class per link: a class is never empty)
        self.count = np.zeros(n, np.int64)
        self.count[:self.n] = np.bincount(self.of_link, minlength=self.n)
        self.capacity = np.zeros(n)
        self.capacity[self.of_link] = capacity
        self.group = np.zeros(n, np.int64)
        self.changed = np.zeros(n, np.int64)     # version at which the class last changed
        self.counters = Counters(n)
        # told, before a split copies each class's arrays, which classes (src) give links
        # to which new ones: the flow fabric writes the loads it holds there, and moves
        # its owners along
        self.before_split = None
        self.version = 0
        self._seen: dict = {}
        self._tokens: dict = {}      # Restricted.token of each content seen
        self._last_token = 0

    def per_link(self, per_class: np.ndarray) -> np.ndarray:
        """A per-class quantity expanded to every link."""
        return per_class[self.of_link]

    def split_by_group(self, group_of_link: np.ndarray) -> None:
        """Tell links of different groups apart; record each class's group."""
        links = np.arange(len(self.of_link))
        self._regroup(links, _row_labels(np.column_stack([self.of_link, group_of_link])))
        self.group[self.of_link] = group_of_link

    # ------------------------------------------------------------------ flows
    def restricted(self, flows: list, keys: tuple | None = None) -> list[Restricted]:
        """Each flow restricted to the current classes, after refining by new ones
        (``keys``: the flows' :func:`~simulator.network.solve.flow_key`, where known).

        A flow is known by its arrays' ids; an entry holds the arrays, so no other array
        has their ids while it is kept: a key found is those very arrays."""
        entries = []
        for i, f in enumerate(flows):
            key = (id(f.links), id(f.coef), id(f.wire_coef), id(f.parts)) if keys is None \
                else keys[i][1:]
            entry = self._seen.get(key)
            if entry is None:
                self.refine(f)
                if len(self._seen) >= self.REMEMBERED:
                    self._seen.pop(next(iter(self._seen)))
                entry = self._seen[key] = [_arrays(f), None, -1]
            entries.append((f, entry))
        out = []
        for f, entry in entries:          # after every refinement of this set
            if entry[2] != self.version:
                if entry[1] is None or self.changed[entry[1].classes].max(initial=0) > entry[2]:
                    entry[1] = self.restrict(f)
                entry[2] = self.version
            out.append(entry[1])
        return out

    def footprint(self, flow, key: tuple) -> frozenset:
        """The classes ``flow`` crosses now (``key``: its
        :func:`~simulator.network.solve.flow_key`), from its restriction where that is
        current."""
        entry = self._seen.get(key[1:])
        if entry is not None and entry[2] == self.version:
            return entry[1].footprint
        return self.restricted([flow], (key,))[0].footprint

    def refine(self, flow) -> None:
        """Tell apart the links of each class by ``flow``'s ordered entries on them."""
        if len(flow.links) == 0:
            return
        wire = flow.coef if flow.wire_coef is None else flow.wire_coef
        order = np.argsort(flow.links, kind="stable")
        links = flow.links[order]
        # np.concatenate, not np.r_: the same arrays without np.r_'s parsing of its index
        # (7% of a `plan` replaying ten 3-D candidates went to np.r_ here and below)
        starts = np.flatnonzero(np.concatenate(([True], links[1:] != links[:-1])))
        ulinks = links[starts]
        lengths = np.diff(np.concatenate((starts, [len(links)])))
        coef_bits = np.ascontiguousarray(flow.coef[order], dtype=float).view(np.int64)
        wire_bits = np.ascontiguousarray(wire[order], dtype=float).view(np.int64)
        old = self.of_link[ulinks]
        label = np.empty(len(ulinks), np.int64)
        offset = 0
        for k in distinct(lengths).tolist():
            sel = np.flatnonzero(lengths == k)
            at = starts[sel][:, None] + np.arange(k)
            inv = _row_labels(np.column_stack([old[sel], coef_bits[at], wire_bits[at]]))
            label[sel] = inv + offset
            offset += int(inv.max()) + 1
        self._regroup(ulinks, label)

    def _regroup(self, links: np.ndarray, label: np.ndarray) -> None:
        """Give each label of ``links`` (links of one label: one class) a class of its own,
        the links of their classes that no label names keeping theirs."""
        old = self.of_link[links]
        labels, first = distinct_where(label, first=True)
        dense = np.searchsorted(labels, label)
        size = np.bincount(dense, minlength=len(labels))
        lab_old = old[first]
        classes, of_lab = distinct_where(lab_old, inverse=True)
        covered = np.bincount(of_lab, weights=size, minlength=len(classes))
        n_labels = np.bincount(of_lab, minlength=len(classes))
        whole = covered == self.count[classes]
        keep = np.zeros(len(labels), bool)
        _, first_label = distinct_where(of_lab, first=True)    # labels sorted: the lowest
        keep[first_label[whole]] = True
        if keep.all():
            return
        moved = np.flatnonzero(~keep)
        new = self.n + np.arange(len(moved))
        src = lab_old[moved]
        version = self.version + 1
        if self.before_split is not None:
            self.before_split(src, new)
        for a in (self.capacity, self.group, *self.counters.arrays()):
            a[new] = a[src]
        np.subtract.at(self.count, src, size[moved])
        self.count[new] = size[moved]
        self.changed[new] = version
        self.changed[classes[~whole | (n_labels > 1)]] = version
        target = lab_old.copy()
        target[moved] = new
        self.of_link[links] = target[dense]
        self.n += len(moved)
        self.version = version

    def restrict(self, flow) -> Restricted:
        """``flow``'s entries on the first link it crosses of each class, by class."""
        wire = flow.coef if flow.wire_coef is None else flow.wire_coef
        of_entry = self.of_link[flow.links]
        classes, first, at = distinct_where(of_entry, first=True, inverse=True)
        keep = flow.links == flow.links[first][at]
        n_parts, partial = 1, _EMPTY
        whole_class = np.ones(len(classes), bool)
        if flow.parts is not None:
            n_parts = len(flow.parts) - 1
            part = np.repeat(np.arange(n_parts), np.diff(flow.parts))
            pairs = distinct_below(at * n_parts + part, len(classes) * n_parts)
            crossing = np.bincount(pairs // n_parts, minlength=len(classes))
            whole_class = crossing == n_parts
            partial = pairs[~whole_class[pairs // n_parts]]
        links, coef, wire = of_entry[keep], flow.coef[keep], wire[keep]
        whole = whole_class[at[keep]]
        content = (n_parts, len(classes), coef.tobytes(), wire.tobytes(),
                   self.capacity[links].tobytes(), whole.tobytes(), partial.tobytes())
        return Restricted(links, coef, wire, whole, classes[partial // n_parts],
                          partial % n_parts, n_parts, classes, self.token(content),
                          frozenset(classes.tolist()))

    def token(self, content: tuple) -> int:
        """A number per distinct ``content`` (1, 2, ...); the table of the last contents
        seen is dropped when full, and new numbers keep counting up: two contents with one
        number are equal."""
        token = self._tokens.get(content)
        if token is None:
            if len(self._tokens) >= self.REMEMBERED:
                self._tokens.clear()
            self._last_token += 1
            token = self._tokens[content] = self._last_token
        return token


def _row_labels(rows: np.ndarray) -> np.ndarray:
    """One label per distinct row of an integer matrix (0, 1, ... in sorted row order)."""
    order = np.lexsort(rows.T[::-1])
    ranked = rows[order]
    new = np.concatenate(([False], np.any(ranked[1:] != ranked[:-1], axis=1)))
    label = np.empty(len(rows), np.int64)
    label[order] = np.cumsum(new.astype(np.int64))    # (NumPy sums bools slowly)
    return label


def _arrays(flow) -> tuple:
    return flow.links, flow.coef, flow.wire_coef, flow.parts
