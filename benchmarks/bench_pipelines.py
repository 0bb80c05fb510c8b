"""Benchmark the 3-D plans of published runs at their real micro-batch counts (issue 43).

Cases (scenarios in ``benchmarks/scenarios/``, models in ``benchmarks/models/``):

* ``sc21-310b``: Megatron GPT 310B, TP8 x PP16 (interleaved, 2 chunks) x DP15 on 1,920 A100,
  global batch 2,160 (144 micro-batches per pipeline), Narayanan et al. 2021 (SC21);
* ``sc21-530b``: GPT 530B, TP8 x PP35 x DP9 on 2,520 A100, 280 micro-batches;
* ``sc21-1t``: GPT 1T, TP8 x PP64 x DP6 on 3,072 A100, 512 micro-batches;
* ``llama405b-8192``: Llama 3.1 405B, TP8 x PP8 (interleaved) x CP2 x DP64 on 8,192 H100,
  2,048 sequences of 8,192 tokens (16M tokens, 32 micro-batches per pipeline);
* ``llama405b-131072``: the same plan (1F1B) on 131,072 H100 with the 16M-token batch (2
  micro-batches per pipeline).

Each case is the whole process as a user runs it (``clustersim run FILE --format json``
from the repository root): wall time, the SimPy events it reports (all replays of an
extrapolated step together), events per wall second and the peak RSS of the process
(``os.wait4``), the simulated step and whether it was extrapolated. Issue 43's targets:
<= 10 s and <= 2 GiB each, <= 30 s at 131,072 GPUs::

    python benchmarks/bench_pipelines.py [--cases sc21-310b,...] [--repeat 3]
        [--timeout 600] [--clustersim OTHER_TREE/.venv/bin/clustersim]

``--repeat N``: the median wall time of N runs, with their range. ``--clustersim``: another
tree's executable (a before/after: run the two in turn); the scenario files are this
tree's.

``--increments K1,K2,...`` (one case, or a scenario file with a ``training.global_batch``):
whether the case's step repeats, the question :mod:`simulator.accum` asks before it
extrapolates. The case is replayed in full, in this process, at each micro-batch count K
(its global batch set to K pipelines' worth), and a row per count gives the step, its
increment per micro-batch from the previous count, and for each three counts k, k+d, k+2d
the verdict of ``accum.extrapolate`` (``periodic``, ``converging on`` a rank class, or
``no``) and its step at the case's own micro-batch count (where it is ``no``, the line
through the three), against ``--full S`` (the full replay's step, from a run of
the case) where given::

    python benchmarks/bench_pipelines.py --cases sc21-530b --increments 37,38,39,40 \
        --full 54.353061319579986
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from bench_scale import timed       # (wall s, peak RSS MiB, stdout) of a command at the root

CASES = {"sc21-310b": "sc21-310b.yaml", "sc21-530b": "sc21-530b.yaml",
         "sc21-1t": "sc21-1t.yaml", "llama405b-8192": "llama31-405b-8192gpu.yaml",
         "llama405b-131072": "llama31-405b-131072gpu.yaml"}


def row(case: str, exe: str, timeout_s: float, repeat: int) -> str:
    """One Markdown row: the median of ``repeat`` whole-process runs."""
    cmd = [exe, "run", str(Path("benchmarks") / "scenarios" / CASES[case]), "--format",
           "json", "--quiet"]
    runs = [timed(cmd, timeout_s) for _ in range(repeat)]
    walls = sorted(r[0] for r in runs)
    wall, rss = statistics.median(walls), max(r[1] for r in runs)
    load = os.getloadavg()[0]
    done = next((json.loads(r[2]) for r in runs if r[2]), None)
    if done is None:
        what = f"> {timeout_s:.0f} s" if walls[-1] == float("inf") else "failed"
        return f"| {case} | {what} | | | | | | {load:.1f} |"
    spread = f" ({walls[0]:.1f}-{walls[-1]:.1f})" if repeat > 1 else ""
    events = done["events"]
    extra = done.get("extrapolated")
    how = f"from {extra['replayed_micro_steps']}" if extra else "full"
    return (f"| {case} | {wall:.1f} s{spread} | {events:,} | {events / wall:,.0f} | "
            f"{rss:,.0f} MiB | {done['iteration_time_s']:.3f} s | {how} | {load:.1f} |")


def increments(case: str, counts: list[int], full: float | None) -> None:
    """The ``--increments`` table of ``case`` (see the module doc)."""
    from simulator import accum
    from simulator.pipeline import build_setup, run_setup
    from simulator.scenario import load_scenario

    path = Path("benchmarks") / "scenarios" / CASES[case] if case in CASES else Path(case)
    batch = load_scenario(path).training.global_batch
    runs: dict[int, object] = {}
    busy: dict[int, dict] = {}
    n = meta = None
    for k in counts:
        if meta is None:        # the samples of one micro-batch of every pipeline: from K1's
            scn = load_scenario(path, ["training.global_batch=null",
                                       f"training.grad_accum={k}"])
        else:
            scn = load_scenario(path, [f"training.global_batch={batch // n * k}"])
        res = run_setup(build_setup(scn, str(path), extrapolate_steps=False))
        if meta is None:
            meta = res.setup.trace.meta
            n = batch // (meta["global_batch"] // k)
            print(f"# {case}: {n} micro-batches; each count below replayed in full")
            print("| micro-batches | step | increment per micro-batch | window | extrapolated "
                  "| step at full | vs full |")
            print("|---:|---:|---:|---|---|---:|---:|")
        runs[k], busy[k] = res.metrics, accum.class_busy(res.timeline)
        t = runs[k].iteration_time_s
        prev = [j for j in runs if j < k]
        inc = f"{(t - runs[prev[-1]].iteration_time_s) / (k - prev[-1]):.9f}" if prev else ""
        window, verdict, line, off = "", "", "", ""
        d = k - prev[-1] if prev else 0
        if len(prev) >= 2 and prev[-1] - prev[-2] == d and (n - k) % d == 0:
            ks = (prev[-2], prev[-1], k)
            plan = accum.AccumPlan(n, (), lambda: None, {**meta, "grad_accum": n}, ks)
            done = accum.extrapolate(plan, [runs[j] for j in ks], 1.0,
                                     busy=[busy[j] for j in ks])
            step = (done[0].iteration_time_s if done else
                    t + (n - k) // d * (t - runs[prev[-1]].iteration_time_s))
            window, verdict, line = str(ks), done[1].pace_text() if done else "no", f"{step:.6f}"
            off = f"{(step - full) / full:+.4%}" if full else ""
        print(f"| {k} | {t:.9f} | {inc} | {window} | {verdict} | {line} | {off} |",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    ap.add_argument("--clustersim", default=str(Path(sys.executable).with_name("clustersim")),
                    help="the executable to time (another tree's, for a before/after)")
    ap.add_argument("--increments", help="K1,K2,...: replay one case at these "
                    "micro-batch counts and say whether its step repeats (module doc)")
    ap.add_argument("--full", type=float, help="with --increments: the full replay's step, s")
    args = ap.parse_args()
    if args.increments:
        if "," in args.cases:
            ap.error("--increments takes one case (--cases NAME or a scenario file)")
        increments(args.cases, [int(k) for k in args.increments.split(",")], args.full)
        return
    print(f"# {args.clustersim}")
    print("| case | wall | events | events/s | peak RSS | step | replayed | load |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for case in args.cases.split(","):
        print(row(case, args.clustersim, args.timeout, max(1, args.repeat)), flush=True)


if __name__ == "__main__":
    main()
