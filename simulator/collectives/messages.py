"""A fabric's cost per network message (EFA), on the critical path of a collective.

On InfiniBand NCCL's hop latencies (nccl.yaml) hold. AWS EFA is different: each network
message goes through NCCL's proxy thread, aws-ofi-nccl and libfabric to an SRD send whose
completion is polled back, and SRD sprays the message's packets over many paths of the
AWS fabric and reorders them in the receiver (Shalev et al., "A Cloud-Optimized Transport
Protocol for Elastic and Scalable HPC", IEEE Micro 2020). That per-message cost
(``net_message_us`` in calibration.yaml, per NIC link type, fitted on the AWS p5 all_gather
calibration tables) is paid in sequence:

* a ring step moves one message per channel across each server boundary, and the next
  step of the GPU behind that boundary waits for it, so a ring pays the cost once per
  step: ``nsteps x cost`` (n - 1 steps for all_gather, 2 (n - 1) for all_reduce), in place
  of NCCL's hop latencies. Inside a server the NVLink hops overlap with it.
* a send to a peer on another server (all_to_all, send_recv) goes as NCCL plans it
  (collectives/p2p_net.py): each part of a peer's bytes is a proxy operation that costs
  ``p2p_op_us`` and each of its messages ``p2p_message_us`` (calibration.yaml, per NIC
  link type, fitted on the AWS p5 alltoall calibration tables), in series on the rank's
  proxy, beside the bytes on the links.

Neither applies inside one server or on a fabric without an entry (0.0).
"""

from __future__ import annotations

from ..cluster import Cluster
from ..constants import ModelConstants
from .p2p_net import p2p_net_s

_US = 1e-6


def net_message_s(cluster: Cluster, k: ModelConstants) -> float:
    """Seconds one network message of a ring step costs on ``cluster``'s network links: the
    largest ``net_message_us`` entry among their link types (0.0 where none has one)."""
    return _largest(cluster, k.net_message_us)


def net_ll_message_s(cluster: Cluster, k: ModelConstants) -> float:
    """The same for a ring step of the LL and LL128 protocols (``net_ll_message_us``)."""
    return _largest(cluster, k.net_ll_message_us)


def _largest(cluster: Cluster, table: dict | None) -> float:
    """The largest entry of ``table`` (us, per link type) among ``cluster``'s network links'
    types, in seconds (0.0 where none has one)."""
    if not table:
        return 0.0
    types = {t for t, link_class in cluster.link_kinds if link_class == "net"}
    return max((table[t] for t in types if t in table), default=0.0) * _US


def p2p_costs(cluster: Cluster, k: ModelConstants) -> tuple[float, float]:
    """(seconds per proxy operation, seconds per message) of point-to-point across
    ``cluster``'s servers: ``p2p_op_us`` and ``p2p_message_us`` of its network link types."""
    return _largest(cluster, k.p2p_op_us), _largest(cluster, k.p2p_message_us)


def peer_messages_s(op: str, comm, size: int, costs: tuple[float, float],
                    ring_channels: int, step: int) -> float:
    """What a ``direct`` ``op`` (all_to_all, send_recv) of ``size`` bytes on ``comm`` pays
    beyond its bytes on a fabric with point-to-point costs (``costs``, :func:`p2p_costs`):
    its busiest rank's remote peers (one for a send_recv between servers) planned as NCCL
    does (:func:`.p2p_net.p2p_net_s`) with ``ring_channels`` and ``step``
    (NCCL_P2P_NET_CHUNKSIZE)."""
    op_s, message_s = costs
    if not (op_s or message_s) or comm.n_nodes < 2:
        return 0.0
    if op == "send_recv":
        remote, peer_bytes = 1, size
    else:
        remote, peer_bytes = comm.n_ranks - min(len(g) for g in comm.groups), size // comm.n_ranks
    return p2p_net_s(peer_bytes, remote, comm.n_ranks, ring_channels, step, op_s, message_s)


__all__ = ["net_ll_message_s", "net_message_s", "p2p_costs", "peer_messages_s"]
