"""Per-layer and per-link tables of an iteration (``layers.csv``, ``links.csv``), as pandas
DataFrames; apart from :mod:`.summary` so that computing the metrics needs no pandas."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..engine.records import COMM_KINDS, Timeline
from .summary import critical_class


def layer_breakdown(tl: Timeline) -> pd.DataFrame:
    """Seconds per layer and phase (compute and communication) of the critical class."""
    cls = critical_class(tl)
    rows = [{"layer": r.layer or "-", "phase": r.phase or r.kind,
             "kind": "comm" if r.kind in COMM_KINDS else "compute",
             "seconds": r.end_s - r.start_s} for r in tl.records if r.cls == cls]
    if not rows:
        return pd.DataFrame(columns=["layer", "phase", "kind", "seconds"])
    df = pd.DataFrame(rows).groupby(["layer", "phase", "kind"], sort=False, as_index=False)
    return df["seconds"].sum()


def link_utilization(tl: Timeline, cluster, top: int | None = None) -> pd.DataFrame:
    """Each directed link over the iteration, busiest first (``links.csv``).

    ``wire_bytes``: the payload bytes that crossed the link, as the algorithm lays them
    out (a ring all_reduce of S bytes on n GPUs sends 2(n-1)/n x S out of each GPU), with
    no protocol or transport overhead. ``occupancy_bytes``: the link capacity the transfers
    took, in bytes at the link's usable rate: a protocol or transport that reaches 1/k of
    the bandwidth takes k bytes of it per byte it moves (NCCL's LL, LL128, P2P over PCIe).
    ``utilization``: the fraction of the iteration the link was busy,
    ``occupancy_bytes / (capacity_bytes_per_s x iteration_time_s)``.
    """
    t = tl.iteration_time_s
    occupancy = tl.machine.link_occupancy_bytes
    cap = cluster.capacity_bytes_per_s
    util = occupancy / (cap * t) if t > 0 else occupancy * 0
    ends = {i: e for e, i in cluster.link_id.items()}
    order = np.argsort(-util, kind="stable")
    if top is not None:
        order = order[:top]
    return pd.DataFrame({
        "src": [ends[i][0] for i in order], "dst": [ends[i][1] for i in order],
        "link_type": cluster.link_type[order], "capacity_bytes_per_s": cap[order],
        "wire_bytes": tl.machine.link_bytes[order], "occupancy_bytes": occupancy[order],
        "utilization": util[order]})
