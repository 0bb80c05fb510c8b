"""One rank of the gloo collective microbenchmark (all_reduce / all_gather / reduce_scatter).

Started by ``capture.py bench-collectives`` in each rank's namespace. For each op and size
(``size`` = bytes of the full fp32 tensor: the all_reduce tensor, the all_gather output,
the reduce_scatter input) it runs warm-ups, then ``reps`` back-to-back ops; the time of one
op is (elapsed / reps), the maximum over ranks. Rank 0 writes one JSON line per point.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

OPS = ("all_reduce", "all_gather", "reduce_scatter")


def make_op(op: str, size_bytes: int, world: int):
    n = size_bytes // 4
    n -= n % world
    if op == "all_reduce":
        t = torch.ones(n)
        return (lambda: dist.all_reduce(t)), n * 4
    if op == "all_gather":
        out, inp = torch.empty(n), torch.ones(n // world)
        return (lambda: dist.all_gather_into_tensor(out, inp)), n * 4
    if op == "reduce_scatter":
        out, inp = torch.empty(n // world), torch.ones(n)
        return (lambda: dist.reduce_scatter_tensor(out, inp)), n * 4
    raise ValueError(f"op(={op!r}) must be one of {OPS}")


def measure(fn, budget_s: float, max_reps: int) -> tuple[int, float, list[float]]:
    fn()                                            # warm-up (connections, buffers)
    t0 = time.perf_counter()
    fn()
    one = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(one, op=dist.ReduceOp.MAX)      # every rank agrees on reps
    reps = int(max(3, min(max_reps, budget_s / max(one.item(), 1e-6))))
    dist.barrier()
    stamps = [time.perf_counter()]
    for _ in range(reps):
        fn()
        stamps.append(time.perf_counter())
    per_op = [b - a for a, b in zip(stamps, stamps[1:])]
    mean = torch.tensor([(stamps[-1] - stamps[0]) / reps], dtype=torch.float64)
    dist.all_reduce(mean, op=dist.ReduceOp.MAX)
    return reps, mean.item(), per_op


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--sizes", default="4096,65536,262144,1048576,4194304,16777216,33554432")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--budget-s", type=float, default=1.0, help="target time per point")
    p.add_argument("--max-reps", type=int, default=30)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = []
    for op in a.ops.split(","):
        for size in (int(s) for s in a.sizes.split(",")):
            fn, actual = make_op(op, size, world)
            reps, mean_s, per_op = measure(fn, a.budget_s, a.max_reps)
            rows.append({"op": op, "ranks": world, "size_bytes": actual, "reps": reps,
                         "time_s": mean_s, "rank0_median_s": statistics.median(per_op),
                         "rank0_min_s": min(per_op)})
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        with open(a.out, "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
