"""The AWS p5.48xlarge rows of ``measurements.csv`` (issue 41): nccl-tests all_gather and
alltoall on 2-32 instances (16-256 H100) over EFA, from
``shared/validation-data/nccl-tests/aws_p5/`` (copied unchanged to ``raw/aws_p5/``).

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
_SOURCE = ("crazyguitar/aws-gpu-communication-benchmark@fd167f97ab85009ff342f91e7117a80fd3741f39"
           ":data/{file} (via shared/validation-data/nccl-tests/aws_p5)")
_SETUP = ("nccl-tests -b 32M -e 2048M -f 2 -n 1000 --blocking 0; FI_PROVIDER=efa, "
          "NCCL_BUFFSIZE=8388608, NCCL_P2P_NET_CHUNKSIZE=524288, aws-ofi-nccl tuner plugin")


def table_id(op: str, nodes: int) -> str:
    """``aws_p5_all_gather_4n`` and the like (nccl-tests' ``alltoall`` for all_to_all)."""
    return f"aws_p5_{'alltoall' if op == 'all_to_all' else op}_{nodes}n"


def aws_rows(shared: Path) -> list[dict]:
    """Rows of both tables, in file order."""
    rows = []
    for op, name in AWS_FILES.items():
        for r in pd.read_csv(Path(shared) / AWS_DIR / name).itertuples(index=False):
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
                "provenance": f"medium: published benchmark repository; {_SETUP}",
                "source": _SOURCE.format(file=name)})
    return rows


__all__ = ["AWS_DIR", "AWS_FILES", "aws_rows", "table_id"]
