"""One rank of a contention-capture job: a loop of gloo all_reduces of a known size.

Run by ``capture_contention.py`` inside the rank's network namespace, with the capture venv's
Python (torch, CPU). Environment: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``,
``GLOO_SOCKET_IFNAME`` (torch's), and the arguments below. After the process group is up and
``--warmup`` all_reduces are done, the rank writes ``<dir>/ready.<job>.<rank>`` and waits for
``<dir>/go`` (the driver writes it, with the common start time, once every rank of every job
of the run is ready), sleeps until that time and then runs all_reduces back to back. The
loop stops together on every rank of the job: rank 0 puts a stop flag in the first element
of the tensor it reduces (the sum reaches every rank), so no extra collective is timed.
Each rank writes ``<dir>/steps.<job>.<rank>.json``: the unix start and end of every step.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


def start_time(go: Path, polls: int = 30_000) -> float:
    """The common start (unix s) the driver writes to ``go``, polled every 10 ms."""
    for _ in range(polls):
        if go.exists():
            return float(go.read_text())
        time.sleep(0.01)
    raise SystemExit(f"{go} did not appear in {polls / 100:.0f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", required=True)
    p.add_argument("--size-bytes", type=int, required=True, help="fp32 tensor bytes")
    p.add_argument("--run-s", type=float, required=True,
                   help="rank 0 starts no step after start + run_s")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--dir", type=Path, required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    x = torch.zeros(a.size_bytes // 4, dtype=torch.float32)
    for _ in range(a.warmup):
        dist.all_reduce(x)
    (a.dir / f"ready.{a.job}.{rank}").write_text("")
    start = start_time(a.dir / "go")
    time.sleep(max(0.0, start - time.time()))
    steps = []
    while True:
        x[0] = 1.0 if rank == 0 and time.time() > start + a.run_s else 0.0
        t0 = time.time()
        dist.all_reduce(x)
        steps.append((t0, time.time()))
        if x[0].item() > 0:
            break
    out = {"job": a.job, "rank": rank, "size_bytes": a.size_bytes, "start_unix_s": start,
           "torch": torch.__version__, "steps": steps}
    (a.dir / f"steps.{a.job}.{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
