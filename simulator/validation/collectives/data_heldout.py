"""Rows of ``measurements.csv`` from tables found outside the shared data (issue 16: the
small-message latency at many servers), kept as printed in ``validation/collectives/raw/``
and used only as the VALIDATION split: nothing is ever fitted on them.

Each file is an nccl-tests table as pasted in its source, with ``#`` comment lines; the
out-of-place time and busbw of every row with a non-zero size are copied unchanged.
"""

from __future__ import annotations

from pathlib import Path

HELDOUT_TABLES = {
    "github_nccl_652_32node_a100.txt": {
        "table_id": "gh_nccl_652_32node", "collective": "all_reduce", "nodes": 32,
        "gpus_per_node": 8, "gpu": "A100-SXM4 (memory size not stated)",
        "interconnect": "InfiniBand HDR, 4x 200G per node (fabric tiers not stated)",
        "nccl": "not stated in excerpt",
        "provenance": ("partial: GitHub issue description, first rows of the table only "
                       "(0-128 B); found for issue 16, held out"),
        "source": "NVIDIA/nccl#652 (description by manjunaths, 2022-03-18): "
                  "https://github.com/NVIDIA/nccl/issues/652",
    },
}


def _table_rows(path: Path) -> list[tuple[int, float, float]]:
    """(size_bytes, out-of-place time_us, out-of-place busbw) of each non-zero-size row."""
    out = []
    for line in path.read_text().splitlines():
        cols = line.split()
        if not cols or cols[0].startswith("#") or int(cols[0]) == 0:
            continue
        out.append((int(cols[0]), float(cols[4]), float(cols[6])))
    return out


def heldout_rows(root: Path) -> list[dict]:
    """Rows of every held-out table in ``<root>/raw``, in file order."""
    rows = []
    for name, meta in HELDOUT_TABLES.items():
        for size, time_us, busbw in _table_rows(Path(root) / "raw" / name):
            rows.append({**{k: meta[k] for k in ("table_id", "collective", "nodes",
                                                  "gpus_per_node")},
                         "ranks": meta["nodes"] * meta["gpus_per_node"], "size_bytes": size,
                         "time_us": time_us, "busbw_GBps": busbw, "derived": "",
                         "placement": "out-of-place", "quality": "WEAK",
                         **{k: meta[k] for k in ("gpu", "interconnect", "nccl", "provenance",
                                                  "source")}})
    return rows


__all__ = ["HELDOUT_TABLES", "heldout_rows"]
