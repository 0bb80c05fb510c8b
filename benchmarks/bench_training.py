"""Benchmark: one iteration of Llama-2-70B, FSDP FULL_SHARD, 64 to 4,096 A100-80GB.

Prints, per GPU count: wall time split into setup (topology, trace generation, models) and
replay, simulated events, events per second, the trace size (rank classes x ops) and the
process's peak RSS so far:

    python benchmarks/bench_training.py [--gpus 64,256,1024,4096] [--fidelity flow]

Identical ranks are one rank class, so the replay does one rank's work; what grows with
the GPU count is the collectives' layout (rings and trees across every GPU), done once per
communicator and reused.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def bench(gpus: int, fidelity: str) -> dict:
    t0 = time.perf_counter()
    scn = load_scenario(ROOT / "scenarios" / "llama2-70b-fsdp-128gpu.yaml",
                        [f"cluster.nodes={max(1, gpus // 8)}",
                         f"simulation.fidelity={fidelity}"])
    setup = build_setup(scn)
    t1 = time.perf_counter()
    result = run_setup(setup)
    t2 = time.perf_counter()
    m = result.metrics
    return dict(gpus=setup.trace.world_size, classes=len(setup.trace.classes),
                ops=sum(len(c.ops) for c in setup.trace.classes), setup_s=t1 - t0,
                replay_s=t2 - t1, total_s=t2 - t0, events=m.events,
                events_per_s=m.events / (t2 - t1), iteration_s=m.iteration_time_s,
                mfu=m.mfu, rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="64,256,1024,4096")
    ap.add_argument("--fidelity", default="flow", choices=["flow", "analytical"])
    args = ap.parse_args()
    print(f"{'gpus':>6} {'classes':>7} {'ops':>6} {'setup_s':>8} {'replay_s':>8} "
          f"{'total_s':>8} {'events':>7} {'events/s':>9} {'iter_s':>7} {'mfu':>6} {'rss_MiB':>8}")
    for n in (int(x) for x in args.gpus.split(",")):
        r = bench(n, args.fidelity)
        print(f"{r['gpus']:>6} {r['classes']:>7} {r['ops']:>6} {r['setup_s']:>8.2f} "
              f"{r['replay_s']:>8.2f} {r['total_s']:>8.2f} {r['events']:>7} "
              f"{r['events_per_s']:>9.0f} {r['iteration_s']:>7.2f} {100*r['mfu']:>5.1f}% "
              f"{r['rss_mib']:>8.0f}")


if __name__ == "__main__":
    main()
