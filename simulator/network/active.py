"""The flow fabric's active flows, in connected sets, each flow with its bytes and rate.

Flows that share no slot (link, or link class) do not affect each other's rates
(:mod:`simulator.network.maxmin`), so the fabric keeps them in *connected sets*: flows that
cross a slot in common, directly or through others of the set. A set is solved, timed and
counted on its own; an event of one set leaves every other set as it was.

Per flow: the flow, its solve key (:func:`~simulator.network.solve.flow_key`), its done
event (a :class:`~simulator.network.bundle.Join` for an instance of a split bundle), its
order of arrival (``seq``), and its progress as one stretch: the bytes
it had ``left`` at the instant ``since`` its rate last changed, that ``rate``, and the
instant it will be done at that rate (``end``). The bytes moved are subtracted only where
the rate changes, ``left - rate * (now - since)``, so a flow's numbers do not depend on how
often the fabric looks at it (a bundle and each of its instances, a set that merges with
another and one that does not: the same stretches, the same floats). A flow is done once
``end`` has come. A set has a few flows, so they are Python lists: a loop over them is
faster than NumPy's calls on arrays that small.
"""

from __future__ import annotations

import numpy as np

from .bundle import Join, instances
from .solve import flow_key

_COLUMNS = ("flows", "keys", "dones", "seqs", "left", "since", "rate", "end")


class FlowSet:
    """One connected set of active flows (per flow: the lists of :data:`_COLUMNS`, in order
    of arrival); ``segments``: its loads on the slots, for the counters, as
    (solution, since) pairs, ``since`` None where they are written per slot
    (:class:`~simulator.network.counters.Counters`); ``owned``: the slots the fabric
    counts as this set's (those of its flows, and of flows done since it was last cut);
    ``generation`` counts its changes."""

    __slots__ = ("id", "segments", "owned", "generation", *_COLUMNS)

    def __init__(self, set_id: int):
        self.id = set_id
        self.flows, self.keys, self.dones, self.seqs = [], [], [], []
        self.left, self.since, self.rate, self.end = [], [], [], []
        self.segments: list = []
        self.owned: set = set()
        self.generation = 0

    @classmethod
    def alone(cls, set_id: int, flow, key: tuple, done, seq: tuple, now: float) -> "FlowSet":
        """A new set of one flow arriving at ``now``: ``FlowSet(set_id)`` then
        :meth:`add`, its columns made at once (most flows arrive on idle links)."""
        out = cls.__new__(cls)
        out.id, out.flows, out.keys, out.dones, out.seqs = set_id, [flow], [key], [done], [seq]
        out.left, out.since, out.rate, out.end = ([float(flow.size_bytes)], [now], [None],
                                                  [float("inf")])
        out.segments, out.owned, out.generation = [], set(), 0
        return out

    def __len__(self) -> int:
        return len(self.flows)

    def add(self, flow, key: tuple, done, seq: tuple, now: float) -> None:
        """A flow that arrives at ``now`` (no rate yet: the next solve gives it one)."""
        self.flows.append(flow)
        self.keys.append(key)
        self.dones.append(done)
        self.seqs.append(seq)
        self.left.append(float(flow.size_bytes))
        self.since.append(now)
        self.rate.append(None)
        self.end.append(float("inf"))

    def absorb(self, others: list["FlowSet"]) -> None:
        """Take the flows and segments of ``others`` (in that order); the flows stay in
        order of arrival. One sort of them all: taking the sets one at a time sorted the
        growing set again for each (a flow that joined 930 sets at once, 383 times in a
        replay of GPT-3 175B on 8,192 GPUs, spent half of it there)."""
        sets = (self, *others)
        seqs = [seq for s in sets for seq in s.seqs]
        order = sorted(range(len(seqs)), key=seqs.__getitem__)
        for name in _COLUMNS:
            every = [x for s in sets for x in getattr(s, name)]
            setattr(self, name, [every[i] for i in order])
        # (a new list: lists are shared)
        self.segments = [segment for s in sets for segment in s.segments]
        self.owned.update(*(s.owned for s in others))

    def part(self, index: list[int], set_id: int) -> "FlowSet":
        """A new set of the flows at ``index`` (their state as it is)."""
        out = FlowSet(set_id)
        for name in _COLUMNS:
            column = getattr(self, name)
            setattr(out, name, [column[i] for i in index])
        return out

    def apply(self, rates: list[float], now: float) -> float:
        """The rates of a solve at ``now`` (one per flow, in order): a flow whose rate
        changes ends its stretch; the earliest ``end`` of the set."""
        left, since, rate, end = self.left, self.since, self.rate, self.end
        for i, r in enumerate(rates):
            old = rate[i]
            if r != old:
                if old is not None:
                    left[i] -= old * (now - since[i])
                since[i], rate[i] = now, r
                try:
                    end[i] = now + left[i] / r
                except ZeroDivisionError:       # no rate: never, until it has one
                    end[i] = float("inf")
        return min(end)

    def settle(self, now: float) -> tuple[list[tuple], list[int]]:
        """Drop the flows whose ``end`` has come: ((seq, flow, done) of those that finish,
        a split bundle once its last instance does; the positions dropped, in order)."""
        end = self.end
        if len(end) == 1:       # most sets: one flow
            gone = [0] if end[0] <= now else []
        else:
            gone = [i for i in range(len(end)) if end[i] <= now]
        if not gone:
            return [], gone
        finished = []
        for i in gone:
            flow, done = self.flows[i], self.dones[i]
            while isinstance(done, Join):   # a part of a split bundle (a part of a part)
                done.left -= 1
                if done.left:
                    break
                flow, done = done.flow, done.done
            else:
                finished.append((self.seqs[i], flow, done))
        return finished, gone

    def drop(self, gone: list[int]) -> None:
        """Remove the flows at positions ``gone`` (ascending)."""
        if len(gone) == len(self.flows):        # (each of _COLUMNS a new list)
            self.flows, self.keys, self.dones, self.seqs = [], [], [], []
            self.left, self.since, self.rate, self.end = [], [], [], []
            return
        for name in _COLUMNS:
            column = getattr(self, name)
            for i in reversed(gone):
                del column[i]

    def split(self, split: np.ndarray, instances=instances, groups: dict | None = None) -> int:
        """Replace each bundle marked in ``split`` by its ``instances`` (a
        :class:`~simulator.network.bundle.Splitter` keeps their arrays), or where
        ``groups`` gives the bundle's position, by one smaller bundle per group of its
        instances (``instances(flow, groups)``); each with the bundle's stretch, reporting
        to one Join; the number of bundles split."""
        columns = {name: [] for name in _COLUMNS}
        for i, cut in enumerate(split.tolist()):
            flow = self.flows[i]
            grouping = None if not cut or groups is None else groups.get(i)
            if not cut:
                parts, firsts = [flow], None
            elif grouping is None:
                parts = instances(flow)
                firsts = range(len(parts))
            else:
                parts, firsts = instances(flow, grouping), [g[0] for g in grouping]
            done = Join(flow, self.dones[i], len(parts)) if cut else self.dones[i]
            for part, k in zip(parts, firsts or [None]):
                key = flow_key(part) if cut else self.keys[i]
                seq = (*self.seqs[i], k) if cut else self.seqs[i]
                row = (part, key, done, seq, self.left[i], self.since[i], self.rate[i],
                       self.end[i])
                for name, value in zip(_COLUMNS, row):
                    columns[name].append(value)
        for name, column in columns.items():
            setattr(self, name, column)
        return int(np.count_nonzero(split))
