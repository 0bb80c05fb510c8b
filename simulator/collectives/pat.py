"""PAT (Parallel Aggregated Trees, NCCL 2.23+): all_gather and reduce_scatter at one GPU
per server, in log2(n) steps instead of a ring's n - 1.

Bandwidth: each rank still sends and receives (n-1)/n of the buffer, over the ring's
links (the same bytes cross the same NICs), so the edges are the ring's; only the latency
differs: ``base + log2(n) x net`` (data/nccl.yaml ``pat_latency_us``).
"""

from __future__ import annotations

import math

from .layouts import Communicator

PAT_OPS = ("all_gather", "reduce_scatter")


def pat_unavailable(op: str, comm: Communicator) -> str | None:
    """Why PAT cannot run ``op`` on ``comm``; None if it can."""
    if op not in PAT_OPS:
        return f"pat implements {', '.join(PAT_OPS)}, not {op}"
    if comm.ppn != 1 or comm.n_nodes < 2:
        return (f"pat runs at one GPU per server across servers (NCCL 2.23+), got "
                f"{comm.ppn} GPU(s) per server on {comm.n_nodes} server(s)")
    return None


def pat_latency_s(model, comm: Communicator) -> float:
    """NCCL-style latency of PAT: launch + scale x base + log2(n) network hops."""
    k = model.k
    lat = k.pat_latency_s
    return (k.launch_overhead_s + k.protocol_latency_factor["Simple"] * lat["base"]
            + math.ceil(math.log2(comm.n_ranks)) * lat["net"])
