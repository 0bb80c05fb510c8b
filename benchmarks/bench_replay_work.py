"""Benchmark: `plan`'s counted replay work against the CPU time the replays take.

For each replay of a plan search, prints the ops counted in its trace
(``simulator.pipeline.replayed_ops``), the units ``--max-work`` counts for it
(``simulator.workunits.counted_replay_units``: ops / OPS_PER_UNIT + GPUs / 10), the CPU
milliseconds of building and replaying it (a unit is meant to be about one), the SimPy
events, events per CPU second, and the counted units' error against the CPU time; then
the errors' median and range per case:

    python benchmarks/bench_replay_work.py [--cases q8,7b128,70b256,7b4096] [--replay N]

``OPS_PER_UNIT`` was fitted (median of ms per op, the GPU part taken off) on the replays
of the first two cases (the calibration split, declared before the fit) and is checked on
the other two (docs/speed.md, "replay work counted"). CPU time, not wall: the machine is
shared.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

from simulator.pipeline import build_setup, replayed_ops, run_setup
from simulator.planner.batch import global_batch
from simulator.scenario import load_scenario
from simulator.workunits import counted_replay_units

search_module = importlib.import_module("simulator.planner.search")

CASES = {   # name: (scenario, --set items, replays); the first two are the calibration split
    "q8": ("quickstart", [], 10),
    "7b128": ("llama2-7b-fsdp-128gpu", [], 10),
    "70b256": ("llama3-70b-fsdp-tp8-256gpu", [], 6),
    "7b4096": ("llama2-7b-fsdp-128gpu", ["cluster.nodes=512"], 4),
}


def measure(name: str, replay: int | None) -> list[dict]:
    scenario, sets, default_replay = CASES[name]
    scn = load_scenario(scenario, sets)
    rows, built = [], {}

    def timed_build(*args, **kwargs):
        t0 = time.process_time()
        setup = build_setup(*args, **kwargs)
        built[id(setup)] = time.process_time() - t0
        return setup

    def timed_run(setup, *args):
        t0 = time.process_time()
        res = run_setup(setup, *args)
        cpu = built.pop(id(setup)) + time.process_time() - t0
        gpus = setup.cluster.n_gpus
        units = counted_replay_units(replayed_ops(setup), gpus)
        rows.append({"ops": replayed_ops(setup), "gpus": gpus, "units": units,
                     "cpu_ms": cpu * 1e3, "events": int(res.metrics.events)})
        return res

    search_module.build_setup, search_module.run_setup = timed_build, timed_run
    try:
        search_module.search(scn, global_batch(scn)[0], replay=replay or default_replay,
                             max_work=10**12)
    finally:
        search_module.build_setup, search_module.run_setup = build_setup, run_setup
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--replay", type=int, default=None)
    args = ap.parse_args()
    print(f"{'case':8} {'GPUs':>6} {'ops':>8} {'units':>6} {'CPU ms':>8} {'events':>8} "
          f"{'events/s':>9} {'error':>7}")
    for name in args.cases.split(","):
        errors = []
        for r in measure(name, args.replay):
            error = r["units"] / r["cpu_ms"] - 1
            errors.append(error)
            print(f"{name:8} {r['gpus']:>6,} {r['ops']:>8,} {r['units']:>6,} "
                  f"{r['cpu_ms']:>8.0f} {r['events']:>8,} "
                  f"{r['events'] / (r['cpu_ms'] / 1e3):>9,.0f} {error:>+7.0%}")
        if errors:
            print(f"# {name}: {len(errors)} replays, error median {statistics.median(errors):+.0%}"
                  f", {min(errors):+.0%} .. {max(errors):+.0%}")


if __name__ == "__main__":
    main()
