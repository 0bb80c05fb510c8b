"""PAT (Parallel Aggregated Trees, NCCL 2.23+): all_gather and reduce_scatter at one GPU
per server, in log2(n) steps instead of a ring's n - 1.

Bandwidth: each rank still sends and receives (n-1)/n of the buffer, over the ring's
links (the same bytes cross the same NICs), so the edges are the ring's, at NCCL's PAT
bandwidth factor (0.75, data/nccl.yaml ``bandwidth_factor.pat``). Latency as NCCL 2.28's
tuning.cc: ``base + floor(log2 nNodes) x net / 3.5 + nRanks x per_rank``
(``pat_latency_us``, ``pat_log_latency_divisor``).
"""

from __future__ import annotations

import math
from functools import cache

from ..constants import read_data
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


@cache
def _log_divisor() -> float:
    return float(read_data("nccl.yaml")["pat_log_latency_divisor"])


def pat_latency_s(model, comm: Communicator) -> float:
    """NCCL's latency of PAT: launch + scale x base + floor(log2 nNodes) x net / 3.5 +
    nRanks x per_rank (the calibrated factor scales the base only, as for a tree's levels
    between servers)."""
    k = model.k
    lat = k.pat_latency_s
    levels = int(math.log2(comm.n_nodes))            # NCCL's log2i
    return (k.launch_overhead_s + k.protocol_latency_factor["Simple"] * lat["base"]
            + levels * lat["net"] / _log_divisor() + comm.n_ranks * lat["per_rank"])
