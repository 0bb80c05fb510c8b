"""Iteration times of every distinct configuration the job can run in, simulated once each.

The healthy fabric, each degraded fabric (one representative failed link or spine per
symmetry group, :mod:`simulator.reliability.inventory`) and each straggler factor (rank 0's
compute slowed) are replayed with the training-step simulation; the job-level loop only
looks the times up. With ``job.iteration_time`` given, nothing is simulated: a degraded
fabric keeps that time and a straggler multiplies it by its factor (a synchronous step waits
for its slowest rank).

:func:`scenario_step_table` remembers the tables of the last few jobs in the process, keyed
by exactly what the step simulations read (the scenario without its ``reliability`` section,
the model and topology files by content, the fabric states and straggler factors): points of
a study (``clustersim study`` of ``reliability``) that change only the checkpoint policy or
the failure rates do not simulate the same iterations again.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from simulator.cluster import Cluster
from simulator.energy.model import JobPower
from simulator.energy.timeline import job_power
from simulator.evaluation import EvalPass, evaluation_pass
from simulator.forkpool import fork_pool
from simulator.pipeline import Setup, build_setup, run_setup, with_trace
from simulator.scenario import Scenario
from simulator.topology.build import scenario_cluster
from simulator.trace.transform import apply_stragglers

from .inventory import degraded_graph


@dataclass(frozen=True)
class StepTable:
    """Iteration time per configuration key; ``"healthy"`` is the baseline."""

    times_s: dict[str, float]
    simulated: bool
    metrics: dict | None          # the healthy step's metrics (``Metrics.as_dict()``)
    tokens_per_iteration: float
    simulations: int
    wall_s: float
    extrapolated: dict | None = None   # the healthy step came from a few micro-steps (accum)
    power: JobPower | None = None      # the job's facility power busy and idle (simulated)
    evaluation: EvalPass | None = None  # the scenario's evaluation pass (simulated)

    @property
    def base_s(self) -> float:
        return self.times_s["healthy"]


def straggler_key(factor: float) -> str:
    return f"straggler x{factor:g}"


MEMO_SIZE = 16                 # jobs whose step tables a process keeps
_MEMO: dict[str, StepTable] = {}


def scenario_step_table(scn: Scenario, source: str, cluster: Cluster,
                        reroutes: dict[str, tuple], straggler_factors: list[float],
                        given_s: float | None, workers: int = 1) -> StepTable:
    """:func:`step_table` of ``cluster`` = ``scenario_cluster(scn)``, simulated once per
    distinct input in this process (module doc)."""
    if given_s is not None:
        return step_table(scn, source, cluster, reroutes, straggler_factors, given_s)
    key = _memo_key(scn, reroutes, straggler_factors)
    if key not in _MEMO:
        _MEMO[key] = step_table(scn, source, cluster, reroutes, straggler_factors, None,
                                workers)
        while len(_MEMO) > MEMO_SIZE:
            del _MEMO[next(iter(_MEMO))]
    return _MEMO[key]


def _memo_key(scn: Scenario, reroutes: dict, factors: list[float]) -> str:
    data = scn.model_dump(mode="json", exclude={"reliability"})
    data["model"] = _content(data["model"])
    data["cluster"]["topology"] = _content(data["cluster"]["topology"])
    return json.dumps([data, {k: repr(v) for k, v in reroutes.items()}, list(factors)],
                      sort_keys=True, default=str)


def _content(ref):
    """A file's text for a path (a study point's files sit in a fresh folder each), else the
    name as given (a shipped model or topology)."""
    if not isinstance(ref, str):
        return ref
    path = Path(ref)
    return ["file", path.read_text()] if path.is_file() else ref


def step_table(scn: Scenario, source: str, cluster: Cluster, reroutes: dict[str, tuple],
               straggler_factors: list[float], given_s: float | None,
               workers: int = 1) -> StepTable:
    """Simulate (or scale ``given_s``) the healthy step on ``cluster`` (the scenario's) and
    every variant named; with ``workers`` > 1 the variants run in that many forked
    processes while this one runs the healthy step (each time is the same number wherever
    it is simulated)."""
    t0 = time.perf_counter()
    if given_s is not None:
        times = {"healthy": given_s, **{k: given_s for k in reroutes}}
        times.update({straggler_key(f): given_s * f for f in straggler_factors})
        return StepTable(times, False, None, 0.0, 0, time.perf_counter() - t0)
    setup = build_setup(scn, source, cluster=cluster)
    variants = [(key, element, None) for key, element in reroutes.items()] + \
        [(straggler_key(f), None, f) for f in straggler_factors]
    global _VARIANTS
    _VARIANTS = (scn, source, cluster, setup, variants)
    try:
        pool = fork_pool(min(workers, len(variants)))
        if pool is None:
            base = run_setup(setup)
            found = [_variant_time(i) for i in range(len(variants))]
        else:
            with pool:
                pending = pool.map(_variant_time, range(len(variants)))
                base = run_setup(setup)      # meanwhile, here
                found = list(pending)
    finally:
        _VARIANTS = None
    times = {"healthy": base.metrics.iteration_time_s}
    for (key, element, _), t in zip(variants, found):
        times[key] = max(t, times["healthy"]) if element is not None else t
    m = base.metrics
    tokens = m.tokens_per_s * m.iteration_time_s
    return StepTable(times, True, m.as_dict(), tokens, 1 + len(reroutes) +
                     len(straggler_factors), time.perf_counter() - t0,
                     base.extrapolation.as_dict() if base.extrapolation else None,
                     job_power(base), evaluation_pass(scn, source, cluster))


_VARIANTS: tuple | None = None     # what the forked processes of step_table read


def _variant_time(i: int) -> float:
    """Iteration time of variant ``i`` of ``_VARIANTS``: a degraded fabric's (on its own
    cluster) or a straggler's."""
    scn, source, cluster, setup, variants = _VARIANTS
    _, element, factor = variants[i]
    if element is None:
        return _straggler_time(setup, factor)
    degraded = build_setup(scn, source, cluster=scenario_cluster(
        scn, graph=degraded_graph(cluster.G, element)))
    return run_setup(degraded).metrics.iteration_time_s


def _straggler_time(setup: Setup, factor: float) -> float:
    """The step with rank 0's compute ``factor`` times slower (same cluster, cached routes)."""
    slowed = with_trace(setup, lambda trace: apply_stragglers(trace, {0: factor}))
    return run_setup(slowed).metrics.iteration_time_s
