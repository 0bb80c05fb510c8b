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
* an all_to_all is one send per peer: each rank pays the cost once per remote peer, with
  ``p2p_channels_per_net_peer`` (NCCL's 2 channels per network peer) of them in flight.

Neither applies inside one server or on a fabric without an entry (0.0).
"""

from __future__ import annotations

from ..cluster import Cluster
from ..constants import ModelConstants

_US = 1e-6


def net_message_s(cluster: Cluster, k: ModelConstants) -> float:
    """Seconds one network message costs on ``cluster``'s network links: the largest
    ``net_message_us`` entry among their link types (0.0 where none has one)."""
    table = k.net_message_us or {}
    if not table:
        return 0.0
    types = {d.get("link_type") for _, _, d in cluster.G.edges(data=True)
             if d.get("link_class", "net") == "net"}
    return max((table[t] for t in types if t in table), default=0.0) * _US


def peer_messages_s(op: str, comm, message_s: float, channels_per_peer: int) -> float:
    """The per-message cost an ``op`` of the ``direct`` algorithm pays on ``comm``: once per
    remote peer of its busiest rank (one for a send_recv between servers), over
    ``channels_per_peer`` messages in flight."""
    if not message_s or comm.n_nodes < 2:
        return 0.0
    remote = 1 if op == "send_recv" else comm.n_ranks - min(len(g) for g in comm.groups)
    return remote * message_s / channels_per_peer


__all__ = ["net_message_s", "peer_messages_s"]
