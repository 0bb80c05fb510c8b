"""The flow fabric's link counters, added to in batches with the same sums.

Between two solves every link a solution loads takes ``occupancy * dt`` of capacity and
``wire * dt`` bytes (:class:`~simulator.network.solve.Solution`). Adding them into the
counters at every step costs a few NumPy calls on small arrays each time; here a step is
only written down, and the steps are added when the counters are read (or the log is long,
or the indexing is about to change: a link class splits). One ``np.add.at`` over the steps'
entries, one after another, adds into each counter in the same order, the same products,
as one step at a time did: the sums are the same floats.
"""

from __future__ import annotations

import numpy as np


class Counters:
    """Capacity taken (``occupancy``) and bytes crossed (``wire``) per slot (a link, or a
    link class), with the steps not added yet."""

    LOG = 2048          # steps kept before they are added

    def __init__(self, n: int):
        self._occupancy = np.zeros(n)
        self._wire = np.zeros(n)
        self._log: list = []

    @property
    def occupancy(self) -> np.ndarray:
        self.flush()
        return self._occupancy

    @property
    def wire(self) -> np.ndarray:
        self.flush()
        return self._wire

    def add(self, solution, dt: float) -> None:
        """``dt`` seconds of ``solution``'s loads (on its ``links``; each of its
        ``parts``' for a :class:`~simulator.network.solve.Composite`)."""
        for part in solution.parts:
            self._log.append((part, dt))
        if len(self._log) >= self.LOG:
            self.flush()

    def flush(self) -> None:
        """Add the logged steps, in the order they were taken."""
        log = self._log
        if not log:
            return
        self._log = []
        links = np.concatenate([s.links for s, _ in log])
        dt = np.repeat([dt for _, dt in log], [len(s.links) for s, _ in log])
        np.add.at(self._occupancy, links, np.concatenate([s.occupancy for s, _ in log]) * dt)
        np.add.at(self._wire, links, np.concatenate([s.wire for s, _ in log]) * dt)
