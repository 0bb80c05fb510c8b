"""A whole reliability study of one scenario: plan, trials, summary, interval search."""

from __future__ import annotations

import time
from dataclasses import dataclass

from simulator.progress import stage
from simulator.scenario import Scenario

from .config import CLASSES, ReliabilityCfg
from .plan import JobPlan, PlanInfo, build_plan
from . import work
from .results import TrialResult
from .runner import Summary, run_many, summarise
from .search import SearchResult, search


@dataclass(frozen=True)
class Study:
    scenario: Scenario
    cfg: ReliabilityCfg
    plan: JobPlan
    info: PlanInfo
    results: list[TrialResult]
    summary: Summary
    search: SearchResult | None
    seed: int
    workers: int
    timings_s: dict            # plan (step simulations), trials, search


def run_study(scn: Scenario, source: str, trials: int, seed: int = 0, workers: int = 1,
              record: bool = False, with_search: bool = True,
              remember_steps: bool = False, max_events: int | None = None) -> Study:
    """Simulate ``trials`` runs of the scenario's job, then search the interval
    (``remember_steps``: see :func:`~simulator.reliability.plan.build_plan`).

    :raises ConfigError: past ``max_events`` trial events (:mod:`.work`), before any trial.
    """
    cfg = scn.reliability or ReliabilityCfg()
    t0 = time.perf_counter()
    points = cfg.search.points if with_search else 0

    def bound(arrivals: float) -> None:
        work.check(arrivals, trials, points, cfg.search.trials or trials, max_events)

    plan, info = build_plan(scn, source, cfg, remember_steps, workers, before_steps=bound)
    bound(work.arrivals_per_trial(plan))           # an iteration job: at the step time
    t1 = time.perf_counter()
    stage(f"reliability: {trials} trials on {workers} worker(s)")
    results = run_many([plan], trials, seed, workers, record_first=record)[0]
    summary = summarise(results, CLASSES)
    t2 = time.perf_counter()
    found = None
    if with_search:
        stage("reliability: searching the checkpoint interval")
        found = search(plan, info.mtti_s, summary.downtime_s["mean"], cfg.search.points,
                       cfg.search.span, cfg.search.trials or trials, seed, workers,
                       known=results, method=cfg.search.method)
    t3 = time.perf_counter()
    return Study(scn, cfg, plan, info, results, summary, found, seed, workers,
                 {"plan": t1 - t0, "trials": t2 - t1, "search": t3 - t2})
