"""The H100 rows of ``measurements.csv`` (added for issue 16), normalised from
``shared/validation-data/nccl-tests``: one DGX H100's all_reduce sweep (nccl-tests sample
output, out-of-place columns copied) and the 2 x 8 H100 torch.distributed table (busbw as
measured, ``time_us`` = its latency in ms x 1000, marked derived: only busbw is judged)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

H100_FILES = ("dgx_h100_nccl.csv", "nebius_h100_16gpu.csv")
_WEAK = ("weak: torch.distributed timing loop, not nccl-tests; ring busbw formula; latency "
         "in ms to 3 decimals")


def _dgx_rows(shared: Path) -> list[dict]:
    rows = []
    for r in pd.read_csv(shared / H100_FILES[0]).itertuples(index=False):
        rows.append({
            "table_id": "dgx_h100_1node", "collective": "all_reduce", "nodes": 1,
            "gpus_per_node": 8, "ranks": 8, "size_bytes": r.size_bytes,
            "time_us": r.oop_time_us, "busbw_GBps": r.oop_busbw_GBps, "derived": "",
            "placement": "out-of-place", "quality": "", "gpu": "H100 80GB HBM3 (DGX H100)",
            "interconnect": "NVLink 4 / NVSwitch 3; IB NDR CX7 unused", "nccl": "not printed",
            "provenance": "medium: vendor README sample output, no date or NCCL version",
            "source": r.source})
    return rows


def _nebius_rows(shared: Path) -> list[dict]:
    t = pd.read_csv(shared / H100_FILES[1])
    t = t[(t["record"] == "README") & (t["nodes"] == 2) & t["size_mb_param"].notna()]
    rows = []
    for r in t.drop_duplicates("size_mb_param").itertuples(index=False):
        rows.append({
            "table_id": "nebius_h100_2x8", "collective": "all_reduce", "nodes": 2,
            "gpus_per_node": 8, "ranks": 16, "size_bytes": int(r.size_mb_param) << 20,
            "time_us": round(float(r.latency_ms) * 1000, 3), "busbw_GBps": r.bandwidth_GBps,
            "derived": "time_us", "placement": "out-of-place", "quality": "WEAK",
            "gpu": "H100 80GB HBM3",
            "interconnect": "InfiniBand (rate not stated), NVLink intra-node",
            "nccl": "2.20.5 (PyTorch 2.3.0+cu121)", "provenance": _WEAK, "source": r.source})
    return rows


def h100_rows(shared: Path) -> list[dict]:
    """Rows of both H100 tables, in file order."""
    return _dgx_rows(shared) + _nebius_rows(shared)


__all__ = ["H100_FILES", "h100_rows"]
