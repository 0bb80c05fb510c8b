"""Benchmark of the fleet simulation (`clustersim cluster`, docs/cluster.md).

A generated Seren-like mix (Acme summary) with node failures on DGX A100 SuperPOD fabric:
by default 2,000 jobs on 2,048 GPUs (256 servers) arriving over about a week; ``--nodes
2048 --jobs 8000 --days 30`` is the month on 16,384 GPUs. The arrival rate is set so the
arrivals span ``--days``. Prints the wall time of the build (cluster, job kinds) and of the
run (simulations included), the fleet's events and events per second, how many step
simulations ran (alone, co-simulated, linked sets answered by headroom and the replays
noting their members' link peaks, docs/cluster.md) and the ops they replayed (beside the work bound's estimate), how loaded the cluster was while jobs arrived, how much longer jobs ran
than alone, and the process's CPU time and peak memory. Usage: ``python
benchmarks/bench_fleet.py [--nodes N] [--jobs N] [--days D] [--placement P]``; run it under
``ulimit -v`` on a shared machine.

Those two cases offer 2.5% and 0.2% of the GPUs' time: Acme's jobs are small and short, and
topology placement keeps almost all of them inside one group, so nothing is co-simulated.
``--loaded`` is the case where contention is exercised: 2,000 jobs at load 0.8 with spread
placement and the Llama 3 failure rates (``--jobs 2000 --load 0.8 --placement spread
--failures llama3``): every multi-server job crosses the spine and shares its leaves'
uplinks with the others.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.fleet.build import build_fleet  # noqa: E402
from simulator.fleet.generate import generate_jobs  # noqa: E402
from simulator.fleet.mix import Mix  # noqa: E402
from simulator.fleet.summary import summarize  # noqa: E402
from simulator.reliability.quantities import parse_duration  # noqa: E402

DAY = 86400.0
FAILURES = {
    "node": {"node": "2.9 per 1000 node-days", "repair": "24 h"},
    # the Llama 3 rates of simulator/data/reliability.yaml, each on its own class
    "llama3": {"node": "0.416 per 1000 node-days", "repair": "24 h",
               "gpu": "0.303 per 1000 gpu-days", "nic": "0.0633 per 1000 node-days",
               "link": "0.316 per 1000 node-days", "link_repair": "4 h"},
}


def mix(nodes: int, jobs: int, days: float, placement: str, trace_cluster: str = "Seren",
        failures: str = "node", load: float | None = None) -> Mix:
    data = {"name": "bench", "cluster": {"topology": "dgx-a100-superpod", "nodes": nodes},
            "scheduler": "easy", "placement": placement, "seed": 1,
            "failures": FAILURES[failures],
            "generate": {"cluster": trace_cluster, "jobs": jobs, "load": 1.0,
                         "scenarios": {"resnet50-ddp-8gpu": 1, "bert-large-ddp-8gpu": 1,
                                       "quickstart": 8},
                         "high_priority": 0.1,
                         "checkpoint": {"interval": "30 min", "save": "10 s",
                                        "restore": "1 min"}}}
    if load is not None:                    # a given load: the arrivals span what it makes
        data["generate"]["load"] = load
        return Mix.model_validate(data)
    # the load that spreads the arrivals over ``days``: the span at load 1, over days
    gen = Mix.model_validate(data).generate
    drawn = generate_jobs(gen, nodes * 8, 8, 1)
    span = parse_duration(drawn[-1].arrival)
    data["generate"]["load"] = max(1e-6, round(span / (days * DAY), 6))
    return Mix.model_validate(data)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--placement", default="topology")
    ap.add_argument("--trace-cluster", default="Seren", help="Acme row the jobs are drawn from")
    ap.add_argument("--failures", default="node", choices=sorted(FAILURES))
    ap.add_argument("--load", type=float, default=None,
                    help="offered load instead of --days (the arrivals span what it makes)")
    ap.add_argument("--progress", action="store_true", help="progress lines on stderr")
    ap.add_argument("--loaded", action="store_true",
                    help="--jobs 2000 --load 0.8 --placement spread --failures llama3")
    args = ap.parse_args()
    if args.loaded:
        args.jobs, args.load, args.placement, args.failures = 2000, 0.8, "spread", "llama3"
    if args.progress:
        from simulator.progress import configure
        configure(True)
    t0 = time.perf_counter()
    m = mix(args.nodes, args.jobs, args.days, args.placement, args.trace_cluster,
            args.failures, args.load)
    fleet = build_fleet(m, "bench")
    t1 = time.perf_counter()
    result = fleet.run()
    t2 = time.perf_counter()
    s = summarize(result)
    span = max(spec.arrival_s for spec in fleet.specs) / DAY
    print(f"fleet: {args.jobs} jobs on {fleet.n_gpus:,} GPUs, load {m.generate.load}, "
          f"arrivals over {span:.2f} d, {m.placement} placement, {args.trace_cluster} "
          f"jobs, {args.failures} failures")
    print(f"build: {t1 - t0:.2f} s (cluster, job kinds)")
    print(f"run: {t2 - t1:.2f} s wall, {result.events:,} events, "
          f"{result.events / (t2 - t1):,.0f} events/s; simulations: "
          f"{s['simulations_alone']} alone, {s['simulations_together']} together, "
          f"{s['simulations_bounded']} by headroom ({s['simulations_peaks']} peaks replays), "
          f"{s['simulations_hits']:,} cached; op replays {s['simulations_ops']:,} (estimated "
          f"{s['simulations_ops_estimate']:,.0f} before the first co-simulation)")
    print(f"total: {t2 - t0:.2f} s; simulated {result.end_s / DAY:.2f} d, "
          f"{s['jobs_done']} jobs done, {s['restarts']} restarts, allocated "
          f"{100 * s['allocated']:.1f}% ({100 * s['allocated_arrivals']:.1f}% while jobs "
          f"arrive); slowdown median {s['slowdown_median']:.3f}, p90 {s['slowdown_p90']:.3f}, "
          f"max {s['slowdown_max']:.3f}")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"process: {usage.ru_utime + usage.ru_stime:.1f} s CPU, peak RSS "
          f"{usage.ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
