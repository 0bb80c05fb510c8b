"""The suite's simulations, run once each and in parallel worker processes
(:func:`run_jobs`), the biggest first; the row builders then read the outcomes back
(:func:`replay_outcomes`). Deterministic: each run is the same simulation whichever worker
runs it, and outcomes are keyed by case."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from simulator.errors import ConfigError


@dataclass(frozen=True)
class Outcome:
    """What the rows need of one simulated iteration (or the error that stopped it)."""

    iteration_time_s: float = 0.0
    peak_memory_gib: float = 0.0
    oom: bool = False
    error: str = ""


class _Recorded(ConfigError):
    """Raised by the recording pass: the row is built again from the outcome."""


def recorder(jobs: dict):
    """A ``simulate_fn`` that only records ``(scenario, case)`` into ``jobs``."""
    def record(scenario: dict, case: str):
        jobs[case] = scenario
        raise _Recorded("recorded")
    return record


def _run(simulate_fn, scenario: dict, case: str) -> Outcome:
    try:
        m = simulate_fn(scenario, case)
    except ConfigError as exc:
        return Outcome(error=str(exc))
    return Outcome(m.iteration_time_s, m.peak_memory_gib, bool(m.oom))


def _size(scenario: dict) -> int:
    """The work of a run, to start the biggest first: nodes x micro-batches (one node when
    the topology has one)."""
    return scenario["cluster"].get("nodes", 1) * scenario["training"]["grad_accum"]


def run_jobs(jobs: dict, simulate_fn, workers: int = 1) -> dict[str, Outcome]:
    """case -> :class:`Outcome` of every recorded job, ``workers`` processes at once (one
    at a time for ``workers`` <= 1, each still in a process of its own)."""
    order = sorted(jobs, key=lambda c: (-_size(jobs[c]), c))
    if len(order) <= 1:
        return {c: _run(simulate_fn, jobs[c], c) for c in order}
    # a fresh process per run, one worker too: what one run leaves behind in a process (the
    # GB200 405B rows' full replays: 3.3 GB alone, 11 GB after the runs before them; `validate
    # all` running the whole suite in one process passed 24 GB and was OOM-killed) dies with it
    with ProcessPoolExecutor(max_workers=max(1, min(workers, len(order))),
                             max_tasks_per_child=1) as pool:
        futures = {c: pool.submit(_run, simulate_fn, jobs[c], c) for c in order}
        return {c: futures[c].result() for c in order}


def replay_outcomes(outcomes: dict[str, Outcome]):
    """A ``simulate_fn`` answering from ``outcomes`` (ConfigError for a failed run)."""
    def answer(scenario: dict, case: str) -> Outcome:
        out = outcomes[case]
        if out.error:
            raise ConfigError(out.error)
        return out
    return answer


__all__ = ["Outcome", "recorder", "replay_outcomes", "run_jobs"]
