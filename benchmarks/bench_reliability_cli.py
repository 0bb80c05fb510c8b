"""Whole-process benchmark of `clustersim reliability`, as a user runs it.

1,000 trials of a 30-day Llama-2-70B FSDP job with the reliability-1024gpu failure model,
scaled to ``--nodes`` servers (8 A100 each; spares 9.4 % of the servers, as 12 of 128), the
default interval search included. Per size: the median of ``--repeat`` runs of wall time,
CPU seconds (user + system, all its processes: less sensitive to a loaded machine), the
plan / trials / search split (``--timings``), the trials simulated (the study's own plus
each interval candidate's), trials per second of trials and search together and the peak
RSS of the runs.

Usage: ``python benchmarks/bench_reliability_cli.py [--nodes 32 256 2048] [--repeat 3]
[--clustersim PATH]`` (``--clustersim`` another tree's, e.g. ``/work/main/.venv/bin/clustersim``,
for a before/after).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def one_run(clustersim: str, nodes: int, trials: int) -> dict:
    spares = max(1, round(0.094 * nodes))
    cmd = [clustersim, "reliability", "reliability-1024gpu", "--trials", str(trials),
           "--set", f"cluster.nodes={nodes}", "--set",
           f"reliability.restart.spare_nodes={spares}", "--format", "json", "--timings"]
    t0, c0 = time.perf_counter(), os.times()
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall, c1 = time.perf_counter() - t0, os.times()
    cpu = c1.children_user - c0.children_user + c1.children_system - c0.children_system
    found = json.loads(done.stdout).get("interval_search") or {"candidates": []}
    # the configured interval's candidate reuses the study's own trials where it can
    ran = len(found["candidates"]) - 1 if found["candidates"] else 0
    split = dict(re.findall(r"(\w+) ([\d.]+) s", done.stderr.splitlines()[-1]))
    return {"wall_s": wall, "cpu_s": cpu, "simulated": trials * (1 + ran),
            "candidates": len(found["candidates"]), **{k: float(v) for k, v in split.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[32, 256, 2048])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--clustersim", default=str(Path(sys.executable).with_name("clustersim")))
    args = ap.parse_args()
    print(f"{args.clustersim}: {args.trials} trials, median of {args.repeat}")
    print("| GPUs | wall s | CPU s | plan s | trials s | search s | candidates | trials run "
          "| trials/s | peak RSS MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for nodes in args.nodes:
        runs = [one_run(args.clustersim, nodes, args.trials) for _ in range(args.repeat)]
        med = {k: statistics.median(r[k] for r in runs)
               for k in ("wall_s", "cpu_s", "plan", "trials", "search")}
        n = runs[0]["simulated"]
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"| {8 * nodes:,} | {med['wall_s']:.2f} | {med['cpu_s']:.1f} | {med['plan']:.2f} | "
              f"{med['trials']:.2f} | {med['search']:.2f} | {runs[0]['candidates']} | "
              f"{n:,} | {n / (med['trials'] + med['search']):,.0f} | {rss:.0f} |", flush=True)


if __name__ == "__main__":
    main()
