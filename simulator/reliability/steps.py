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

    @property
    def base_s(self) -> float:
        return self.times_s["healthy"]


def straggler_key(factor: float) -> str:
    return f"straggler x{factor:g}"


MEMO_SIZE = 16                 # jobs whose step tables a process keeps
_MEMO: dict[str, StepTable] = {}


def scenario_step_table(scn: Scenario, source: str, cluster: Cluster,
                        reroutes: dict[str, tuple], straggler_factors: list[float],
                        given_s: float | None) -> StepTable:
    """:func:`step_table` of ``cluster`` = ``scenario_cluster(scn)``, simulated once per
    distinct input in this process (module doc)."""
    if given_s is not None:
        return step_table(scn, source, cluster, reroutes, straggler_factors, given_s)
    key = _memo_key(scn, reroutes, straggler_factors)
    if key not in _MEMO:
        _MEMO[key] = step_table(scn, source, cluster, reroutes, straggler_factors, None)
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
               straggler_factors: list[float], given_s: float | None) -> StepTable:
    """Simulate (or scale ``given_s``) the healthy step on ``cluster`` (the scenario's) and
    every variant named."""
    t0 = time.perf_counter()
    if given_s is not None:
        times = {"healthy": given_s, **{k: given_s for k in reroutes}}
        times.update({straggler_key(f): given_s * f for f in straggler_factors})
        return StepTable(times, False, None, 0.0, 0, time.perf_counter() - t0)
    setup = build_setup(scn, source, cluster=cluster)
    base = run_setup(setup)
    times = {"healthy": base.metrics.iteration_time_s}
    for key, element in reroutes.items():
        degraded = build_setup(scn, source, cluster=scenario_cluster(
            scn, graph=degraded_graph(cluster.G, element)))
        times[key] = max(run_setup(degraded).metrics.iteration_time_s, times["healthy"])
    for factor in straggler_factors:
        times[straggler_key(factor)] = _straggler_time(setup, factor)
    m = base.metrics
    tokens = m.tokens_per_s * m.iteration_time_s
    return StepTable(times, True, m.as_dict(), tokens, 1 + len(reroutes) +
                     len(straggler_factors), time.perf_counter() - t0,
                     base.extrapolation.as_dict() if base.extrapolation else None)


def _straggler_time(setup: Setup, factor: float) -> float:
    """The step with rank 0's compute ``factor`` times slower (same cluster, cached routes)."""
    slowed = with_trace(setup, lambda trace: apply_stragglers(trace, {0: factor}))
    return run_setup(slowed).metrics.iteration_time_s
