"""NCCL's own tuner where aws-ofi-nccl's regions leave it the choice: a ring's protocol.

Across AWS p5 instances an all_gather or reduce_scatter has one algorithm, the ring (PAT
needs one GPU per instance, NVLS across instances needs CollNet), and aws-ofi-nccl's tuner
has no region for them at 8 GPUs per instance, so NCCL's own tuner picks the protocol. It
does so with its own model, not with the fabric's real rates: ``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime`` (src/graph/tuning.cc, NVIDIA/nccl v2.28.7-1) price a protocol as

    latency = base + (nsteps - nInter) x max(intra hop, netOverhead [x3 Simple])
              + nInter x (net hop + latencyInter [x2 Simple])
    time    = latency + nBytes / (1000 x busBw x n / (n - 1))

with the plugin's reported network latency as ``latencyInter`` and the bus bandwidth of the
ring graph NCCL's search finds (``nccl_tuner`` block of data/ofi_tuner.yaml, with nccl.yaml's
2.28 base and hop latencies; every value from a source, none fitted). The collective model
takes this choice where the plugin leaves it (:meth:`CollectiveModel.plan`); its EFA ring
costs per protocol are calibration.yaml's (docs/collective-model.md, EFA). The analysis of
the AWS p5 all_gather tables (:mod:`simulator.validation.collectives.efa_protocols`) reads it
too.
"""

from __future__ import annotations

from functools import cache

from .nccl_config import release_entry
from .ofi_tuner import gpus_per_server, nccl_tuner_view

NCCL_RELEASE = "2.28"
RING_ONLY_OPS = ("all_gather", "reduce_scatter")
PROTOCOLS = ("LL", "LL128", "Simple")


@cache
def view(platform: str) -> dict | None:
    """The platform's ``nccl_tuner`` block with NCCL's ring base and hop latencies (us) of
    :data:`NCCL_RELEASE`, or None where the platform gives none."""
    c = nccl_tuner_view(platform)
    if c is None:
        return None
    entry = release_entry(NCCL_RELEASE)[1]
    return {**c, "gpus_per_server": gpus_per_server(platform),
            "base_us": entry["base_latency_us"]["ring"],
            "nvlink_hop_us": entry["hop_latency_us"]["nvlink"]["ring"],
            "net_hop_us": entry["hop_latency_us"]["net"]["ring"]}


def bus_bw_gbps(proto: str, nodes: int, c: dict) -> float:
    """NCCL's ring bus bandwidth of ``proto``: nChannels x bw, with LL128's and LL's factors
    and ceilings."""
    bw = c["graph_channels"] * c["graph_bw_gbps"]
    if proto == "LL128":
        return min(bw * c["ll128_bw_factor"],
                   c["graph_channels"] * c["ll128_max_bw_per_channel_gbps"])
    if proto == "LL":
        return min(c["ll_max_bw_gbps"]["two_nodes" if nodes <= 2 else "more"],
                   bw * c["ll_bw_factor"])
    return bw


def latency_us(proto: str, nodes: int, c: dict) -> float:
    """NCCL's latency of a ring all_gather / reduce_scatter of ``proto`` over ``nodes``
    instances of ``c["gpus_per_server"]`` GPUs."""
    n = c["gpus_per_server"] * nodes
    nsteps, inter_steps = n - 1, nodes - 1
    overhead = c["net_overhead_us"] * (3 if proto == "Simple" else 1)
    intra = max(c["nvlink_hop_us"][proto], overhead)
    inter = c["net_hop_us"][proto] + c["latency_inter_us"] * (2 if proto == "Simple" else 1)
    return c["base_us"][proto] + (nsteps - inter_steps) * intra + inter_steps * inter


def time_us(proto: str, nodes: int, size_bytes: float, c: dict) -> float:
    """NCCL's tuner time of a ring all_gather of ``size_bytes`` (the whole output, nccl-tests'
    size, NCCL's nBytes) over ``nodes`` instances."""
    n = c["gpus_per_server"] * nodes
    algbw = bus_bw_gbps(proto, nodes, c) * n / (n - 1)
    return latency_us(proto, nodes, c) + size_bytes / (1000.0 * algbw)


def switch_bytes(nodes: int, c: dict) -> float:
    """Size (bytes, whole output) from which Simple's tuner time is below LL128's."""
    n = c["gpus_per_server"] * nodes
    extra_us = latency_us("Simple", nodes, c) - latency_us("LL128", nodes, c)
    per_byte = sum(sign / (1000.0 * bus_bw_gbps(p, nodes, c) * n / (n - 1))
                   for p, sign in (("LL128", 1), ("Simple", -1)))
    return extra_us / per_byte


def ring_protocol(platform: str | None, op: str, size: int, n_ranks: int, n_nodes: int,
                  protos) -> str | None:
    """The protocol NCCL's own tuner gives a ring ``op`` of ``size`` bytes, among ``protos``
    (what NCCL_PROTO allows), or None where this does not apply: no platform or no view of
    it, one instance, an op with other algorithms, or not the platform's GPUs per instance."""
    c = view(platform) if platform else None
    if (c is None or op not in RING_ONLY_OPS or n_nodes < 2
            or n_ranks != c["gpus_per_server"] * n_nodes):
        return None
    allowed = [p for p in PROTOCOLS if p in protos]
    return min(allowed, key=lambda p: time_us(p, n_nodes, size, c)) if allowed else None


__all__ = ["NCCL_RELEASE", "RING_ONLY_OPS", "bus_bw_gbps", "latency_us", "ring_protocol",
           "switch_bytes", "time_us", "view"]
