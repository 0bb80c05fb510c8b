"""The AWS p5 all_gather tables against NCCL's own protocol choice: an analysis.

On 2, 4 and 8 instances the measured busbw drops where each rank holds 16 MiB and recovers at
32 MiB. aws-ofi-nccl's tuner has no all_gather region for 8 GPUs per p5 instance, so NCCL
2.28's own tuner chose (:mod:`simulator.collectives.nccl_own_tuner`): it moves the ring from
LL128 to Simple between 10.7 and 16.4 MiB per rank (2 to 32 instances), so 16 MiB per rank is
the first Simple size on 2-8 instances and still LL128 on 16.

:func:`fit_protocol_steps` fits, per protocol, a step cost and a bus bandwidth
(``time = (n - 1) x step + (n - 1) / n x size / busbw``) on the calibration tables (2, 8 and
32 instances), each row at the protocol NCCL's tuner gives it, and scores every table with
them: the shape a per-protocol EFA step cost gives, independent of the collective model.
"""

from __future__ import annotations

import numpy as np

from simulator.collectives.nccl_own_tuner import ring_protocol, switch_bytes, view

PLATFORM = "p5_p5e"
GPUS_PER_NODE = 8
PROTOCOLS = ("LL", "LL128", "Simple")
CALIBRATION_NODES = (2, 8, 32)        # the all_gather tables of the calibration split
VALIDATION_NODES = (4, 16)


def choice(nodes: int, size_bytes: int) -> str:
    """NCCL's own protocol for an all_gather of ``size_bytes`` on ``nodes`` p5 instances."""
    return ring_protocol(PLATFORM, "all_gather", size_bytes, GPUS_PER_NODE * nodes, nodes,
                         PROTOCOLS)


def switch_mib_per_rank(nodes: int) -> float:
    """Where NCCL's tuner moves from LL128 to Simple, in MiB per rank."""
    return switch_bytes(nodes, view(PLATFORM)) / (GPUS_PER_NODE * nodes) / 2 ** 20


def fit_protocol_steps(rows) -> dict:
    """Per protocol, (step_us, busbw_GBps) fitted by least squares on the rows of
    :data:`CALIBRATION_NODES`, and each row's busbw error, (fitted - measured) / measured.
    ``rows``: (nodes, size_bytes, measured busbw GB/s) of all_gather."""
    table = []
    for nodes, size, busbw in rows:
        n = GPUS_PER_NODE * nodes
        time_us = size / (busbw * n / (n - 1)) / 1000.0      # from algbw, as the tables
        table.append((nodes, size, busbw, n, time_us, choice(nodes, size)))
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
        errors.append({"nodes": nodes, "size_bytes": size, "protocol": proto,
                       "busbw_err": size / t / 1000.0 * (n - 1) / n / busbw - 1.0})
    return {"fitted": fitted, "errors": errors}


def summary(errors: list[dict], nodes: tuple[int, ...], bound: float = 0.15) -> dict:
    """Rows within ``bound``, median and largest |busbw error| over ``nodes``' tables."""
    e = [abs(r["busbw_err"]) for r in errors if r["nodes"] in nodes]
    return {"rows": len(e), "within": sum(x <= bound + 1e-12 for x in e),
            "median": float(np.median(e)), "max": max(e)}


__all__ = ["CALIBRATION_NODES", "VALIDATION_NODES", "choice", "fit_protocol_steps",
           "summary", "switch_mib_per_rank"]
