"""Benchmark of the job-level reliability simulation (`clustersim reliability`).

1,000 trials of a 30-day Llama-2-70B FSDP job on 2,048 A100 (256 DGX A100, SuperPOD
fabric) with the shipped reliability-1024gpu failure model (Llama 3 Table 5 rates per
component, plus illustrative leaf/spine switch failures and stragglers), scaled to 256 servers.
Prints the one-off step simulations, then wall time, events and events per second of the
trials. Usage: ``python benchmarks/bench_reliability.py [--trials N] [--workers N]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.reliability.config import CLASSES  # noqa: E402
from simulator.reliability.plan import build_plan  # noqa: E402
from simulator.reliability.runner import run_many, summarise  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--nodes", type=int, default=256)
    args = ap.parse_args()
    scn = load_scenario("reliability-1024gpu", [
        f"cluster.nodes={args.nodes}",
        f"reliability.restart.spare_nodes={max(1, round(0.094 * args.nodes))}"])
    t0 = time.perf_counter()
    plan, info = build_plan(scn, "bench")
    t1 = time.perf_counter()
    results = run_many([plan], args.trials, 0, args.workers)[0]
    t2 = time.perf_counter()
    s = summarise(results, CLASSES)
    wall = t2 - t1
    checkpoints = sum(r.checkpoints for r in results)
    loop = s.events - checkpoints
    print(f"job: {info.world_size} GPUs ({plan.job_nodes} servers), 30 days, "
          f"{args.trials} trials, {args.workers} worker(s)")
    print(f"plan: {t1 - t0:.2f} s ({info.steps.simulations} step simulations, "
          f"iteration {plan.t_base:.3f} s)")
    print(f"trials: {wall:.2f} s wall, {s.events:,} events ({loop:,} failure/recovery/repair "
          f"events + {checkpoints:,} checkpoints), {s.events / wall:,.0f} events/s, "
          f"{loop / wall:,.0f} loop events/s")
    print(f"result: ETTR {s.ettr['mean']:.4f}, {s.interrupts_per_trial:.1f} interrupts per job, "
          f"recovery p99 {s.recovery_s['p99'] / 60:.1f} min")


if __name__ == "__main__":
    main()
