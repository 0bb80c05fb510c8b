"""The flow fabric's active flows, in arrival order, with the bytes each has left.

Per flow: the flow, its solve key (:func:`~simulator.network.solve.flow_key`), its done
event (a :class:`~simulator.network.bundle.Join` for an instance of a split bundle), and,
as two arrays, the bytes it has left and the bytes below which it is done
(:data:`DONE_FRACTION` of its size). Advancing them all is one NumPy step, the same
products and differences, element by element, as a loop over the flows. Flows that arrive
join the arrays at the next update (:meth:`ActiveFlows.settle`): a solve at that instant
follows, so no time passes for them before.
"""

from __future__ import annotations

import numpy as np

from .bundle import Join, instances
from .solve import flow_key

# A flow is complete when what is left is below this fraction of its size.
DONE_FRACTION = 1e-9


class ActiveFlows:
    """The active flows (``flows``, ``keys``, ``dones``, ``left``, ``enough``)."""

    def __init__(self):
        self.flows: list = []
        self.keys: list[tuple] = []
        self.dones: list = []
        self.left = np.zeros(0)
        self.enough = np.zeros(0)
        self._arrived: list = []        # sizes of the flows not in ``left`` yet

    def __len__(self) -> int:
        return len(self.flows)

    def add(self, flow, done) -> None:
        self.flows.append(flow)
        self.keys.append(flow_key(flow))
        self.dones.append(done)
        self._arrived.append(flow.size_bytes)

    def advance(self, rates: np.ndarray, dt: float) -> None:
        """``dt`` seconds at ``rates`` (one per flow of ``left``)."""
        self.left[:len(rates)] -= rates * dt

    def settle(self) -> list[tuple]:
        """Take the arrivals into the arrays; drop the flows that are done and return
        them, in order, as (flow, done event) (a split bundle's once its last instance
        is)."""
        if self._arrived:
            sizes, self._arrived = self._arrived, []
            self.left = np.concatenate([self.left, [float(b) for b in sizes]])
            self.enough = np.concatenate([self.enough, [DONE_FRACTION * b for b in sizes]])
        done = ~(self.left > self.enough)
        if not done.any():
            return []
        out = []
        for i in done.nonzero()[0].tolist():
            event = self.dones[i]
            if not isinstance(event, Join):
                out.append((self.flows[i], event))
            else:
                event.left -= 1
                if event.left == 0:
                    out.append((event.flow, event.done))
        self._take((~done).nonzero()[0].tolist())
        return out

    def split(self, split: np.ndarray) -> int:
        """Replace each bundle marked in ``split`` by its instances, each with the bytes
        the bundle had left, reporting to one Join; the number of bundles split."""
        at: list[int] = []          # per new position, the old one it takes its bytes from
        flows, dones = [], []
        for i, cut in enumerate(split.tolist()):
            parts = instances(self.flows[i]) if cut else [self.flows[i]]
            at.extend([i] * len(parts))
            flows.extend(parts)
            dones.extend([Join(self.flows[i], self.dones[i], len(parts)) if cut
                          else self.dones[i]] * len(parts))
        self.flows, self.dones = flows, dones
        self.keys = [flow_key(f) for f in flows]
        self.left, self.enough = self.left[at], self.enough[at]
        return int(np.count_nonzero(split))

    def _take(self, kept: list[int]) -> None:
        self.flows = [self.flows[i] for i in kept]
        self.keys = [self.keys[i] for i in kept]
        self.dones = [self.dones[i] for i in kept]
        self.left, self.enough = self.left[kept], self.enough[kept]
