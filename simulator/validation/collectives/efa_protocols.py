"""Which protocol NCCL's own tuner gives an all_gather ring on AWS p5, and what each costs there.

An analysis of the ``aws_p5_all_gather`` tables, not part of any simulation. On 2, 4 and 8
instances the measured busbw drops where each rank holds 16 MiB and recovers at 32 MiB
(docs/collective-model.md, EFA). aws-ofi-nccl's tuner has no all_gather region for 8 GPUs
per p5 instance, so NCCL 2.28's own tuner chose, with the plugin's reported network latency
(75 us, ``latencyInter``, added once to every protocol's inter-node step and once more to
Simple's, "the flush extra latency"). :func:`nccl_ring_time_us` is that tuner's time of a ring
all_gather (``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``, src/graph/tuning.cc of
v2.28.7-1), with the ring graph NCCL's search finds on p5 (8 channels of 48 GB/s);
:func:`switch_bytes_per_rank` is where it moves from LL128 to Simple. The constants and their
sources are ``validation/collectives/efa_protocols.yaml``.

:func:`fit_protocol_steps` then fits, per protocol, a step cost and a bus bandwidth
(``time = (n - 1) x step + (n - 1) / n x size / busbw``) on the calibration tables (2, 8 and
32 instances) with each row's protocol as the tuner gives it, and scores the held-out tables
(4 and 16 instances) with them: what a per-protocol EFA step cost would do, before anyone
builds it into the model.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import yaml

from simulator.collectives.nccl_config import release_entry
from simulator.validation.collectives.schema import default_root

CONSTANTS_FILE = "efa_protocols.yaml"
GPUS_PER_NODE = 8
PROTOCOLS = ("LL", "LL128", "Simple")
CALIBRATION_NODES = (2, 8, 32)        # the all_gather tables of the calibration split
VALIDATION_NODES = (4, 16)


@cache
def constants(root: Path | None = None) -> dict:
    """``efa_protocols.yaml`` with NCCL's ring base and hop latencies of its release."""
    with open(Path(root or default_root()) / CONSTANTS_FILE) as fh:
        c = yaml.safe_load(fh)
    entry = release_entry(c["nccl_version"])[1]
    return {**c, "base_us": entry["base_latency_us"]["ring"],
            "nvlink_hop_us": entry["hop_latency_us"]["nvlink"]["ring"],
            "net_hop_us": entry["hop_latency_us"]["net"]["ring"]}


def nccl_bus_bw_gbps(proto: str, nodes: int, c: dict) -> float:
    """NCCL's ring bus bandwidth of ``proto`` (GB/s): nChannels x bw, then LL128's and LL's
    factors and ceilings."""
    bw = c["graph_channels"] * c["graph_bw_gbps"]
    if proto == "LL128":
        return min(bw * c["ll128_bw_factor"],
                   c["graph_channels"] * c["ll128_max_bw_per_channel_gbps"])
    if proto == "LL":
        cap = c["ll_max_bw_gbps"]["two_nodes" if nodes <= 2 else "more"]
        return min(cap, bw * c["ll_bw_factor"])
    return bw


def nccl_latency_us(proto: str, nodes: int, c: dict) -> float:
    """NCCL's latency of a ring all_gather of ``proto`` over ``nodes`` p5 instances (us)."""
    n = GPUS_PER_NODE * nodes
    nsteps, inter_steps = n - 1, nodes - 1
    overhead = c["net_overhead_us"] * (3 if proto == "Simple" else 1)
    intra = max(c["nvlink_hop_us"][proto], overhead)
    inter = c["net_hop_us"][proto] + c["latency_inter_us"] * (2 if proto == "Simple" else 1)
    return c["base_us"][proto] + (nsteps - inter_steps) * intra + inter_steps * inter


def nccl_ring_time_us(proto: str, nodes: int, bytes_per_rank: float, c: dict) -> float:
    """NCCL's tuner time of an all_gather of ``bytes_per_rank`` per rank: latency +
    nBytes / (1000 x algbw), nBytes the whole output, algbw = busbw x n / (n - 1)."""
    n = GPUS_PER_NODE * nodes
    algbw = nccl_bus_bw_gbps(proto, nodes, c) * n / (n - 1)
    return nccl_latency_us(proto, nodes, c) + bytes_per_rank * n / (1000.0 * algbw)


def nccl_choice(nodes: int, bytes_per_rank: float, c: dict) -> str:
    """The protocol of least tuner time (ring: the only all_gather algorithm NCCL offers
    across p5 instances: PAT needs 1 GPU per node, NVLS across nodes needs CollNet)."""
    return min(PROTOCOLS, key=lambda p: nccl_ring_time_us(p, nodes, bytes_per_rank, c))


def switch_bytes_per_rank(nodes: int, c: dict) -> float:
    """Bytes per rank from which Simple's tuner time is below LL128's (closed form of
    ``nccl_ring_time_us(LL128) == nccl_ring_time_us(Simple)``)."""
    n = GPUS_PER_NODE * nodes
    extra_us = nccl_latency_us("Simple", nodes, c) - nccl_latency_us("LL128", nodes, c)
    per_byte = sum(s * (n - 1) / (1000.0 * nccl_bus_bw_gbps(p, nodes, c))
                   for p, s in (("LL128", 1), ("Simple", -1)))
    return extra_us / per_byte


def fit_protocol_steps(rows, c: dict) -> dict:
    """Per protocol, (step_us, busbw_GBps) of ``time = (n - 1) x step + (n - 1) / n x size /
    busbw`` fitted by least squares on the rows of :data:`CALIBRATION_NODES` (each row's
    protocol from :func:`nccl_choice`), and the busbw error, (fitted - measured) / measured,
    of every row. ``rows``: (nodes, size_bytes, measured busbw GB/s) of all_gather."""
    table = []
    for nodes, size, busbw in rows:
        n = GPUS_PER_NODE * nodes
        time_us = size / (busbw * n / (n - 1)) / 1000.0      # from algbw, as the tables
        table.append((nodes, size, busbw, n, time_us, nccl_choice(nodes, size / n, c)))
    fitted = {}
    for proto in sorted({r[5] for r in table}):
        cal = [r for r in table if r[5] == proto and r[0] in CALIBRATION_NODES]
        a = np.array([[r[3] - 1, (r[3] - 1) / r[3] * r[1]] for r in cal], float)
        (step, inv_bw), *_ = np.linalg.lstsq(a, np.array([r[4] for r in cal]), rcond=None)
        fitted[proto] = {"step_us": float(step), "busbw_GBps": 1e-3 / float(inv_bw),
                         "rows": len(cal)}
    errors = []
    for nodes, size, busbw, n, _, proto in table:
        f = fitted[proto]
        t = (n - 1) * f["step_us"] + (n - 1) / n * size / (1000.0 * f["busbw_GBps"])
        sim_busbw = size / t / 1000.0 * (n - 1) / n
        errors.append({"nodes": nodes, "size_bytes": size, "protocol": proto,
                       "busbw_err": sim_busbw / busbw - 1.0})
    return {"fitted": fitted, "errors": errors}


def summary(errors: list[dict], nodes: tuple[int, ...], bound: float = 0.15) -> dict:
    """Rows within ``bound``, median and largest |busbw error| over ``nodes``' tables."""
    e = [abs(r["busbw_err"]) for r in errors if r["nodes"] in nodes]
    return {"rows": len(e), "within": sum(x <= bound + 1e-12 for x in e),
            "median": float(np.median(e)), "max": max(e)}


def mib(x: float) -> float:
    return x / 2 ** 20


__all__ = ["CALIBRATION_NODES", "VALIDATION_NODES", "constants", "fit_protocol_steps",
           "mib", "nccl_bus_bw_gbps", "nccl_choice", "nccl_latency_us", "nccl_ring_time_us",
           "summary", "switch_bytes_per_rank"]
