"""What the engine asks of the models it is given: the planner and compute seams.

The engine owns time (streams, dependencies, rendezvous, memory); it asks a planner how a
collective or a point-to-point transfer is laid out on the cluster and a compute model how
long an op takes. Anything with these methods can be replayed against (the collective cost
model, a compute model, or a stub in a test).
"""

from __future__ import annotations

from typing import Protocol

from ..cluster import Cluster
from ..network.fabric import Flow


class PlannedTransfer(Protocol):
    """A collective (or send/recv) laid out and costed: what the engine reads of a plan."""

    algo: str
    proto: str

    def flow(self) -> Flow:
        """The coupled flow to put on the fabric."""
        ...


class CollectivePlanner(Protocol):
    """Plans collectives on one cluster (:class:`simulator.collectives.model.CollectiveModel`).

    ``plan("send_recv", size_bytes, [sender, receiver])`` is the point-to-point path, with
    NCCL's p2p latency and protocol choice.
    """

    cluster: Cluster

    def plan(self, op: str, size_bytes: int, ranks: list[int], algo: str = "auto",
             proto: str = "auto", root: int = 0) -> PlannedTransfer:
        ...


class ComputeTimer(Protocol):
    """Times one compute op (:class:`simulator.compute.model.ComputeModel`)."""

    def op_time_s(self, op_class: str, flops: float, bytes_accessed: float,
                  precision: str, shape: tuple[int, ...] | None = None,
                  launch: str = "", transa: bool = False) -> float:
        ...
