"""Many independent trials, in parallel processes, and their summary.

Trial ``i`` of a plan always draws from the streams seeded by ``(seed, i)``, whichever
process runs it, and results are gathered back in trial order: the output is the same bit
for bit for any ``workers``.
"""

from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from .engine import run_trial
from .plan import JobPlan
from .results import CATEGORIES, TrialResult

_PLANS: list[JobPlan] = []


def _init(plans: list[JobPlan]) -> None:
    global _PLANS
    _PLANS = plans


def _chunk(task: tuple[int, int, int, int, int]) -> list[TrialResult]:
    index, seed, start, stop, record = task
    return [run_trial(_PLANS[index], seed, i, record=(i == 0 and bool(record)))
            for i in range(start, stop)]


def run_many(plans: list[JobPlan], trials: int, seed: int, workers: int = 1,
             record_first: bool = False) -> list[list[TrialResult]]:
    """``trials`` trials of each plan (the same seeds for every plan: common random
    numbers); trial 0 of each records its timeline when ``record_first``."""
    per = max(1, math.ceil(trials / max(1, workers * 4)))
    tasks = [(j, seed, s, min(s + per, trials), int(record_first))
             for j in range(len(plans)) for s in range(0, trials, per)]
    if workers <= 1:
        _init(plans)
        chunks = [_chunk(t) for t in tasks]
    else:
        with ProcessPoolExecutor(max_workers=workers, initializer=_init,
                                 initargs=(plans,)) as pool:
            chunks = list(pool.map(_chunk, tasks))
    out: list[list[TrialResult]] = [[] for _ in plans]
    for task, chunk in zip(tasks, chunks):
        out[task[0]].extend(chunk)
    return out


def percentiles(values, qs=(50, 99)) -> dict:
    """mean, the given percentiles and max of ``values`` (seconds), or zeros if empty."""
    arr = np.asarray(values, dtype=float)
    if not arr.size:
        return {"n": 0, "mean": 0.0, **{f"p{q}": 0.0 for q in qs}, "max": 0.0}
    return {"n": int(arr.size), "mean": float(arr.mean()),
            **{f"p{q}": float(np.percentile(arr, q)) for q in qs}, "max": float(arr.max())}


@dataclass(frozen=True)
class Summary:
    trials: int
    ettr: dict                 # mean, std, p5, p50, p95, min
    seconds: dict              # mean seconds per category
    share: dict                # mean fraction of wall time per category
    wall_s: dict               # mean, p50, p99, max
    failures: dict             # mean failures per trial, per class
    interrupts_per_trial: float
    mtti_s: float              # simulated: total wall / total interrupts
    downtime_s: dict
    recovery_s: dict
    censored: int              # recoveries cut by the end of the job
    sources: dict              # restore sources: primary / shared copy / scratch
    completed: float           # fraction of iteration-target jobs that finished
    checkpoints: float
    events: int
    worst: dict | None = None  # the longest recovery: its times, failures and spare wait


def summarise(results: list[TrialResult], class_names) -> Summary:
    ettr = np.array([r.ettr for r in results])
    wall = np.array([r.wall_s for r in results])
    secs = np.array([r.seconds for r in results])
    episodes = [e for r in results for e in r.episodes]
    interrupts = sum(r.interrupts for r in results)
    sources: dict[str, int] = {}
    for e in episodes:
        sources[e.source] = sources.get(e.source, 0) + 1
    return Summary(
        trials=len(results),
        ettr={"mean": float(ettr.mean()), "std": float(ettr.std()),
              "p5": float(np.percentile(ettr, 5)), "p50": float(np.percentile(ettr, 50)),
              "p95": float(np.percentile(ettr, 95)), "min": float(ettr.min())},
        seconds={c: float(v) for c, v in zip(CATEGORIES, secs.mean(axis=0))},
        share={c: float(v) for c, v in zip(CATEGORIES, (secs / wall[:, None]).mean(axis=0))},
        wall_s=percentiles(wall),
        failures={c: float(np.mean([r.failures[i] for r in results]))
                  for i, c in enumerate(class_names)},
        interrupts_per_trial=interrupts / len(results),
        mtti_s=float(wall.sum() / interrupts) if interrupts else math.inf,
        downtime_s=percentiles([e.downtime_s for e in episodes]),
        recovery_s=percentiles([e.recovery_s for e in episodes]),
        censored=sum(r.open_episodes for r in results),
        sources=dict(sorted(sources.items())),
        completed=float(np.mean([r.completed for r in results])),
        checkpoints=float(np.mean([r.checkpoints for r in results])),
        events=int(sum(r.events for r in results)),
        worst=_worst(episodes))


def _worst(episodes) -> dict | None:
    """The longest recovery (the first of equals), what explains it: how much of it was
    waiting for repaired servers because the spares ran out, and how many failures it
    merged."""
    if not episodes:
        return None
    e = max(episodes, key=lambda x: x.recovery_s)
    return {"recovery_s": e.recovery_s, "downtime_s": e.downtime_s,
            "spare_wait_s": e.spare_wait_s, "failures": e.failures}
