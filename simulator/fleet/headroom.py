"""Linked jobs that cannot slow each other: each one's step beside the others is its step alone.

The flow fabric shares links by max-min fairness (:mod:`simulator.network.maxmin`): every
flow has a bottleneck, a link that is full and on which no flow moves faster. Run each
member of a linked set alone on its own placement and note, for every link, the highest
load it ever puts there (its *peak*, bytes/s). Where on every link that two or more members
load the peaks add up to less than the link's capacity, then at any instant the members'
rates alone, put together, fill no shared link: the allocation is feasible, every link a
member fills is that member's alone, and every flow keeps its bottleneck, so it is the
max-min allocation of all of them. Every flow moves at its rate alone at every instant,
each member's iterations are its iteration alone, and its step beside the others is its
step alone: no co-simulation is needed. (One would give that step up to the last bits of
its float sums, a shared link's set being solved again as a neighbour's flow comes or
goes; measured on the 300-job loaded mix: all 114 members' steps of its 27
co-simulations within 1e-9 of alone.) Where some shared link could fill, the members are
co-simulated as before (:class:`~simulator.fleet.contention.StepTimes`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine import Job, Machine, Placement, run_jobs
from ..gcpause import gc_paused

#: Peaks that add up to within this fraction of a link's capacity count as filling it
#: (the float sums of loads are not exact)
MARGIN = 1e-6


@dataclass(frozen=True, eq=False)
class Peaks:
    """The links a job alone loads (indices in the cluster's capacity array) and its
    highest load on each (bytes/s)."""

    links: np.ndarray
    load_bytes_per_s: np.ndarray


def peaks(work, placement: Placement, plans) -> Peaks | None:
    """One replay of ``work``'s trace alone on ``placement`` (with ``plans``), each link's
    load noted at every instant it changes: the links it loads and its peak on each (the
    machine's fidelity must be ``flow``). None where the replay does not finish (the
    co-simulation reports that)."""
    ended = []
    with gc_paused():
        machine = Machine(work.planner.cluster, work.machine)
        capacity = machine.fabric.capacity
        machine.fabric.track(np.arange(len(capacity)), len(capacity))
        job = Job(machine, work.trace, placement, work.planner, work.compute, work.job,
                  work.capacity_bytes, plans)
        # (noting True, not the job: ``ended`` holding the job that holds its ``then``
        # would be a cycle, kept by the pause with the old objects: 25-30 MB a replay)
        job.start(then=lambda _job: ended.append(True))
        run_jobs(machine, [job])
        peak = machine.fabric.peak_fractions() * capacity
    if not ended:
        return None
    links = np.flatnonzero(peak)
    return Peaks(links, peak[links])


def cannot_slow(members: list[Peaks], capacity_bytes_per_s: np.ndarray) -> bool:
    """True where, on every link loaded by two or more of ``members``, their peaks add up
    to less than the capacity (by :data:`MARGIN`): none of them can slow another."""
    users = np.zeros(len(capacity_bytes_per_s), np.int64)
    total = np.zeros(len(capacity_bytes_per_s))
    for m in members:
        users[m.links] += 1
        total[m.links] += m.load_bytes_per_s
    shared = users >= 2
    return bool(np.all(total[shared] <= capacity_bytes_per_s[shared] * (1 - MARGIN)))
