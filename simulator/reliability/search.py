"""The checkpoint interval that maximises simulated ETTR, next to Young's and Daly's.

Inputs of the formulas: ``delta`` = the blocking time of one checkpoint, ``M`` = the job's
mean time to interrupt from the configured rates (interrupting failures only), ``R`` = the
mean downtime the simulation measured (failure to training again). Candidates are
log-spaced over ``[Daly / span, Daly x span]`` plus Young's, Daly's and the configured
interval; every candidate runs the same trials with the same seeds (common random
numbers), so differences between candidates are not sampling noise of the failures.

``method="grid"`` runs every candidate. ``method="bracket"`` (the study's default) runs only
what finding the best grid point needs: Young's, Daly's and the configured interval, then
the grid points next to Daly's, stepping outwards while the best one is at the edge of what
was run, until the best has a worse (or no) grid neighbour on each side. Every candidate it
runs gives the same result as in the full grid (same plan, trials and seeds); it finds the
grid's best whenever the simulated ETTR rises and then falls along the grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .formulas import daly_interval, expected_ettr, young_interval
from .plan import JobPlan
from .runner import run_many


@dataclass(frozen=True)
class Candidate:
    interval_s: float          # training time between checkpoints
    iterations: int            # checkpoint every this many iterations
    label: str                 # "", "configured", "Young", "Daly"
    ettr: float                # mean over trials
    stderr: float              # standard error of the mean
    expected: float            # Daly's closed form at this interval (or nan)


@dataclass(frozen=True)
class SearchResult:
    delta_s: float
    mtti_s: float
    downtime_s: float
    young_s: float
    daly_s: float
    candidates: tuple          # of Candidate, by interval
    best: Candidate
    trials: int


def configured_iterations(plan: JobPlan) -> int:
    """Iterations between the plan's own checkpoints on the healthy fabric."""
    if plan.interval_s is not None:
        return max(1, math.ceil(plan.interval_s / plan.t_base - 1e-9))
    return plan.every_iterations


def with_interval(plan: JobPlan, tau: float) -> tuple[JobPlan, int]:
    """``plan`` checkpointing every ``tau`` seconds of training (whole iterations)."""
    k = max(1, round(tau / plan.t_base))
    if plan.interval_s is not None:
        return replace(plan, interval_s=k * plan.t_base), k
    return replace(plan, every_iterations=k), k


def search(plan: JobPlan, mtti_s: float, downtime_s: float, points: int, span: float,
           trials: int, seed: int, workers: int, known: list | None = None,
           method: str = "grid") -> SearchResult | None:
    """Run the candidates; None when there is nothing to search (no interrupts).

    ``known``: results already simulated for ``plan`` itself with these ``trials`` and
    ``seed`` (the study's own trials); that candidate is not run again (same seeds, so the
    same results)."""
    if points <= 0 or not math.isfinite(mtti_s):
        return None
    delta = max(plan.costs.block_s, 1e-9)
    young, daly = young_interval(delta, mtti_s), daly_interval(delta, mtti_s)
    grid_s = np.geomspace(daly / span, daly * span, points) if points > 1 else np.array([daly])
    grid = sorted({with_interval(plan, float(tau))[1] for tau in grid_s})
    variants: dict[int, tuple[JobPlan, str]] = {configured_iterations(plan): (plan, "")}
    for tau in list(grid_s) + [young, daly]:
        p, k = with_interval(plan, float(tau))
        variants.setdefault(k, (p, ""))
    labelled = (("configured", configured_iterations(plan)),
                ("Young", with_interval(plan, young)[1]), ("Daly", with_interval(plan, daly)[1]))
    for label, k in labelled:
        variants[k] = (variants[k][0], "/".join(filter(None, (variants[k][1], label))))
    own = configured_iterations(plan) if known is not None and len(known) == trials else None
    runs = _Runs(variants, trials, seed, workers, {own: known} if own is not None else {})
    if method == "grid":
        runs.run(sorted(variants))
    else:
        _bracket(runs, grid, [k for _, k in labelled], with_interval(plan, daly)[1])
    cands = []
    for k in sorted(runs.done):
        e = np.array([r.ettr for r in runs.done[k]])
        tau = k * plan.t_base
        cands.append(Candidate(tau, k, variants[k][1], float(e.mean()),
                               float(e.std(ddof=1) / math.sqrt(len(e))) if len(e) > 1 else 0.0,
                               _expected(tau, delta, downtime_s, mtti_s)))
    best = max(cands, key=lambda c: (c.ettr, -c.interval_s))
    return SearchResult(delta, mtti_s, downtime_s, young, daly, tuple(cands), best, trials)


class _Runs:
    """Trials of the candidates run so far, by checkpoint every-k iterations; each runs once."""

    def __init__(self, variants: dict, trials: int, seed: int, workers: int, done: dict):
        self.variants, self.trials, self.seed, self.workers = variants, trials, seed, workers
        self.done: dict[int, list] = dict(done)

    def run(self, keys) -> None:
        todo = sorted({k for k in keys if k not in self.done})
        if todo:
            plans = [self.variants[k][0] for k in todo]
            self.done.update(zip(todo, run_many(plans, self.trials, self.seed, self.workers)))

    def score(self, k: int) -> tuple[float, float]:
        """What "best" maximises: mean ETTR, then the shorter interval."""
        return float(np.mean([r.ettr for r in self.done[k]])), -k


def _bracket(runs: _Runs, grid: list[int], must: list[int], start: int) -> None:
    """Run ``must`` and the grid around ``start`` until the best grid point run so far has
    both grid neighbours run (or is at an end of the grid)."""
    i = min(range(len(grid)), key=lambda j: (abs(grid[j] - start), j))
    lo, hi = max(0, i - 1), min(len(grid) - 1, i + 1)
    runs.run(list(must) + grid[lo:hi + 1])
    while True:
        best = max(range(lo, hi + 1), key=lambda j: runs.score(grid[j]))
        if best == lo and lo > 0:
            lo -= 1
            runs.run([grid[lo]])
        elif best == hi and hi < len(grid) - 1:
            hi += 1
            runs.run([grid[hi]])
        else:
            return


def _expected(tau: float, delta: float, R: float, M: float) -> float:
    try:
        return expected_ettr(tau, delta, R, M)
    except (ValueError, OverflowError):
        return float("nan")
