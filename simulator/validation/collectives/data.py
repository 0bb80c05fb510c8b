"""``validation/collectives/measurements.csv`` from the shared nccl-tests CSVs
(:func:`build_measurements`)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd

from simulator.collectives.model import bus_factor
from simulator.outpaths import atomic_write_csv
from simulator.validation.collectives.data_aws import AWS_DIR, aws_heldout_rows, aws_rows
from simulator.validation.collectives.data_h100 import H100_FILES, h100_rows
from simulator.validation.collectives.data_heldout import heldout_rows
from simulator.validation.collectives.schema import (MEASUREMENT_COLUMNS, MEASUREMENTS_FILE,
                                                     OP_NAMES)


def _quality(provenance: str) -> str:
    p = str(provenance).lower()
    return "WEAK" if ("weak" in p or "partial" in p) else ""


AZURE_TABLES = {(1, 8): "azure_ndmv4_1x8", (2, 1): "azure_ndmv4_2x1", (2, 8): "azure_ndmv4_2x8"}
AZURE_PROVENANCE = ("medium: vendor repo doc at a pinned commit, summary table of 3 sizes; "
                    "in-place numbers; nccl-tests run with CUDA graphs (-G 1) and a custom "
                    "NCCL_TOPO_FILE")
_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SOURCE_FILES = ("nccl_tests_a100.csv", "azure_ndmv4_nccl_summary.csv")


def _nccl_tests_rows(shared: Path) -> list[dict]:
    """nccl-tests rows: out-of-place time and busbw, copied."""
    nt = pd.read_csv(shared / _SOURCE_FILES[0])
    rows = []
    for r in nt.itertuples(index=False):
        rows.append({
            "table_id": r.table_id, "collective": OP_NAMES[r.collective], "nodes": r.nodes,
            "gpus_per_node": r.gpus_per_node, "ranks": r.ranks, "size_bytes": r.size_bytes,
            "time_us": r.oop_time_us, "busbw_GBps": r.oop_busbw_GBps, "derived": "",
            "placement": "out-of-place", "quality": _quality(r.provenance), "gpu": r.gpu,
            "interconnect": r.interconnect, "nccl": r.nccl, "provenance": r.provenance,
            "source": r.source,
        })
    return rows


def _azure_values(r, op: str, size: int) -> tuple[float, float, str]:
    """(time_us, busbw_GBps, the derived column) of one Azure summary row."""
    bf = bus_factor(op, int(r.ranks))
    if r.metric == "latency":
        assert r.unit == "us"
        time_us = float(r.value)
        busbw = round(size / (time_us * 1e-6) * bf / 1e9, 6)
        return time_us, busbw, "busbw_GBps"
    assert r.metric == "busbw" and r.unit == "GB/s"
    busbw = float(r.value)
    time_us = round(size / (busbw / bf * 1e9) * 1e6, 3)
    return time_us, busbw, "time_us"


def _azure_rows(shared: Path) -> list[dict]:
    """Azure summary rows: a measured time or busbw, the other one derived."""
    az = pd.read_csv(shared / _SOURCE_FILES[1])
    rows = []
    for r in az.itertuples(index=False):
        op = OP_NAMES[r.collective]
        m = re.fullmatch(r"(\d+)([KMG])", str(r.message_size))
        size = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
        time_us, busbw, derived = _azure_values(r, op, size)
        rows.append({
            "table_id": AZURE_TABLES[(int(r.nodes), int(r.gpus_per_node))], "collective": op,
            "nodes": r.nodes, "gpus_per_node": r.gpus_per_node, "ranks": r.ranks,
            "size_bytes": size, "time_us": time_us, "busbw_GBps": busbw, "derived": derived,
            "placement": r.placement, "quality": "", "gpu": r.gpu,
            "interconnect": r.interconnect, "nccl": r.nccl, "provenance": AZURE_PROVENANCE,
            "source": r.source,
        })
    return rows


def _copy_raw(shared: Path, root: Path) -> None:
    raw = root / "raw"
    raw.mkdir(exist_ok=True)
    for f in _SOURCE_FILES + H100_FILES:
        shutil.copy2(shared / f, raw / f)
    shutil.copytree(shared / AWS_DIR, raw / AWS_DIR, dirs_exist_ok=True)
    for f in sorted((shared / "raw").glob("*.txt")):
        shutil.copy2(f, raw / f.name)


def build_measurements(shared_dir: Path | str, root: Path | str) -> pd.DataFrame:
    """Normalise the shared nccl-tests CSVs into ``<root>/measurements.csv`` and copy the raw
    files next to it (``<root>/raw/``). Measured values are copied unchanged.

    nccl-tests rows: out-of-place time and busbw (the H100 tables: :mod:`.data_h100`; the
    held-out tables found outside the shared data, already in ``<root>/raw``:
    :mod:`.data_heldout`; AWS p5 over EFA, its all_reduce held out: :mod:`.data_aws`).
    Azure summary rows: a latency row gives
    ``time_us`` (busbw derived as size/time x bus factor), a busbw row gives ``busbw_GBps``
    (time derived as size / (busbw / bus factor)); ``derived`` names the computed column.
    """
    shared, root = Path(shared_dir), Path(root)
    rows = (_nccl_tests_rows(shared) + _azure_rows(shared) + h100_rows(shared)
            + heldout_rows(root) + aws_rows(shared) + aws_heldout_rows(root))
    df = pd.DataFrame(rows, columns=MEASUREMENT_COLUMNS)
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_csv(df, root / MEASUREMENTS_FILE, index=False)
    _copy_raw(shared, root)
    return df


__all__ = ["AZURE_PROVENANCE", "AZURE_TABLES", "build_measurements"]
