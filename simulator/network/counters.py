"""The flow fabric's link counters: each slot's load held until it changes, then added.

A slot (a link, or a link class) carries a constant load between two changes of it: the
capacity taken and the bytes crossing per second (a
:class:`~simulator.network.solve.Solution`'s ``occupancy`` and ``wire``). Its counters grow
by ``load * (t1 - t0)`` once per such stretch, when the load changes, not at every event of
the fabric: so the sums do not depend on how often the fabric looks (a set of flows that
another set's events never touch, a bundle against its instances, classes against links:
the same stretches, the same products, the same floats).

A stretch is held in one of two forms. A connected set of flows that appeared on idle slots
and vanished from them whole holds its solution and the instant it began (``since``): no
per-slot work at either end. Any other change writes the slots' loads and starts
(:meth:`Counters.hold`) and compares them slot by slot (:meth:`Counters.change`), adding
only where a load changed. Added stretches are logged and summed when the counters are read
(or the log is long, or a class is about to split): one ``np.add.at`` over the log, in the
order of the stretches, gives every counter the same sum as adding one at a time.
"""

from __future__ import annotations

import numpy as np

from ..uniques import distinct


class Counters:
    """Capacity taken (``occupancy``) and bytes crossed (``wire``) per slot, the stretches
    not added yet, and each slot's held load (``load``, ``load_wire``) and its start
    (``since``) where it is written per slot (zero elsewhere)."""

    LOG = 2048          # stretches kept before they are added

    def __init__(self, n: int):
        self._occupancy = np.zeros(n)
        self._wire = np.zeros(n)
        self.load = np.zeros(n)
        self.load_wire = np.zeros(n)
        self.since = np.zeros(n)
        self._log: list = []

    @property
    def occupancy(self) -> np.ndarray:
        self.flush()
        return self._occupancy

    @property
    def wire(self) -> np.ndarray:
        self.flush()
        return self._wire

    def arrays(self) -> tuple:
        """Every per-slot array, counters added up to date (what a class split copies)."""
        self.flush()
        return self._occupancy, self._wire, self.load, self.load_wire, self.since

    def close(self, solution, since: float, now: float) -> None:
        """``solution``'s loads, held from ``since`` in the first form, end at ``now``."""
        if now > since and len(solution.links):
            self._log.append((solution.links, solution.occupancy, solution.wire,
                              float(now - since)))      # (SimPy's clock may be an int)
            if len(self._log) >= self.LOG:
                self.flush()

    def hold(self, solution, since: float) -> None:
        """Write ``solution``'s loads, held from ``since``, per slot (the second form)."""
        links = solution.links
        self.load[links] = solution.occupancy
        self.load_wire[links] = solution.wire
        self.since[links] = since

    def change(self, old: list, new: list, now: float) -> None:
        """The slots of ``old`` (solutions whose loads are written per slot) and of ``new``
        take ``new``'s loads (none where only ``old`` has the slot) at ``now``: a slot
        whose load changes adds its stretch and starts anew; the others go on."""
        slots = np.concatenate([s.links for s in old] + [s.links for s in new])
        if not len(slots):
            return
        touched = distinct(slots)
        occupancy, wire = np.zeros(len(touched)), np.zeros(len(touched))
        if new:
            at = np.searchsorted(touched, np.concatenate([s.links for s in new]))
            occupancy[at] = np.concatenate([s.occupancy for s in new])
            wire[at] = np.concatenate([s.wire for s in new])
        held, held_wire = self.load[touched], self.load_wire[touched]
        moved = (occupancy != held) | (wire != held_wire)
        if not moved.any():
            return
        slot = touched[moved]
        dt = now - self.since[slot]
        self._log.append((slot, held[moved], held_wire[moved], dt))
        self.load[slot] = occupancy[moved]
        self.load_wire[slot] = wire[moved]
        self.since[slot] = now
        if len(self._log) >= self.LOG:
            self.flush()

    def flush(self) -> None:
        """Add the logged stretches, in the order they ended."""
        log = self._log
        if not log:
            return
        self._log = []
        links = np.concatenate([s for s, _, _, _ in log])
        if all(isinstance(dt, float) for _, _, _, dt in log):
            dt = np.repeat([dt for _, _, _, dt in log], [len(s) for s, _, _, _ in log])
        else:
            dt = np.concatenate([np.full(len(s), dt) if isinstance(dt, float) else dt
                                 for s, _, _, dt in log])
        np.add.at(self._occupancy, links, np.concatenate([o for _, o, _, _ in log]) * dt)
        np.add.at(self._wire, links, np.concatenate([w for _, _, w, _ in log]) * dt)
