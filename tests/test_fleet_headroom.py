"""Linked jobs that cannot slow each other (simulator/fleet/headroom.py): where on every
shared link the members' peaks alone add up to less than its capacity, each one's step is
its step alone, and a co-simulation agrees to the rounding of its float sums."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import make_model, star_graph
from job_helpers import NIC, SIZE, NoCompute, spy_on
from job_helpers import all_reduce as _all_reduce
from simulator.engine import Job, Machine, Placement, replay, run_jobs
from simulator.engine.planning import Plans
from simulator.fleet.contention import StepTimes, Work
from simulator.fleet.headroom import MARGIN, Peaks, cannot_slow, peaks
from simulator.fleet.placement import Layout


def _star(uplink_bw: float, constants):
    """Four one-GPU servers, two to a leaf, the leaves joined by a spine at ``uplink_bw``."""
    model = make_model(star_graph(4, nic_bw=NIC, leaves=2, uplink_bw=uplink_bw), constants)
    return model, StepTimes(Layout.of(model.cluster)), Work("ar", _all_reduce(), model,
                                                            NoCompute())


def _peaks(links, loads) -> Peaks:
    return Peaks(np.array(links), np.array(loads, dtype=float))


def test_members_cannot_slow_each_other_where_shared_peaks_fit_the_capacity():
    capacity = np.array([10.0, 10.0, 10.0])
    # link 0 shared: 4 + 5 = 9 < 10; links 1 and 2 full, but each loaded by one member only
    a, b = _peaks([0, 1], [4, 10]), _peaks([0, 2], [5, 10])
    assert cannot_slow([a, b], capacity)
    # 4 + 6.5 = 10.5 > 10 on link 0: B's flows could take some of what A's have alone
    assert not cannot_slow([a, _peaks([0, 2], [6.5, 10])], capacity)
    # exactly full (4 + 6 = 10) counts as full: within MARGIN of the capacity
    assert not cannot_slow([a, _peaks([0, 2], [6, 10])], capacity)
    assert cannot_slow([a, _peaks([0, 2], [6 - 20 * MARGIN, 10])], capacity)


def test_a_fabrics_peak_fractions_are_the_column_maxima_of_its_samples(ideal_constants):
    model, _, _ = _star(3 * NIC, ideal_constants)
    machine = Machine(model.cluster)
    n = len(machine.fabric.capacity)
    machine.fabric.track(np.arange(n), n)
    for gpus in ((0, 2), (1, 3)):
        job = Job(machine, _all_reduce(), Placement(gpus), model, NoCompute())
        job.start()
    run_jobs(machine, [])
    peak = machine.fabric.peak_fractions()
    rows = np.array([row for _, row in machine.fabric.samples])
    assert np.array_equal(peak, rows.max(axis=0))


def test_a_jobs_peaks_are_its_ring_at_the_nic_rate(ideal_constants):
    # a 2-rank ring all-reduce alone: each link it crosses carries one flow at the NIC's
    # rate at most (the NIC link is the bottleneck: the uplinks are 3 x NIC)
    model, _, work = _star(3 * NIC, ideal_constants)
    p = Placement((0, 2))
    found = peaks(work, p, Plans(model, p))
    capacity = model.cluster.capacity_bytes_per_s
    assert len(found.links) > 0
    assert found.load_bytes_per_s.max() == pytest.approx(NIC, rel=1e-12)
    assert np.all(found.load_bytes_per_s <= capacity[found.links] * (1 + 1e-12))


def test_a_peaks_replay_is_freed_by_reference_counting(ideal_constants, monkeypatch):
    """With the cyclic collector off, the peaks replay's machine and job are gone once its
    peaks are back (the fleet replays with the collector paused, which files what is left
    with the old objects: a cycle kept 25-30 MB a replay, 1.9 GB over the 2,000-job
    loaded mix)."""
    import gc

    from simulator.fleet import headroom
    made = spy_on(monkeypatch, headroom, "Machine", "Job")
    model, _, work = _star(3 * NIC, ideal_constants)
    was_on = gc.isenabled()
    gc.disable()
    try:
        p = Placement((0, 2))
        assert peaks(work, p, Plans(model, p)) is not None
        assert len(made) == 2
        assert [r for r in made if r() is not None] == []
    finally:
        if was_on:
            gc.enable()


def test_with_headroom_on_the_spine_neighbours_run_at_their_pace_alone(ideal_constants):
    # spread's two jobs, both rings across the spine from both leaves, as in
    # test_fleet_contention's half-share case, but the uplinks carry 3 x NIC: each ring
    # puts at most NIC on an uplink, 2 x NIC < 3 x NIC, so neither can slow the other
    model, times, work = _star(3 * NIC, ideal_constants)
    a, b = Placement((0, 2)), Placement((1, 3))
    alone = replay(_all_reduce(), model, NoCompute(), placement=a).iteration_time_s
    assert alone - SIZE / NIC > 0       # (the latency: alone moves S at NIC bytes/s)
    steps = times.steps({"a": (work, a), "b": (work, b)})
    assert steps == {"a": alone, "b": alone}
    c = times.counts
    assert (c.bounded, c.together, c.peaks) == (1, 0, 2)
    # a co-simulation gives the same steps to the rounding of its float sums
    fresh = StepTimes(times.layout)
    assert fresh._co_simulate([(work, a), (work, b)]) == pytest.approx([alone, alone],
                                                                      rel=1e-12)


def test_without_headroom_the_same_neighbours_are_co_simulated(ideal_constants):
    # uplinks of 2 x NIC: the two rings' peaks fill them exactly, which counts as full
    model, times, work = _star(2 * NIC, ideal_constants)
    times.steps({"a": (work, Placement((0, 2))), "b": (work, Placement((1, 3)))})
    assert (times.counts.bounded, times.counts.together) == (0, 1)


def test_a_loaded_mix_s_bounded_sets_co_simulate_to_their_steps_alone(monkeypatch):
    # the loaded mix of benchmarks/bench_fleet.py --loaded, its first 150 jobs: every
    # linked set the bound answers, co-simulated afresh, gives each member its step alone
    # within 1e-9 (measured: within 1e-13)
    from simulator.fleet.build import build_fleet
    from simulator.fleet.mix import Mix
    data = {"name": "loaded", "cluster": {"topology": "dgx-a100-superpod", "nodes": 256},
            "scheduler": "easy", "placement": "spread", "seed": 1,
            "generate": {"cluster": "Seren", "jobs": 150, "load": 0.8,
                         "scenarios": {"resnet50-ddp-8gpu": 1, "bert-large-ddp-8gpu": 1,
                                       "quickstart": 8}}}
    fleet = build_fleet(Mix.model_validate(data), "test")
    bounded = []
    check = StepTimes._cannot_slow

    def noting(self, members):
        ok = check(self, members)
        if ok:
            bounded.append((self, list(members)))
        return ok
    monkeypatch.setattr(StepTimes, "_cannot_slow", noting)
    fleet.run()
    assert len(bounded) >= 3
    for times, members in bounded[:3]:
        fresh = StepTimes(times.layout)
        alone = [times.alone(w, p) for w, p in members]
        assert fresh._co_simulate(members) == pytest.approx(alone, rel=1e-9, abs=0)


def test_on_the_analytical_fabric_nothing_is_bounded(ideal_constants):
    # the bound reasons about max-min sharing: another fidelity is co-simulated as before,
    # with no peaks replay
    from simulator.engine import MachineConfig
    model, times, _ = _star(3 * NIC, ideal_constants)
    work = Work("ar", _all_reduce(), model, NoCompute(),
                machine=MachineConfig(fidelity="analytical"))
    times.steps({"a": (work, Placement((0, 2))), "b": (work, Placement((1, 3)))})
    c = times.counts
    assert (c.bounded, c.together, c.peaks) == (0, 1, 0)
