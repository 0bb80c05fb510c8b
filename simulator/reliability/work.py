"""The work of a reliability study, counted from its plan before any trial runs, and the
refusal past ``--max-events`` (docs/reliability.md, "Work bound").

A trial's loop pops one event per failure, straggler, repair and recovery phase; between
them training and checkpoint cycles are jumped in closed form. So its work is about
:data:`EVENTS_PER_ARRIVAL` events per failure or straggler that arrives in its wall-clock
time (the whole job's rates x the job's length), plus one. A study runs that for every
trial of the configured interval and of each interval the search may try (``points`` grid
points plus Young's, Daly's and the configured one, ``search.trials`` each).

Measured (2026-12-05, two shared cores): ``reliability-1024gpu`` runs 2,000 trials of ~47
arrivals (16 failures, 31 stragglers) in 7.3 s, about 25 us per event; its default study
(200 trials, 13 points) is about 480,000 events.
"""

from __future__ import annotations

import math

from simulator.errors import ConfigError

from .plan import JobPlan

MAX_EVENTS = 5_000_000          # about two minutes here
EVENTS_PER_ARRIVAL = 3          # the failure, its detection or repair, the resume


def arrivals_per_trial(plan: JobPlan) -> float:
    """Failures and stragglers expected in one trial: the job's rates x its length (the
    duration, or the iterations at the healthy step time: downtime lengthens it)."""
    rate = sum(c.rate_per_s for c in plan.classes)
    rate += plan.stragglers[0] if plan.stragglers else 0.0
    wall = plan.duration_s if plan.duration_s is not None else plan.iterations * plan.t_base
    return rate * wall + len(plan.schedule)


def runs(points: int) -> int:
    """Trial sets a study runs: the configured interval, then at most ``points`` grid
    points and Young's, Daly's and the configured interval (0: no search)."""
    return 1 + (points + 3 if points > 0 else 0)


def events(arrivals: float, trials: int, points: int, search_trials: int) -> float:
    """The study's events: ``arrivals`` per trial (:func:`arrivals_per_trial`) x
    :data:`EVENTS_PER_ARRIVAL` + 1, for ``trials`` trials and ``search_trials`` of each
    interval searched."""
    per_trial = 1 + EVENTS_PER_ARRIVAL * arrivals
    return per_trial * (trials + (runs(points) - 1) * search_trials)


def check(arrivals: float, trials: int, points: int, search_trials: int,
          most: int | None = None, source: str = "--max-events") -> None:
    """Refuse a study of more than ``most`` events (default :data:`MAX_EVENTS`) of
    ``arrivals`` failures and stragglers per trial.

    :raises ConfigError: one line with the count, what it is made of and ``--max-events``.
    """
    most = MAX_EVENTS if most is None else most
    total = events(arrivals, trials, points, search_trials)
    if total <= most:
        return
    per = arrivals
    search = (f" and {search_trials:,} for each of up to {runs(points) - 1} checkpoint "
              f"intervals searched" if points > 0 else "")
    raise ConfigError(
        f"this study is about {_big(total)} trial events: {_big(per)} failures and "
        f"stragglers per trial (the job's rates x its length) x {trials:,} trials{search}; "
        f"more than {most:,} (lower the rates, the job length, --trials or "
        f"reliability.search.points/trials, or raise --max-events)", source=source)


def _big(x: float) -> str:
    return f"{x:,.0f}" if math.isfinite(x) and x < 1e15 else f"{x:.3g}"
