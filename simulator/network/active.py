"""The flow fabric's active flows, in arrival order, with the bytes each has left.

Per flow: the flow, its solve key (:func:`~simulator.network.solve.flow_key`), its done
event (a :class:`~simulator.network.bundle.Join` for an instance of a split bundle), the
bytes it has left and the bytes below which it is done (:data:`DONE_FRACTION` of its
size). A fabric has a few flows active at a time (one to five in a 3-D plan's step), so
they are Python lists: a loop over them is faster than NumPy's call on arrays that small,
and takes the same products and differences, element by element. A flow that arrives
joins the end of the lists, and is advanced only once a solve has given it a rate
(:meth:`ActiveFlows.advance` takes the rates of the flows of the last solve, the first
ones); a solve at that instant follows its arrival, so no time passes for it before.
"""

from __future__ import annotations

import numpy as np

from .bundle import Join, instances
from .solve import flow_key

# A flow is complete when what is left is below this fraction of its size.
DONE_FRACTION = 1e-9


class ActiveFlows:
    """The active flows (``flows``, ``keys``, ``dones``, ``left``, ``enough``: lists)."""

    def __init__(self):
        self.flows: list = []
        self.keys: list[tuple] = []
        self.dones: list = []
        self.left: list[float] = []
        self.enough: list[float] = []

    def __len__(self) -> int:
        return len(self.flows)

    def add(self, flow, done) -> None:
        self.flows.append(flow)
        self.keys.append(flow_key(flow))
        self.dones.append(done)
        self.left.append(float(flow.size_bytes))
        self.enough.append(DONE_FRACTION * flow.size_bytes)

    def advance(self, rates: list[float], dt: float) -> None:
        """``dt`` seconds at ``rates`` (one per flow of the last solve: the first ones)."""
        left = self.left
        for i, rate in enumerate(rates):
            left[i] -= rate * dt

    def settle(self) -> list[tuple]:
        """Drop the flows that are done and return them, in order, as (flow, done event)
        (a split bundle's once its last instance is)."""
        left, enough = self.left, self.enough
        done = [i for i in range(len(left)) if not left[i] > enough[i]]
        if not done:
            return []
        out = []
        for i in done:
            event = self.dones[i]
            if not isinstance(event, Join):
                out.append((self.flows[i], event))
            else:
                event.left -= 1
                if event.left == 0:
                    out.append((event.flow, event.done))
        self._drop(done)
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
        self.left = [self.left[i] for i in at]
        self.enough = [self.enough[i] for i in at]
        return int(np.count_nonzero(split))

    def _drop(self, done: list[int]) -> None:
        """Remove the flows at positions ``done`` (ascending), in place."""
        for column in (self.flows, self.keys, self.dones, self.left, self.enough):
            for i in reversed(done):
                del column[i]
