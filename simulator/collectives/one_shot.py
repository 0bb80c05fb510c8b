"""RCCL's one-shot all_reduce on a full mesh (MSCCL / MSCCL++ on MI300X).

On an 8-GPU Infinity Fabric mesh RCCL runs small all_reduces with MSCCL's (and, in later
releases, MSCCL++'s) one-shot algorithm (ROCm/rccl#1088 'msccl algorithms tuning for
allreduce on MI300'; ROCm/rccl#1562: 'RCCL integrates other collective communication
libraries, such as msccl, to enhance performance for specific message sizes'): every GPU
writes its whole buffer to each of its peers over the direct link between them and sums
what it receives. One step instead of a ring's ``2 (n - 1)``, at the cost of ``n - 1``
times the ring's bytes per GPU: each directed link carries the whole buffer.

Cost: ``launch + one Infinity Fabric hop (RCCL's ring LL hwLat) + size / link rate``;
no RCCL base latency (MSCCL's kernel is not the chunked ring/tree pipeline that
baseLat stands for). The tuner compares it with the ring and tree by that cost, as
RCCL's MSCCL size ranges were tuned to pick the fastest (#1088); the size ranges
themselves are not read. Simple protocol only (its efficiency 1: no LL flags).
Offered only where it runs: RCCL (an AMD GPU), one server, GPUs joined pairwise by
Infinity Fabric. Checked against rccl-tests in validation/collectives/rccl/.
"""

from __future__ import annotations

from .layouts import Communicator
from .mesh import is_full_mesh


def one_shot_unavailable(model, op: str, comm: Communicator) -> str | None:
    """Why the one-shot all_reduce cannot run ``op`` on ``comm``; None if it can."""
    if op != "all_reduce":
        return f"one_shot implements all_reduce, not {op}"
    if model.gpu.vendor != "amd":
        return (f"one_shot is RCCL's MSCCL all_reduce on an AMD Infinity Fabric mesh; "
                f"{model.gpu.name} runs NCCL")
    if comm.n_nodes != 1 or not is_full_mesh(model.cluster, comm.gpus):
        return ("one_shot runs inside one server whose GPUs are joined pairwise by "
                "Infinity Fabric links (a full mesh)")
    return None


def one_shot_latency_s(model) -> float:
    """Launch overhead + one Infinity Fabric hop (RCCL's ring LL hop latency)."""
    k = model.k
    return k.launch_overhead_s + k.hop_latency_s["infinity_fabric"]["ring"]["LL"]


__all__ = ["one_shot_latency_s", "one_shot_unavailable"]
