"""Benchmark: `clustersim plan` for Llama-2-70B on 1,024 A100-80GB (128 DGX A100 servers of
the superpod topology), a global batch of 1,024 sequences of 4,096 tokens.

Prints the wall time and the CPU time (a shared machine's wall time follows its load),
each split into the analytical part (enumerate, estimate, prune) and the replays, the
candidates, how many fit, the survivors replayed, the simulated events of the replays and
events per second, and the process's peak RSS:

    python benchmarks/bench_plan.py [--gpus 1024] [--global-batch 1024] [--replay 3]
        [--scenario llama2-70b-fsdp-128gpu]

Issue 43's case (`plan` of a 70B model on 1,024 H100, every candidate, the top 10 replayed,
<= 10 s): ``--scenario llama3-70b-fsdp-tp8-256gpu --gpus 1024 --replay 10 --global-batch
0`` (0: the scenario's own global batch, as ``clustersim plan`` takes it).

Issue 42's campaign cases (one replay each, 20 s of CPU at most or refused):
``--scenario llama2-7b-fsdp-128gpu --gpus 8192 --replay 1 --global-batch 0`` (its replay:
TP2 x CP4 x FSDP, thousands of split CP sends), ``--scenario
gpt3-175b-megatron-tp8-pp16-selene --gpus 8192 --replay 1 --global-batch 0`` and the first
at ``--gpus 32768``; ``cpu_s`` is the process's CPU time, what the campaign counts.

The target (issue 17): 1,000 candidates of a 70B model on 1,024 GPUs in <= 60 s on the
2-core machine. The estimate costs milliseconds per candidate (layer costs and collective
fits are shared between candidates); the replays are most of the time.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from simulator.planner import search
from simulator.planner.batch import global_batch
from simulator.scenario import load_scenario
from simulator.study.executors import cores

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--global-batch", type=int, default=1024)
    ap.add_argument("--replay", type=int, default=3)
    ap.add_argument("--workers", type=int, default=cores(),
                    help="processes the replays run in (plan's --workers) [default: cores]")
    ap.add_argument("--scenario", default="llama2-70b-fsdp-128gpu",
                    help="a shipped scenario's name")
    args = ap.parse_args()
    scn = load_scenario(ROOT / "scenarios" / f"{args.scenario}.yaml",
                        [f"cluster.nodes={max(1, args.gpus // 8)}"])
    if not args.global_batch:            # as `clustersim plan` takes it
        args.global_batch = global_batch(scn)[0]
    marks: list[tuple[str, float, float]] = []

    def progress(msg: str) -> None:
        marks.append((msg, time.perf_counter(), time.process_time()))

    t0, c0 = time.perf_counter(), time.process_time()
    result = search(scn, args.global_batch, replay=args.replay, progress=progress,
                    workers=args.workers)
    t1, c1 = time.perf_counter(), time.process_time()
    estimated, estimated_cpu = next(((t, c) for msg, t, c in marks
                                     if msg.startswith("replaying")), (t1, c1))
    c = result.counts
    replay_s = t1 - estimated
    print(f"gpus={result.gpus} model={result.model} global_batch={args.global_batch}")
    print(f"wall_s={t1 - t0:.1f} (estimate {estimated - t0:.1f}, replays {replay_s:.1f})")
    print(f"search_cpu_s={c1 - c0:.1f} (estimate {estimated_cpu - c0:.1f}, replays "
          f"{c1 - estimated_cpu:.1f})")
    print(f"candidates={c['candidates']} over_memory={c['over memory']} fit={c['fit']} "
          f"replayed={c['replayed']}")
    print(f"events={result.events} events_per_s={result.events / max(replay_s, 1e-9):.0f}")
    own, forked = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                        resource.RUSAGE_CHILDREN))
    print(f"cpu_s={own.ru_utime + own.ru_stime + forked.ru_utime + forked.ru_stime:.1f} "
          f"(the replays' forked processes {forked.ru_utime + forked.ru_stime:.1f})")
    print(f"peak_rss_MiB={max(own.ru_maxrss, forked.ru_maxrss) / 1024:.0f}")
    for i, r in enumerate(result.rows, 1):
        step = f"{r.metrics.iteration_time_s:.3f}" if r.metrics else "n/a"
        print(f"  {i}. {r.candidate.label()}: step {step} s (estimated {r.estimate.step_s:.3f})")


if __name__ == "__main__":
    main()
