"""Benchmark a 3-D parallel plan at scale: GPT-3 175B, Megatron TP8 x PP16 (interleaved, 2
chunks), distributed optimizer, on a DGX A100 SuperPOD of 128 to 16,384 GPUs.

One rank class per pipeline stage (16), whatever the GPU count: the generator's work is
per class. The engine moves the TP / DP groups of a collective and the members of a send as
bundles (simulator/network/bundle.py), so the SimPy events stay the same from 1,024 GPUs
on, and the flow fabric solves on classes of equivalent links (simulator/network/orbits.py),
so a max-min solve costs what the classes do, not the servers; what still grows is laying
out each group's and member's route (once per size). Prints one Markdown row per size: wall time,
CPU seconds (this process) of setup (topology, trace) and replay, the trace's ops, the SimPy
events, events per replay CPU second, the simulated iteration time, and the load average::

    python benchmarks/bench_parallel.py [--gpus 128,1024,4096,16384] [--micro-batches 16]
"""

from __future__ import annotations

import argparse
import os
import time

from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario, resolve_scenario

SCENARIO = "gpt3-175b-megatron-tp8-pp16-selene"


def measure(gpus: int, micro_batches: int) -> str:
    scn = load_scenario(resolve_scenario(SCENARIO), [f"cluster.nodes={gpus // 8}",
                                                     f"training.grad_accum={micro_batches}"])
    w0, c0 = time.perf_counter(), time.process_time()
    setup = build_setup(scn)
    c1 = time.process_time()
    result = run_setup(setup)
    c2, w2 = time.process_time(), time.perf_counter()
    ops = sum(len(c.ops) for c in setup.trace.classes)
    events = result.timeline.events
    eps = events / (c2 - c1) if c2 > c1 else float("inf")
    return (f"| {gpus:,} | {micro_batches} | {w2 - w0:.2f} s | {c1 - c0:.2f} s | "
            f"{c2 - c1:.2f} s | {ops:,} | {events:,} | {eps:,.0f} | "
            f"{result.metrics.iteration_time_s:.3f} s | {os.getloadavg()[0]:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="128,1024,4096,16384")
    ap.add_argument("--micro-batches", type=int, default=16)
    args = ap.parse_args()
    print("| GPUs | micro-batches | wall | setup (CPU) | replay (CPU) | ops | events | "
          "events/s (replay CPU) | iteration | load |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for gpus in (int(g) for g in args.gpus.split(",")):
        print(measure(gpus, args.micro_batches), flush=True)


if __name__ == "__main__":
    main()
