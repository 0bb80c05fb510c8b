"""A collective laid out and costed: the :class:`Plan` every algorithm builder returns.

Below both the cost model (:mod:`simulator.collectives.model`) and the copy-based
algorithms (:mod:`simulator.collectives.copies`), so either can build one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..network.fabric import Flow


@dataclass(slots=True)
class Plan:
    """One collective, laid out and costed, ready to hand to a fabric. Plans are cached and
    shared: never change one, make another (:meth:`placed`)."""

    op: str
    algo: str
    proto: str
    n_ranks: int
    n_nodes: int
    size_bytes: int
    latency_s: float
    payload_bytes: float       # bytes each edge carries (per direction)
    links: np.ndarray
    coef: np.ndarray
    max_rate: float            # NCCL per-channel ceilings, payload bytes/s
    predicted_s: float         # time alone on the fabric (links uncontended): the tuner's
                               # estimate plus any link latency what-if it cannot see
    wire_coef: np.ndarray | None = None   # bytes crossing each link per payload byte

    def placed(self, links: np.ndarray, predicted_s: float,
               wire_coef: np.ndarray | None) -> Plan:
        """This plan on other links of the same shape (another instance group or pair),
        with its own time alone and wire bytes."""
        return Plan(op=self.op, algo=self.algo, proto=self.proto, n_ranks=self.n_ranks,
                    n_nodes=self.n_nodes, size_bytes=self.size_bytes,
                    latency_s=self.latency_s, payload_bytes=self.payload_bytes, links=links,
                    coef=self.coef, max_rate=self.max_rate, predicted_s=predicted_s,
                    wire_coef=wire_coef)

    def flow(self) -> Flow:
        """The flow that moves this plan's bytes."""
        return Flow(size_bytes=self.payload_bytes, links=self.links, coef=self.coef,
                    latency_s=self.latency_s, max_rate=self.max_rate,
                    label=f"{self.op}/{self.algo}/{self.proto}", wire_coef=self.wire_coef)
