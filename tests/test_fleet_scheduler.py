"""Schedulers and placement policies of the fleet (simulator/fleet/schedulers.py,
placement.py, simulate.py) on hand-made traces whose queue times are worked out by hand.

The step time is stubbed (1 s alone, no contention), so a job of ``duration`` D runs D
seconds: what is tested is only who starts when."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from simulator.fleet.placement import PLACEMENTS, Layout
from simulator.fleet.simulate import Fleet, JobSpec

# four 8-GPU servers; servers 0-1 under one leaf group, 2-3 under another
LAYOUT = Layout(tuple(tuple(range(8 * s, 8 * s + 8)) for s in range(4)), (0, 0, 1, 1),
                tuple(frozenset({f"leaf{s // 2}"}) for s in range(4)))


class Counts:
    alone = together = hits = 0


class FixedSteps:
    """Every job steps in 1 s, alone or not."""

    def __init__(self, layout):
        self.where = {g: (s, p) for s, gpus in enumerate(layout.gpus)
                      for p, g in enumerate(gpus)}
        self.counts = Counts()

    def alone(self, work, placement):
        return 1.0

    def steps(self, running):
        return {k: 1.0 for k in running}


def _fleet(jobs, scheduler, layout=LAYOUT, **kw) -> Fleet:
    specs = [JobSpec(name, arrival, SimpleNamespace(name="stub"), gpus, duration_s=duration, priority=prio, **kw)
             for name, arrival, gpus, duration, prio in jobs]
    return Fleet(layout, specs, scheduler, "packed", step_times=FixedSteps(layout))


def _queue(result) -> dict:
    return {j["job"]: j["queue_s"] for j in result.jobs}


# (name, arrival s, GPUs, duration s, priority) on 32 GPUs
FIVE = [("J1", 0, 16, 100, 0), ("J2", 1, 32, 50, 0), ("J3", 2, 8, 40, 0),
        ("J4", 3, 16, 200, 0), ("J5", 4, 8, 90, 0)]


def test_fifo_on_the_five_job_trace():
    # J1 starts at 0 (ends 100). J2 needs all 32 GPUs: it waits for J1, runs 100-150, and
    # everything behind it waits too (FIFO). At 150, J3 (8) + J4 (16) + J5 (8) = 32 start.
    # queue = start - arrival: J1 0, J2 100-1, J3 150-2, J4 150-3, J5 150-4
    r = _fleet(FIVE, "fifo").run()
    assert _queue(r) == {"J1": 0, "J2": 99, "J3": 148, "J4": 147, "J5": 146}
    assert r.end_s == 150 + 200


def test_easy_backfill_on_the_five_job_trace():
    # J2 is blocked with a reservation at J1's end: shadow 100, no extra GPUs then (32-32).
    # J3 (8 GPUs free, 2 + 40 = 42 <= 100) backfills at 2; J4 (16) does not fit (8 free);
    # J5 (4 + 90 = 94 <= 100) backfills at 4. At 94 J4 fits (16 free) but would end at 294 >
    # 100 and needs 16 > 0 extra GPUs: it waits. J2 runs 100-150, then J4 150-350.
    r = _fleet(FIVE, "easy").run()
    assert _queue(r) == {"J1": 0, "J2": 99, "J3": 0, "J4": 147, "J5": 0}
    assert r.end_s == 350


def test_easy_backfills_onto_the_extra_gpus_however_long():
    # J1 (16, 100 s) runs; J2 needs 24 (8 of its reservation at 100 are spare: 32 - 24).
    # J3 (8 GPUs, 1000 s) cannot end by 100 but fits the 8 extra GPUs: it starts at once.
    # J4 (8 GPUs, 1000 s) would eat into J2's reservation: it waits for J1's end, then J2
    # takes 24 of the 24 free GPUs and J4 waits until J2 ends at 100 + 10.
    jobs = [("J1", 0, 16, 100, 0), ("J2", 1, 24, 10, 0), ("J3", 2, 8, 1000, 0),
            ("J4", 3, 8, 1000, 0)]
    assert _queue(_fleet(jobs, "easy").run()) == {"J1": 0, "J2": 99, "J3": 0, "J4": 107}


def test_priority_preempts_the_lowest_and_the_victim_resumes_from_its_checkpoint():
    # L1 (priority 0, 32 GPUs, 100 s) runs from 0. H (priority 1, 16 GPUs, 10 s) arrives at
    # 35: L1 is preempted; its checkpoints every 20 s of steps leave 20 s done and 15 s lost.
    # H runs 35-45; L1 needs all 32 GPUs, so it waits for H's end at 45, restores for 5 s
    # and has 80 s of steps left: it ends at 45 + 5 + 80.
    jobs = [("L1", 0, 32, 100, 0), ("H", 35, 16, 10, 1)]
    r = _fleet(jobs, "priority", checkpoint_s=20.0, restore_s=5.0).run()
    rows = {j["job"]: j for j in r.jobs}
    assert rows["H"]["queue_s"] == 0 and rows["H"]["end_s"] == 45
    assert rows["L1"]["preemptions"] == 1 and rows["L1"]["lost_steps"] == pytest.approx(15)
    assert rows["L1"]["end_s"] == pytest.approx(130)
    assert rows["L1"]["waited_s"] == pytest.approx(10)


def test_fifo_does_not_preempt():
    jobs = [("L1", 0, 32, 100, 0), ("H", 35, 16, 10, 1)]
    rows = {j["job"]: j for j in _fleet(jobs, "fifo").run().jobs}
    assert rows["H"]["queue_s"] == 65 and rows["L1"]["preemptions"] == 0


def test_a_node_failure_stops_the_jobs_on_it_and_they_restart_from_their_checkpoint():
    fleet = _fleet([("A", 0, 16, 100, 0), ("B", 0, 8, 100, 0)], "fifo", checkpoint_s=10.0)
    fleet.scheduled = ((25.0, 1),)          # server 1 fails at 25 s
    rows = {j["job"]: j for j in fleet.run().jobs}
    # A (packed on servers 0-1) keeps the 20 s of its 25 up to its last checkpoint; B (best
    # fit) is on server 2 and untouched. Servers 0 and 3 are whole and free: A restarts at
    # once (no restore cost set) with 80 s left and ends at 25 + 80.
    assert rows["B"]["restarts"] == 0 and rows["B"]["end_s"] == 100
    assert rows["A"]["restarts"] == 1 and rows["A"]["lost_steps"] == pytest.approx(5)
    assert rows["A"]["end_s"] == pytest.approx(105)
    assert rows["A"]["placement"] == " ".join(map(str, [*range(8), *range(24, 32)]))


def test_placement_policies():
    free = [list(range(8)) for _ in range(4)]
    packed, spread, topo = (PLACEMENTS[k][0] for k in ("packed", "spread", "topology"))
    assert packed(LAYOUT, free, 16) == tuple(range(16))
    assert spread(LAYOUT, free, 16) == tuple(range(8)) + tuple(range(16, 24))
    assert topo(LAYOUT, free, 16) == tuple(range(16))
    # server 0 half full: a 4-GPU job goes there with packed (best fit), to an empty server
    # with spread; a 16-GPU job with topology takes servers 2-3 (one group) not 1-2
    half = [[4, 5, 6, 7]] + [list(range(8)) for _ in range(3)]
    assert packed(LAYOUT, half, 4) == (4, 5, 6, 7)
    assert spread(LAYOUT, half, 4) == (8, 9, 10, 11)
    assert packed(LAYOUT, half, 16) == tuple(range(8, 24))
    assert topo(LAYOUT, half, 16) == tuple(range(16, 32))
    assert packed(LAYOUT, half, 32) is None          # gang: all or nothing


def test_a_leaf_switch_failure_stops_every_job_beneath_it_until_its_repair():
    from simulator.fleet.simulate import Component
    # leaf0 reaches servers 0-1. A (16 GPUs, packed on servers 0-1, no checkpoint) stops at
    # 10 and starts over; B (server 2) runs on. Node 0 also fails at 20 (back at 120): at
    # leaf0's repair (60) server 1 is back but server 0 is not, so A restarts on servers 1
    # and 3 and runs its whole 100 s again: it ends at 160.
    fleet = _fleet([("A", 0, 16, 100, 0), ("B", 0, 8, 100, 0)], "fifo")
    fleet.components = tuple(Component(f"node {s}", (s,), repair_s=100.0) for s in range(4)) \
        + (Component("leaf0", (0, 1), repair_s=50.0),)
    fleet.scheduled = ((10.0, 4), (20.0, 0))
    result = fleet.run()
    rows = {j["job"]: j for j in result.jobs}
    assert rows["B"]["restarts"] == 0 and rows["B"]["end_s"] == 100
    assert rows["A"]["restarts"] == 1 and rows["A"]["lost_steps"] == pytest.approx(10)
    assert rows["A"]["end_s"] == pytest.approx(160)
    assert rows["A"]["placement"] == " ".join(map(str, [*range(8, 16), *range(24, 32)]))
    downs = {s["time_s"]: s["down_gpus"] for s in result.samples}
    assert (downs[10.0], downs[20.0], downs[60.0]) == (16, 16, 8)
