"""The machine and the job apart (simulator/engine/machine.py, job.py, placement.py): a job's
ranks meet the cluster's GPUs only through its placement; several jobs on one machine share
its fabric, so jobs on links of their own run as they would alone and jobs that share a link
slow each other by what max-min sharing says."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import GB, make_model, star_graph
from job_helpers import NIC, SIZE, NoCompute
from job_helpers import all_reduce as _all_reduce
from simulator.engine import Job, Machine, MachineConfig, Placement, replay, run_jobs
from simulator.errors import ConfigError
from simulator.trace import Op, RankClass, Trace


@pytest.fixture
def star(ideal_constants):
    """Four one-GPU servers, two to a leaf; the leaves joined by a spine at NIC speed."""
    return make_model(star_graph(4, nic_bw=NIC, leaves=2, uplink_bw=NIC), ideal_constants)


def _together(model, placements: list[tuple[int, ...]]) -> list:
    machine = Machine(model.cluster)
    jobs = [Job(machine, _all_reduce(len(p)), Placement(p), model, NoCompute())
            for p in placements]
    for job in jobs:
        job.start()
    run_jobs(machine, jobs)
    record = machine.record()
    return [job.timeline(record) for job in jobs]


def test_a_placement_refuses_what_cannot_hold_the_job():
    for gpus, why in [((0, -1), "not a GPU index"), ((1, 1), "two ranks")]:
        with pytest.raises(ConfigError, match=why) as info:
            Placement(gpus)
        assert info.value.field == "placement"
    with pytest.raises(ConfigError, match="beyond the cluster's 4"):
        Placement((3, 4)).check(4, 2)
    with pytest.raises(ConfigError, match="places 3 ranks, the job has 2"):
        Placement((0, 1, 2)).check(4, 2)
    assert Placement.first(3) == Placement((0, 1, 2)) and Placement((2, 0)).group([1, 0]) == (0, 2)


def test_a_job_on_other_gpus_of_the_same_shape_runs_alike_on_their_links(star):
    first = replay(_all_reduce(), star, NoCompute())
    moved = replay(_all_reduce(), star, NoCompute(), placement=Placement((2, 3)))
    assert [(r.start_s, r.end_s) for r in moved.records] == \
        [(r.start_s, r.end_s) for r in first.records]
    cluster = star.cluster
    on = lambda tl: {k for k, i in cluster.link_id.items()      # noqa: E731
                     if tl.machine.link_bytes[i] > 0 and k[0].startswith("n")}
    assert {k[0].split(".")[0] for k in on(first)} == {"n0", "n1"}
    assert {k[0].split(".")[0] for k in on(moved)} == {"n2", "n3"}


def test_jobs_on_links_of_their_own_run_as_they_would_alone(star):
    a, b = _together(star, [(0, 1), (2, 3)])         # each inside its own leaf
    alone = replay(_all_reduce(), star, NoCompute())
    assert a.iteration_time_s == b.iteration_time_s == alone.iteration_time_s
    assert a.machine is b.machine                     # one machine, one record
    assert a.machine.link_bytes.sum() == pytest.approx(2 * alone.machine.link_bytes.sum())


def test_jobs_that_share_the_spine_halve_each_others_rate(star):
    # each job's two ranks sit on different leaves: every byte crosses the spine, and the
    # two jobs' flows share each uplink, so each moves SIZE bytes at NIC / 2 instead of NIC
    alone = replay(_all_reduce(), star, NoCompute(), placement=Placement((0, 2)))
    latency = alone.iteration_time_s - SIZE / NIC
    a, b = _together(star, [(0, 2), (1, 3)])
    for tl in (a, b):
        assert tl.iteration_time_s - latency == pytest.approx(2 * SIZE / NIC, rel=1e-9)
    up = star.cluster.link_id[("leaf.g0", "spine.0")]
    assert a.machine.link_bytes[up] == pytest.approx(2 * alone.machine.link_bytes[up])


def test_the_machine_config_reaches_the_fabric_and_the_host_copies(star):
    machine = Machine(star.cluster, MachineConfig(fidelity="analytical",
                                                  host_bytes_per_s=5 * GB))
    assert machine.fabric.name == "analytical"
    op = Op(id=0, stream="compute", kind="memcpy", name="h2d", size_bytes=10 ** 9)
    job = Job(machine, Trace(1, [RankClass("all", (0,), [op])], {}), Placement((3,)), star,
              NoCompute())
    job.start()
    run_jobs(machine, [job])
    assert job.timeline(machine.record()).iteration_time_s == pytest.approx(10 ** 9 / (5 * GB))
    assert np.all(machine.record().link_bytes == 0)
