"""Contention between jobs on one cluster (simulator/fleet/contention.py): a job alone is
`clustersim run` bit for bit; jobs on disjoint switches do not interact; two identical jobs
whose rings share one link each get half of it (max-min), by the arithmetic."""

from __future__ import annotations

import pytest

from conftest import make_model, star_graph
from job_helpers import NIC, SIZE, NoCompute, spy_on
from job_helpers import all_reduce as _all_reduce
from simulator.engine import Placement, replay
from simulator.engine.planning import Plans
from simulator.errors import ConfigError
from simulator.fleet.contention import StepTimes, Work
from simulator.fleet.placement import Layout

def _star(leaves: int, servers: int, constants):
    model = make_model(star_graph(servers, nic_bw=NIC, leaves=leaves, uplink_bw=NIC),
                       constants)
    return model, StepTimes(Layout.of(model.cluster)), Work("ar", _all_reduce(), model,
                                                            NoCompute())


def test_the_layout_groups_servers_by_the_leaves_they_reach(ideal_constants):
    model, times, _ = _star(2, 4, ideal_constants)
    assert times.layout.group == (0, 0, 1, 1)
    assert times.layout.gpus == ((0,), (1,), (2,), (3,))
    assert times.crossing(Placement((0, 1))) == frozenset()          # inside one leaf
    assert times.crossing(Placement((0, 2))) == {"leaf.g0", "leaf.g1"}
    # each rank's (server, position, group) within the job and its server's kind of links
    assert times.shape(Placement((1, 3))) == times.shape(Placement((0, 2))) == \
        ((0, 0, 0, 0), (1, 0, 1, 0))


def test_two_identical_jobs_sharing_the_spine_each_get_half_of_it(ideal_constants):
    model, times, work = _star(2, 4, ideal_constants)
    alone = replay(_all_reduce(), model, NoCompute(), placement=Placement((0, 2)))
    # a 2-rank ring all-reduce moves 2 (n-1)/n S = S bytes each way over the leaf uplink;
    # alone at NIC bytes/s, beside the other job's identical ring at NIC / 2 (max-min)
    latency = alone.iteration_time_s - SIZE / NIC
    steps = times.steps({"a": (work, Placement((0, 2))), "b": (work, Placement((1, 3)))})
    for step in steps.values():
        assert step - latency == pytest.approx(2 * SIZE / NIC, rel=1e-9)
    # the co-simulation read each member's step alone (one simulated, one from the cache:
    # the same shape) to size their iterations
    assert (times.counts.alone, times.counts.together, times.counts.hits) == (1, 1, 1)
    again = times.steps({"b": (work, Placement((1, 3))), "a": (work, Placement((0, 2)))})
    assert again == steps and times.counts.together == 1 and times.counts.hits == 2


def test_jobs_on_disjoint_switches_do_not_interact(ideal_constants):
    # four leaves: job a between leaves 0 and 1, job b between leaves 2 and 3; both cross
    # the spine, on uplinks of their own
    model, times, work = _star(4, 8, ideal_constants)
    a, b = Placement((0, 2)), Placement((4, 6))
    alone = replay(_all_reduce(), model, NoCompute(), placement=a).iteration_time_s
    steps = times.steps({"a": (work, a), "b": (work, b)})
    assert steps == {"a": alone, "b": alone}
    assert times.counts.together == 0            # not neighbours: not co-simulated
    # and co-simulated anyway (three iterations each, back to back), each iteration takes
    # its time alone: the mean of the last two, from later start times, to the rounding
    assert times.together([(work, a), (work, b)]) == pytest.approx([alone, alone], rel=1e-12)


def test_a_co_simulation_is_freed_by_reference_counting(ideal_constants, monkeypatch):
    """Nothing of a co-simulation waits for the cyclic collector: with it off, its machine
    and every iteration's job are gone once the step times are back. (The fleet runs
    co-simulations with the collector paused, and the pause files what is left with the
    old objects, where the collector seldom looks: a cycle through the jobs kept each
    co-simulation's records, plans and machine, 27 MB a time on a 6-job co-simulation of
    ``bench_fleet.py``'s mix, until a 2,000-job mix ran out of memory.)"""
    import gc

    from simulator.fleet import contention
    made = spy_on(monkeypatch, contention, "Machine", "Job")
    model, times, work = _star(2, 4, ideal_constants)
    was_on = gc.isenabled()
    gc.disable()
    try:
        times.together([(work, Placement((0, 2))), (work, Placement((1, 3)))])
        assert len(made) >= 3                  # the machine and the jobs' iterations
        assert [r for r in made if r() is not None] == []
    finally:
        if was_on:
            gc.enable()


def test_a_neighbour_change_re_simulates_and_a_lone_job_is_cached_by_shape(ideal_constants):
    model, times, work = _star(2, 4, ideal_constants)
    times.steps({"a": (work, Placement((0, 2)))})
    times.steps({"a": (work, Placement((1, 3)))})          # the same shape: cached
    assert (times.counts.alone, times.counts.hits) == (1, 1)
    times.steps({"a": (work, Placement((0, 2))), "b": (work, Placement((1, 3)))})
    assert times.counts.together == 1


def test_one_job_alone_on_the_fleet_is_clustersim_run_bit_for_bit(tmp_path):
    from simulator.fleet.build import build_fleet
    from simulator.fleet.mix import load_mix
    from simulator.pipeline import build_setup, run_setup
    from simulator.scenario import load_scenario
    (tmp_path / "one.yaml").write_text(
        "name: one\ncluster: {topology: dgx-a100}\nscheduler: fifo\n"
        "jobs: [{arrival: 5 s, scenario: quickstart, gpus: 8, steps: 3}]\n")
    fleet = build_fleet(*load_mix(tmp_path / "one.yaml"))
    row = fleet.run().jobs[0]
    run = run_setup(build_setup(load_scenario("quickstart"))).metrics.iteration_time_s
    assert row["step_alone_s"] == run
    assert row["run_s"] == pytest.approx(3 * run, rel=1e-15)
    assert (row["queue_s"], row["slowdown"], row["end_s"]) == (0.0, 1.0, 5.0 + row["run_s"])


def _two_jobs(model, placement: str, steps=(10, 30)):
    from simulator.fleet.simulate import Fleet, JobSpec
    work = Work("ar", _all_reduce(), model, NoCompute())
    specs = [JobSpec(name, 0.0, work, 2, steps=n) for name, n in zip("AB", steps)]
    return {j["job"]: j for j in Fleet(Layout.of(model.cluster), specs, "fifo",
                                       placement).run().jobs}


def test_in_the_fleet_neighbours_slow_each_other_until_one_ends(ideal_constants):
    # four one-GPU servers, two to a leaf. Spread puts A on servers 0 and 2, B on 1 and 3:
    # both rings cross the spine from both leaves. A runs 10 steps at the shared pace t2;
    # B runs its first 10 steps at t2, then, alone, its last 20 at t1.
    model, _, _ = _star(2, 4, ideal_constants)
    t1 = replay(_all_reduce(), model, NoCompute(), placement=Placement((0, 2))).iteration_time_s
    latency = t1 - SIZE / NIC
    t2 = latency + 2 * SIZE / NIC
    rows = _two_jobs(model, "spread")
    assert rows["A"]["placement"] == "0 2" and rows["B"]["placement"] == "1 3"
    assert rows["A"]["end_s"] == pytest.approx(10 * t2, rel=1e-9)
    assert rows["B"]["end_s"] == pytest.approx(10 * t2 + 20 * t1, rel=1e-9)
    assert rows["A"]["slowdown"] == pytest.approx(t2 / t1, rel=1e-9)
    assert rows["B"]["slowdown"] == pytest.approx((10 * t2 + 20 * t1) / (30 * t1), rel=1e-9)
    # packed keeps each job under one leaf: no shared link, each at its pace alone
    packed = _two_jobs(model, "packed")
    alone = replay(_all_reduce(), model, NoCompute()).iteration_time_s
    assert packed["A"]["placement"] == "0 1" and packed["B"]["placement"] == "2 3"
    assert (packed["A"]["end_s"], packed["B"]["end_s"]) == (10 * alone, 30 * alone)
    assert packed["A"]["slowdown"] == pytest.approx(1.0, rel=1e-15)
    assert packed["B"]["slowdown"] == pytest.approx(1.0, rel=1e-15)


def test_a_member_plans_once_across_its_iterations_and_co_simulations(ideal_constants,
                                                                      monkeypatch):
    """A member's collectives are planned once, at its first iteration: its other
    iterations, and its next co-simulation (a neighbour changed), reuse the plans, and the
    step times are those of plans made again at every iteration, to the last bit."""
    model, times, work = _star(2, 6, ideal_constants)
    planned = []
    plan_groups = model.plan_groups
    monkeypatch.setattr(model, "plan_groups",
                        lambda *a, **k: planned.append(a[2]) or plan_groups(*a, **k))
    a, b, c = Placement((0, 3)), Placement((1, 4)), Placement((2, 5))
    times.alone(work, a)            # (the step alone, of the shape of all three: planned)
    planned.clear()
    first = times.together([(work, a), (work, b)])
    assert sorted(planned) == [[(0, 3)], [(1, 4)]]         # one plan each, 16 iterations of b
    second = times.together([(work, a), (work, c)])         # b leaves, c comes: a plans nothing
    assert sorted(planned) == [[(0, 3)], [(1, 4)], [(2, 5)]]
    fresh = StepTimes(times.layout)
    monkeypatch.setattr(fresh, "_plans_of", lambda w, p: Plans(w.planner, p))
    assert fresh.together([(work, a), (work, b)]) == first
    assert fresh.together([(work, a), (work, c)]) == second


def test_a_job_refuses_plans_of_another_placement(ideal_constants):
    from simulator.engine import Job, Machine
    model, _, _ = _star(2, 4, ideal_constants)
    machine = Machine(model.cluster)
    with pytest.raises(ValueError, match="another planner's or placement's"):
        Job(machine, _all_reduce(), Placement((0, 2)), model, NoCompute(),
            plans=Plans(model, Placement((1, 3))))


def test_the_co_simulations_work_is_the_running_jobs_iterations():
    from simulator.fleet.work import Linked, co_simulated_ops, iterations
    # A runs 0-10 s (1 s steps, 100 ops), B 2-6 s (0.25 s steps, 10 ops), C 20-25 s alone.
    # At 2 s A and B run on: A one iteration (the slowest), B ceil(1 / 0.25) = 4 of 10 ops;
    # at 6 s B has ended and A runs alone; nothing else has two jobs running
    a, b, c = Linked(0, 10, 1.0, 100), Linked(2, 4, 0.25, 10), Linked(20, 5, 2.0, 7)
    # and one iteration of A and of B, each replayed alone to note its link peaks
    assert co_simulated_ops([a, b, c]) == 100 + 4 * 10 + 100 + 10
    assert iterations(0.001, 1.0) == 16 and iterations(2.0, 1.0) == 1


def test_the_fleet_counts_its_op_replays_and_estimates_them(ideal_constants):
    # two 1-op jobs of one kind from 0 s: the kind alone on the first GPUs (1 op, one
    # server group), then on spread's shape (1 op, across the spine, read by the
    # co-simulation), each alone on its placement noting its link peaks (1 op each: their
    # rings share the spine, so they can slow each other) and one co-simulation at the
    # start, where the estimate counts one iteration each (equal steps) and the two peaks
    # replays; A's end leaves B alone (its shape cached): no more
    model, _, _ = _star(2, 4, ideal_constants)
    from simulator.fleet.simulate import Fleet, JobSpec
    work = Work("ar", _all_reduce(), model, NoCompute())
    specs = [JobSpec(name, 0.0, work, 2, steps=n) for name, n in zip("AB", (10, 30))]
    fleet = Fleet(Layout.of(model.cluster), specs, "fifo", "spread", max_work=1e9)
    counts = fleet.run().counts
    assert (counts["alone"], counts["together"], counts["bounded"]) == (2, 1, 0)
    assert counts["peaks"] == 2
    assert counts["ops_estimate"] == 1 + 2 * 1 + 2
    assert counts["ops"] == 2 + 2 + 2   # one iteration each, as estimated
    refused = Fleet(Layout.of(model.cluster), specs, "fifo", "spread", max_work=2.5,
                    source="mix.yaml")
    with pytest.raises(ConfigError, match=r"mix.yaml: limits.max_work: about 5 op replays"):
        refused.run()
