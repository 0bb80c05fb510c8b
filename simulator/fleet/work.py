"""The op replays the fleet's co-simulations may cost, once each job's step alone is known.

Jobs of more than one server are co-simulated at each start and end among them
(:class:`~simulator.fleet.contention.StepTimes`): the jobs running then, each for the
iterations of its trace that fit in the slowest one's step (one for the slowest, at most
:data:`~simulator.fleet.contention.MAX_ITERATIONS`). Before the run, who runs beside whom is
taken from the arrivals and the run times alone (no queueing, no slowdown), and a member's
iterations from its step alone beside the slowest's; and one iteration of each job that
runs beside another, replayed alone on its placement to note its link peaks
(:mod:`simulator.fleet.headroom`: a set whose members cannot slow each other is not
co-simulated, which the estimate, an upper bound there, does not foresee).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .contention import MAX_ITERATIONS


@dataclass(frozen=True)
class Linked:
    """A job that may be co-simulated: when it arrives and how long it runs alone, its step
    alone and the ops of one iteration of its trace."""

    arrival_s: float
    run_s: float
    step_s: float
    trace_ops: int


def iterations(step_s: float, slowest_s: float) -> int:
    """The iterations of a member of step ``step_s`` beside the slowest's one of
    ``slowest_s``: the next starts as one ends, until the slowest's has ended."""
    return 1 if step_s >= slowest_s else min(MAX_ITERATIONS, math.ceil(slowest_s / step_s))


def co_simulated_ops(jobs: list[Linked]) -> float:
    """Op replays of the co-simulations at every start and end of ``jobs``: at each, the
    jobs running from then on (the one starting included, the one ending not), each for
    its :func:`iterations`; none where fewer than two run. Plus one iteration of each job
    that is ever among them (its peaks replay)."""
    total = 0.0
    linked: set[int] = set()
    for at in sorted({j.arrival_s for j in jobs} | {j.arrival_s + j.run_s for j in jobs}):
        members = [j for j in jobs if j.arrival_s <= at < j.arrival_s + j.run_s]
        if len(members) < 2:
            continue
        slowest = max(j.step_s for j in members)
        total += sum(j.trace_ops * iterations(j.step_s, slowest) for j in members)
        linked.update(id(j) for j in members)
    return total + sum(j.trace_ops for j in jobs if id(j) in linked)
