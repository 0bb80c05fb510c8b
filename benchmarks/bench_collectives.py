"""Benchmark: all_reduce of 1 GiB on 8 to 4,096 GPUs (flow fidelity), plus a contended case.

Prints wall time, simulated events, events per second and the size of the flow problem
(flow-link incidences), for one core of the machine it runs on:

    python benchmarks/bench_collectives.py [--gpus 8,64,512,1024,4096] [--size 1G]

Phases timed separately: building the topology graph and cluster index ("build"), laying
out and costing the collective ("plan": routing plus the NCCL tuner over 6 algorithm and
protocol pairs), and the SimPy run ("sim"). "contended" starts, at once, one all_reduce per
server (NVSwitch) and one per rail (8 inter-node rings) with different sizes, so the fabric
re-solves max-min sharing at every completion.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from simulator.cluster import Cluster
from simulator.constants import load_constants
from simulator.collectives.model import CollectiveModel
from simulator.collectives.run import simulate_plans
from simulator.topology.loader import load_topology
from simulator.units import parse_size

ROOT = Path(__file__).resolve().parent.parent


def bench(gpus: int, size: int, contended: bool) -> dict:
    t0 = time.perf_counter()
    nodes = max(1, gpus // 8)
    G = load_topology(ROOT / "topologies" / "dgx-a100-superpod.yaml", nodes=nodes)
    k = load_constants()
    cluster = Cluster.from_graph(G, k)
    model = CollectiveModel(cluster, k)
    t1 = time.perf_counter()
    ranks = list(range(cluster.n_gpus))
    if not contended:
        plans = [model.plan("all_reduce", size, ranks)]
    else:
        plans = [model.plan("all_reduce", size // (1 + s % 7), ranks[8 * s: 8 * s + 8])
                 for s in range(nodes)]
        plans += [model.plan("all_reduce", size // (1 + r), ranks[r::8]) for r in range(8)]
    t2 = time.perf_counter()
    ends, events = simulate_plans(cluster, plans, "flow")
    t3 = time.perf_counter()
    return dict(gpus=cluster.n_gpus, case="contended" if contended else "all_reduce",
                flows=len(plans), incidences=sum(len(p.links) for p in plans),
                build_s=t1 - t0, plan_s=t2 - t1, sim_s=t3 - t2, total_s=t3 - t0,
                events=events, events_per_s=events / (t3 - t2),
                sim_time_ms=max(ends) * 1e3, algo=plans[0].algo, proto=plans[0].proto)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="8,64,512,1024,4096")
    ap.add_argument("--size", default="1G")
    args = ap.parse_args()
    size = parse_size(args.size)
    header = (f"{'case':>10} {'gpus':>6} {'flows':>6} {'incid.':>8} {'build_s':>8} "
              f"{'plan_s':>7} {'sim_s':>7} {'total_s':>8} {'events':>7} {'events/s':>9} "
              f"{'simulated':>10}")
    print(header)
    for contended in (False, True):
        for n in (int(x) for x in args.gpus.split(",")):
            r = bench(n, size, contended)
            print(f"{r['case']:>10} {r['gpus']:>6} {r['flows']:>6} {r['incidences']:>8} "
                  f"{r['build_s']:>8.3f} {r['plan_s']:>7.3f} {r['sim_s']:>7.4f} "
                  f"{r['total_s']:>8.3f} {r['events']:>7} {r['events_per_s']:>9.0f} "
                  f"{r['sim_time_ms']:>8.2f}ms  {r['algo']}/{r['proto']}")
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss_mib:.0f} MiB")


if __name__ == "__main__":
    main()
