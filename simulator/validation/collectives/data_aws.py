"""The AWS p5.48xlarge rows of ``measurements.csv`` (issue 41): nccl-tests all_gather and
alltoall on 2-32 instances (16-256 H100) over EFA, from
``shared/validation-data/nccl-tests/aws_p5/`` (copied unchanged to ``raw/aws_p5/``), and the
same benchmark's all_reduce (``raw/aws_p5_nccl_all_reduce.csv``, copied unchanged from the
same commit; not in the shared data, so held out: VALIDATION only, never fitted).

The tables print algbw and busbw only, so ``busbw_GBps`` is the out-of-place busbw as
printed and ``time_us`` = size / out-of-place algbw, marked derived (nccl-tests computes
algbw as size / time, so this is the measured time to the table's 2 printed decimals).
One table per (operation, instance count): ``aws_p5_all_gather_<N>n``,
``aws_p5_alltoall_<N>n``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

AWS_DIR = "aws_p5"
AWS_FILES = {"all_gather": "nccl_all_gather.csv", "all_to_all": "nccl_alltoall.csv"}
AWS_HELDOUT_FILE = "aws_p5_nccl_all_reduce.csv"     # in <root>/raw, not in the shared data
_REPO = "crazyguitar/aws-gpu-communication-benchmark@fd167f97ab85009ff342f91e7117a80fd3741f39"
_SOURCE = _REPO + ":data/{file} (via shared/validation-data/nccl-tests/aws_p5)"
_HELDOUT_SOURCE = _REPO + ":data/nccl_all_reduce.csv (held out: not in the shared data)"
_SETUP = ("nccl-tests -b 32M -e {max_mb}M -f 2 -n 1000 --blocking 0; FI_PROVIDER=efa, "
          "NCCL_BUFFSIZE=8388608, NCCL_P2P_NET_CHUNKSIZE=524288, aws-ofi-nccl tuner plugin")


def table_id(op: str, nodes: int) -> str:
    """``aws_p5_all_gather_4n`` and the like (nccl-tests' ``alltoall`` for all_to_all)."""
    return f"aws_p5_{'alltoall' if op == 'all_to_all' else op}_{nodes}n"


def _file_rows(path: Path, op: str, source: str, max_mb: int) -> list[dict]:
    """The rows of one benchmark CSV, in file order."""
    rows = []
    for r in pd.read_csv(path).itertuples(index=False):
        size = int(r[2]) << 20                      # size(MB): nccl-tests' M, 2^20 B
        algbw, busbw = float(r[5]), float(r[6])     # out-of-place columns
        rows.append({
            "table_id": table_id(op, int(r.Nodes)), "collective": op,
            "nodes": int(r.Nodes), "gpus_per_node": 8, "ranks": int(r.GPUs),
            "size_bytes": size, "time_us": round(size / (algbw * 1e9) * 1e6, 3),
            "busbw_GBps": busbw, "derived": "time_us", "placement": "out-of-place",
            "quality": "", "gpu": "H100 80GB HBM3 (AWS p5.48xlarge)",
            "interconnect": "EFA v2, 32x 100 Gb/s per instance (SageMaker HyperPod)",
            "nccl": "2.28.7 (Dockerfile pin), aws-ofi-nccl 1.16.3",
            "provenance": f"medium: published benchmark repository; {_SETUP.format(max_mb=max_mb)}",
            "source": source})
    return rows


def aws_rows(shared: Path) -> list[dict]:
    """Rows of the shared all_gather and alltoall tables, in file order."""
    return [row for op, name in AWS_FILES.items()
            for row in _file_rows(Path(shared) / AWS_DIR / name, op,
                                  _SOURCE.format(file=name), 2048)]


def aws_heldout_rows(root: Path) -> list[dict]:
    """Rows of the held-out all_reduce table (``<root>/raw``), in file order."""
    return _file_rows(Path(root) / "raw" / AWS_HELDOUT_FILE, "all_reduce", _HELDOUT_SOURCE,
                      8192)


__all__ = ["AWS_DIR", "AWS_FILES", "AWS_HELDOUT_FILE", "aws_heldout_rows", "aws_rows",
           "table_id"]
