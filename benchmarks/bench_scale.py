"""Benchmark at scale: 1,024 to 131,072 GPUs (DGX A100 SuperPOD fabric, 8 GPUs a server).

Four cases: ``all_reduce`` of 1 GiB and ``all_to_all`` of 64 MiB (flow fidelity, every GPU),
one Llama-2-70B FSDP FULL_SHARD iteration (``fsdp``, the llama2-70b-fsdp-128gpu scenario on
more servers) and one iteration of a 3-D parallel plan (``3d``: Llama 3 405B, Megatron TP8 x
PP8 interleaved x FSDP, 16 micro-batches, the llama3-405b-tp8-pp8-fsdp-512gpu scenario on
more servers of its DGX H100 SuperPOD; the FSDP degree grows with the GPUs). Each case runs twice, each time in a
fresh process:

* whole process, as a user sees it: the ``clustersim`` command (interpreter start, imports,
  topology, layout, simulation, output), wall time and the process's peak RSS;
* in process: the same work through the library, split into setup (topology, cluster, trace
  or nothing) and the rest (layout and simulation), with the SimPy events processed.

Prints one Markdown table row per case and size, with the load average at the end of the
run (the machine is shared: figures on a loaded machine are slower), then a yardstick of
the machine itself (a Python loop, a dict, a numpy sort, best of three): the same commit
reads up to twice as slow on one 2-core machine as on another, so figures from different
machines compare only through it::

    python benchmarks/bench_scale.py [--gpus 1024,4096,16384,131072] [--cases all_reduce,all_to_all,fsdp,3d]
        [--repeat 3] [--clustersim OTHER_TREE/.venv/bin/clustersim]

``--repeat N`` runs the command N times and reports the median wall time with its range
(the machine's spells move a 5 s run by a second); ``--clustersim`` times another tree's
executable as the whole process, for a before/after (run the two in turn, more than once).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ("all_reduce", "all_to_all", "fsdp", "3d")
SCENARIOS = {"fsdp": "llama2-70b-fsdp-128gpu", "3d": "llama3-405b-tp8-pp8-fsdp-512gpu"}
SIZES = {"all_reduce": "1G", "all_to_all": "64M"}


def cli_args(case: str, gpus: int) -> list[str]:
    """The ``clustersim`` command line of ``case`` on ``gpus`` GPUs."""
    nodes = max(1, gpus // 8)
    if case in SCENARIOS:
        return ["run", SCENARIOS[case], "--set", f"cluster.nodes={nodes}"]
    return ["collective", case, "--topology", "dgx-a100-superpod", "--nodes", str(nodes),
            "-b", SIZES[case], "-e", SIZES[case]]


def in_process(case: str, gpus: int) -> dict:
    """Run ``case`` through the library; setup and work seconds, events, peak RSS."""
    if case in SCENARIOS:
        from simulator.pipeline import build_setup, run_setup
        from simulator.scenario import load_scenario
    else:
        from simulator.cluster import Cluster
        from simulator.constants import load_constants
        from simulator.collectives.model import CollectiveModel
        from simulator.collectives.run import simulate_plans
        from simulator.topology.loader import load_topology
        from simulator.units import parse_size
    t0 = time.perf_counter()       # after the imports: those are the whole process's
    if case in SCENARIOS:
        scn = load_scenario(SCENARIOS[case], [f"cluster.nodes={max(1, gpus // 8)}"])
        setup = build_setup(scn)
        t1 = time.perf_counter()
        events = run_setup(setup).metrics.events
    else:
        G = load_topology(ROOT / "topologies" / "dgx-a100-superpod.yaml",
                          nodes=max(1, gpus // 8))
        k = load_constants()
        cluster = Cluster.from_graph(G, k)
        t1 = time.perf_counter()
        plan = CollectiveModel(cluster, k).plan(case, parse_size(SIZES[case]),
                                                list(range(cluster.n_gpus)))
        _, events = simulate_plans(cluster, [plan], "flow")
    t2 = time.perf_counter()
    return dict(setup_s=t1 - t0, work_s=t2 - t1, total_s=t2 - t0, events=events,
                rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def timed(cmd: list[str], timeout_s: float) -> tuple[float, float, str]:
    """Run ``cmd``; (wall seconds, peak RSS MiB, stdout), the RSS from the child's own
    rusage (``os.wait4``); wall ``inf`` past ``timeout_s``."""
    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_scale.{os.getpid()}.out"
    with open(out_path, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, cwd=ROOT)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > timeout_s:
                proc.kill()
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                return float("inf"), float("nan"), ""
            time.sleep(0.02)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = out_path.read_text()
    out_path.unlink()
    return wall, usage.ru_maxrss / 1024, text if proc.returncode == 0 else ""


def row(case: str, gpus: int, timeout_s: float, repeat: int = 1,
        exe: str | None = None) -> str:
    """One table row: the ``clustersim`` command ``repeat`` times (the median wall time,
    with the range when more than one, and the largest peak RSS), then the library once."""
    exe = exe or str(Path(sys.executable).with_name("clustersim"))
    runs = [timed([exe, *cli_args(case, gpus)], timeout_s) for _ in range(repeat)]
    walls = sorted(r[0] for r in runs)
    wall, rss = statistics.median(walls), max(r[1] for r in runs)
    _, _, out = timed([sys.executable, __file__, "--child", case, str(gpus)], timeout_s)
    load = os.getloadavg()[0]
    spread = f" ({walls[0]:.2f}-{walls[-1]:.2f})" if repeat > 1 else ""
    whole = f"{wall:.2f} s{spread}, {rss:,.0f} MiB" if walls[-1] != float("inf") else \
        f"> {timeout_s:.0f} s"
    if not out:
        return f"| {case} | {gpus:,} | {whole} | > {timeout_s:.0f} s | | | | | {load:.1f} |"
    r = json.loads(out)
    eps = r["events"] / r["work_s"] if r["work_s"] > 0 else float("inf")
    return (f"| {case} | {gpus:,} | {whole} | {r['total_s']:.2f} | {r['setup_s']:.2f} | "
            f"{r['work_s']:.2f} | {r['events']:,} | {eps:,.0f} | {r['rss_mib']:,.0f} | "
            f"{load:.1f} |")


def yardstick() -> str:
    """Seconds of three kinds of work a simulation is made of, best of three each: 10
    million Python loop steps, a dict of 500,000 tuple keys (as the cluster's link index)
    and a stable argsort of 4 million integers (as the link classes' refinement)."""
    import numpy as np

    def best(fn) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    def loop() -> None:
        total = 0
        for i in range(10_000_000):
            total += i

    names = [f"n{i}.nic{i % 8}" for i in range(500_000)]
    ints = np.random.default_rng(0).integers(0, 1 << 40, 4_000_000)
    return (f"machine yardstick (best of 3): Python loop {best(loop):.2f} s, dict "
            f"{best(lambda: {(a, b): i for i, (a, b) in enumerate(zip(names, names[1:] + names))}):.2f}"
            f" s, argsort {best(lambda: np.argsort(ints, kind='stable')):.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="1024,4096,16384,131072")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    ap.add_argument("--repeat", type=int, default=1,
                    help="whole-process runs per case and size: the median, and the range")
    ap.add_argument("--clustersim", default=None,
                    help="the executable to time as the whole process (another tree's "
                         "clustersim, for a before/after); the in-process run is this tree's")
    ap.add_argument("--child", nargs=2, metavar=("CASE", "GPUS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(in_process(args.child[0], int(args.child[1]))))
        return
    print("| case | GPUs | whole process (`clustersim`): wall, peak RSS | in process s | "
          "setup s | layout + sim s | events | events/s | in-process peak RSS MiB | "
          "load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in args.cases.split(","):
        for gpus in sorted(int(x) for x in args.gpus.split(",")):
            print(row(case, gpus, args.timeout, max(1, args.repeat), args.clustersim),
                  flush=True)
    # last: its arrays would count in the peak RSS of every child forked after it
    print(f"\n{yardstick()}")


if __name__ == "__main__":
    main()
