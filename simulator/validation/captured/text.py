"""The words of validation/traces/captured.md around the numbers (see :mod:`.report`)."""

from __future__ import annotations

import pandas as pd

from simulator.errors import ConfigError

from simulator.validation.captured.validate import (REPLAY_BOUND, SCALING_BOUND, WHATIF_BOUND,
                                                   import_run, load_runs)
from simulator.validation.common import md_table


def recorded_compute(runs=None) -> pd.DataFrame:
    """Per run: host compute recorded in the trace (sum of the compute ops of the host
    stream, mean over ranks and profiled steps) and the run's measured median."""
    rows = []
    for run in runs if runs is not None else load_runs():
        total, forward = [], []
        for step in run.steps:
            try:
                trace = import_run(run, step)
            except ConfigError:         # listed with the reason under the cases
                continue
            ops = [(op.phase, op.duration_s or 0.0) for cls in trace.classes for op in cls.ops
                   if op.kind == "compute" and op.stream == "host"]
            n = len(trace.classes)
            total.append(sum(d for _, d in ops) / n)
            forward.append(sum(d for p, d in ops if p == "forward") / n)
        rows.append({"run": run.run_id, "job": run.job, "ranks": run.ranks,
                     "bandwidth": run.bandwidth,
                     "host compute in the trace (s)": f"{sum(total) / len(total):.3f}",
                     "of which labelled forward (s)": f"{sum(forward) / len(forward):.3f}",
                     "measured median (s)": f"{run.measured_s:.3f}",
                     "profiled steps, median (s)": f"{run.profiled_s:.3f}"})
    return pd.DataFrame(rows)


def mwms_reduce_order(runs=None) -> pd.DataFrame:
    """Per TensorFlow run, profiled step and worker: when the last gradient op
    (``gradient_tape/...``) ends and when the first ``CollectiveReduceV2`` (the packed
    gradient all-reduce) starts, in ms from the step's start. Whether Keras ``fit`` under
    MultiWorkerMirroredStrategy overlaps the reduction with backward, read off real runs."""
    from simulator.importers.tensorflow import read_tf_profile, step_marks
    rows = []
    for run in runs if runs is not None else load_runs():
        if run.framework != "tensorflow":
            continue
        for worker, path in enumerate(run.files):
            events, _ = read_tf_profile(path)
            marks = step_marks(events)
            for step in run.steps:
                mark = marks.get(step)
                if mark is None:
                    continue
                inside = [e for e in events if mark.ts <= e.ts and e.end <= mark.end]
                grads = [e.end for e in inside if e.name.startswith("gradient_tape/")]
                reduces = [e.ts for e in inside if e.name.endswith(":CollectiveReduceV2")]
                if not grads or not reduces:
                    continue
                last_grad, first_reduce = max(grads), min(reduces)
                rows.append({"run": run.run_id, "step": step, "worker": worker,
                             "last gradient op ends (ms)": round(1e3 * (last_grad - mark.ts), 1),
                             "first all-reduce starts (ms)":
                                 round(1e3 * (first_reduce - mark.ts), 1),
                             "gap (ms)": round(1e3 * (first_reduce - last_grad), 1)})
    return pd.DataFrame(rows)


def _mwms_order_text() -> str:
    order = mwms_reduce_order()
    if order.empty:
        return "No TensorFlow run in the data."
    after = int((order["gap (ms)"] >= 0).sum())
    return (f"In {after} of {len(order)} profiled (step, worker) pairs the gradient "
            "all-reduce starts after the last gradient op has ended (gap "
            f"{order['gap (ms)'].min():.1f} to {order['gap (ms)'].max():.1f} ms): Keras `fit` "
            "under MultiWorkerMirroredStrategy reduces after the backward pass, which is what "
            "`tf_multiworker` does by default (`overlap: false`).\n\n" + md_table(order))


def _line(df: pd.DataFrame, kind: str) -> str:
    g = df[df.kind == kind]
    if g.empty:
        return f"- {kind}: no case in the data."
    n_ok = int((g.status == "pass").sum())
    return (f"- **{kind}**: {n_ok} of {len(g)} within the bound; median |error| "
            f"{100 * g.error.abs().median():.1f}%, largest {100 * g.error.abs().max():.1f}% "
            f"({g.loc[g.error.abs().idxmax(), 'case'].replace('captured/', '')}).")


def _skipped(df: pd.DataFrame) -> str:
    """The profiled steps that could not be imported, once per trace and step."""
    seen = {}
    for src, steps in zip(df.source, df.simulated_steps_s):
        for step, v in steps.items():
            if not isinstance(v, float):
                seen[(src, step)] = v
    if not seen:
        return "Every profiled step of every trace was replayed."
    lines = [f"- `{src}` step {step}: {why}" for (src, step), why in sorted(seen.items())]
    return ("Profiled steps not replayed (their cases use the other steps). The importer "
            "refuses a step in which the ranks recorded different collectives, e.g. the "
            "last profiled step when one worker's profiler stopped before recording its "
            "final (loss) all-reduce:\n\n" + "\n".join(lines))


def report_text(df: pd.DataFrame, data: dict, tables: dict[str, str], constants: str,
                misses: str) -> str:
    slow = data["cpu"].get("pytorch", {}).get("shared_core_slowdown")
    slow_text = f"{slow:.2f}" if slow else "not measured"
    return f"""# Captured CPU runs: replay, what-if across link bandwidths, 2 -> 4 rank scaling

Generated by `clustersim validate captured` (`simulator/validation/captured*.py`); do not
edit. Data: `captured_runs.csv` and `captured/<run>/` (how they were captured:
`captured/README.md`); the machine description: `capture_description.yaml`.

**Target.** Every error is simulated / measured - 1, where *measured* is the run's
`iter_time_median_s`: the median of its timed steps, run without the profiler. The
*simulated* time is the mean over the run's profiled steps (each replayed on its own). The
last column of each table says how far the target run's own profiled steps were from that
median (for a replay: the trace's own error before any simulation).

**Summary.**

{_line(df, "replay")}
{_line(df, "what-if")}
{_line(df, "scaling")}

## The capture machine as the simulator sees it

N CPU ranks, each on its own `tc`-shaped link (the run's bandwidth, both directions) to one
bridge (`simulator/validation/captured/machine.py`). Collectives are costed from the gloo
microbenchmarks only (`capture_machine.csv`, fitted by
`simulator/validation/captured/calibration.py`; no training run is used): latency alpha and
the share of the link gloo achieves, per link bandwidth, rank count and collective; each
collective is a flow on every rank's uplink and downlink, so concurrent ones share the
link. Compute and host time are the trace's recorded durations. Going from 2 to 4 ranks on
the 2-core machine stretches compute by the microbenchmarked shared-core slowdown
({slow_text}: the kernel mix with 4 processes on 2 cores against 2 processes).

{constants}

## Replay (bound {REPLAY_BOUND:.0%})

{tables["replay"]}

## What-if: the same trace at the other bandwidths (bound {WHATIF_BOUND:.0%})

Only the link bandwidth and the gloo constants measured at it change; compute and host
time come from the source trace, the collectives are re-simulated.

{tables["what-if"]}

## Scaling: 2-rank trace -> 4-rank run (bound {SCALING_BOUND:.0%})

Rank r of the 4-rank job runs the recorded ops of rank r mod 2 (same per-rank batch and
work; DDP buckets and FSDP2's gathered/reduced sizes are per whole buffer and do not change;
FSDP2's optimizer step works on a shard half as big), compute is stretched by the
shared-core slowdown, and the collectives are re-planned with the 4-rank gloo constants
(`simulator/validation/captured/scaling.py`).

{tables["scaling"]}

## Cases out of bound

{misses}

{_skipped(df)}

## When does MultiWorkerMirroredStrategy reduce the gradients?

The TensorFlow traces answer the question the `overlap` option leaves open
(`docs/tensorflow-strategies.md`).

{_mwms_order_text()}

## Compute recorded in each trace

What the what-if and the scaling keep from the source trace (per rank, mean over the
replayed steps). The same job's compute differs between its runs at different link speeds,
in the forward pass too, where no collective runs: the machine's speed drifts between runs
(`captured/README.md`: up to 23% run to run at 10 and 1 Gbit/s), and gloo's threads and the
kernel's veth/tbf work share the two cores with the ranks. A what-if cannot know either.
(DDP and TensorFlow label their forward pass; FSDP2's forward runs in unlabelled segments.)

{md_table(recorded_compute())}

Files: `captured_cases.csv` (every case, times in seconds), `captured.png`
(measured vs simulated; iteration time against bandwidth).
"""
