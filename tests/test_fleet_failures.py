"""Failures across the fleet (simulator/fleet/failures.py, simulate.py): GPU, NIC, link and
spine failures from the reliability model's inventory of the whole cluster, their rates by
scale, what each stops or slows, on hand-made traces whose arithmetic is worked out here."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from conftest import make_model, star_graph
from job_helpers import NIC, SIZE, NoCompute
from job_helpers import all_reduce as _all_reduce
from simulator.engine import Placement, replay
from simulator.fleet.build import mix_cluster
from simulator.fleet.contention import StepTimes, Work
from simulator.fleet.failures import Component, FailureClass, failing
from simulator.fleet.mix import Mix
from simulator.fleet.placement import Layout
from simulator.fleet.simulate import Fleet, JobSpec
from simulator.reliability.inventory import degraded_graph
from test_fleet_scheduler import LAYOUT, FixedSteps  # servers 0-1 / 2-3 in two groups

DAY = 86400.0


class SpineSteps(FixedSteps):
    """1 s a step; 2 s for a job crossing the groups while a fabric element is down."""

    degraded = ()

    def steps(self, running):
        def crosses(p):
            return len({LAYOUT.group[self.where[g][0]] for g in p.gpus}) > 1
        return {k: 2.0 if self.degraded and crosses(p) else 1.0 for k, (_, p) in running.items()}


def _fleet(jobs, components, scheduled, **kw) -> Fleet:
    specs = [JobSpec(name, 0.0, SimpleNamespace(name="stub"), gpus, duration_s=duration, **kw)
             for name, gpus, duration in jobs]
    return Fleet(LAYOUT, specs, "fifo", "spread", components, scheduled=scheduled,
                 step_times=SpineSteps(LAYOUT))


def test_a_spine_slows_the_jobs_crossing_it_and_a_gpu_stops_its_job():
    # A (16 GPUs, spread: servers 0 and 2, across the spine) and B (8 GPUs, server 1: the
    # emptiest, lowest first) each have 100 s of 1 s steps, checkpoints every 10 s, restore
    # 5 s. The spine is down 20-50 s: A steps at 2 s there (20 + 15 steps), so it ends at
    # 50 + 65 = 115 (slowdown 115 / 100); B, inside one server, is not slowed. B's GPU
    # fails at 45: B keeps its 40 checkpointed steps (5 lost), restarts at once on server 3
    # (whole and free), pays its 5 s restore and runs 60 more: it ends at 45 + 5 + 60 = 110.
    nodes = tuple(Component(f"node {s}", (s,)) for s in range(4))
    spine = Component("spine.0", (), repair_s=30.0, degrades=("node", "spine.0"))
    gpu = Component("n1.gpu0", (1,), repair_s=1000.0)
    fleet = _fleet([("A", 16, 100.0), ("B", 8, 100.0)], nodes + (spine, gpu),
                   ((20.0, 4), (45.0, 5)), checkpoint_s=10.0, restore_s=5.0)
    result = fleet.run()
    rows = {j["job"]: j for j in result.jobs}
    a, b = rows["A"], rows["B"]
    assert a["end_s"] == pytest.approx(115) and a["restarts"] == 0
    assert a["slowdown"] == pytest.approx(115 / 100)
    assert a["placement"] == " ".join(map(str, [*range(8), *range(16, 24)]))
    assert b["end_s"] == pytest.approx(110) and b["restarts"] == 1
    assert b["lost_steps"] == pytest.approx(5)
    assert b["placement"] == " ".join(map(str, range(24, 32)))
    downs = {s["time_s"]: s["down_gpus"] for s in result.samples}
    assert (downs[20.0], downs[45.0]) == (0, 8)     # a spine takes no server out


def test_a_class_fails_as_one_process_drawing_its_component_from_its_own_stream():
    # The four GPUs' class (one per server here) at 1 per 100 s in all: the first failure is
    # at the stream (seed, components + class index)'s first exponential draw, on the
    # component of its next integer draw. J holds every GPU without checkpoints: it loses
    # all its steps up to then and waits (that server is out for good).
    nodes = tuple(Component(f"node {s}", (s,)) for s in range(4))
    gpus = tuple(Component(f"n{s}.gpu0", (s,), repair_s=1e9) for s in range(4))
    fleet = _fleet([("J", 32, 1000.0)], nodes + gpus, ())
    fleet.classes = (FailureClass("gpu", 4, 4, 0.01),)
    fleet.seed = 7
    rng = np.random.default_rng([7, 8 + 0])
    at, which = float(rng.exponential(100.0)), int(rng.integers(4))
    fleet.horizon_s = at            # nothing after the first failure
    result = fleet.run()
    row = result.jobs[0]
    assert row["restarts"] == 1 and row["lost_steps"] == pytest.approx(at)
    assert row["state"] == "waiting"
    assert {s["time_s"]: s["down_gpus"] for s in result.samples}[at] == 8
    assert fleet.down == {which: 1}


def _mix(**failures) -> Mix:
    return Mix.model_validate({
        "name": "t", "cluster": {"topology": "dgx-a100-superpod", "nodes": 4,
                                 "topology_set": {"params.nodes_per_leaf": 2}},
        "jobs": [{"arrival": "0 s", "scenario": "quickstart", "gpus": 8, "steps": 1}],
        "failures": failures})


def test_rates_by_scale_and_blast_radius_from_the_reliability_inventory():
    mix = _mix(gpu="0.303 per 1000 gpu-days", link="0.316 per 1000 node-days",
               spine_switch="1 per 1000 switch-days")
    cluster = mix_cluster(mix, "t")
    layout = Layout.of(cluster)
    comps, classes = failing(cluster, layout, mix, "t")
    by = {c.name: c for c in classes}
    spines = [c for c in comps if c.name.startswith("spine.")]
    # per gpu-day of each of the 32 GPUs; per node-day of the 4 servers, shared by the
    # links; per switch-day of each spine
    assert by["gpu"].rate_per_s == pytest.approx(0.303e-3 / DAY * 32, rel=1e-12)
    assert by["link"].rate_per_s == pytest.approx(0.316e-3 / DAY * 4, rel=1e-12)
    assert by["spine_switch"].rate_per_s == pytest.approx(1e-3 / DAY * len(spines),
                                                          rel=1e-12)
    assert "nic" not in by                     # no rate: no process
    named = {c.name: c for c in comps}
    # a GPU takes its server out; a NIC's only cable too; a spine with others left takes
    # none and degrades the fabric, as does a leaf-spine cable
    assert named["n3.gpu5"].servers == (3,) and not named["n3.gpu5"].degrades
    nic_cable = next(c for c in comps if "~" in c.name and "nic" in c.name)
    assert len(nic_cable.servers) == 1 and not nic_cable.degrades
    assert spines and all(c.servers == () and c.degrades == ("node", c.name) for c in spines)
    uplink = named["leaf.r0.g0~spine.0"]
    assert uplink.servers == () and uplink.degrades == ("edge", "leaf.r0.g0", "spine.0")


def test_a_rate_of_another_basis_is_refused_naming_the_class():
    from simulator.errors import ConfigError
    mix = _mix(spine_switch="1 per 1000 link-days")
    cluster = mix_cluster(mix, "t")
    with pytest.raises(ConfigError, match="per switch-time") as info:
        failing(cluster, Layout.of(cluster), mix, "t")
    assert info.value.field == "failures.spine_switch"


def _two_spines(constants):
    """Two leaves of two one-GPU servers joined by two spines, each uplink half a NIC."""
    G = star_graph(4, nic_bw=NIC, leaves=2, uplink_bw=NIC / 2)
    G.add_node("spine.1", kind="switch", tier="spine")
    for g in range(2):
        G.add_edge(f"leaf.g{g}", "spine.1", **G.edges[f"leaf.g{g}", "spine.0"])
    return G


def test_a_job_crossing_a_failed_spine_steps_at_its_time_on_the_fabric_without_it(
        ideal_constants):
    G = _two_spines(ideal_constants)
    model = make_model(G, ideal_constants)
    times = StepTimes(Layout.of(model.cluster))
    work = Work("ar", _all_reduce(), model, NoCompute())
    built = []

    def rebuild(w, degraded):
        H = G
        for element in degraded:
            H = degraded_graph(H, element)
        built.append(degraded)
        return Work(f"ar without {degraded}", w.trace, make_model(H, ideal_constants),
                    NoCompute(), degraded=degraded)
    times.rebuild = rebuild
    across, inside = Placement((0, 2)), Placement((0, 1))
    healthy = times.steps({"a": (work, across), "b": (work, inside)})
    times.degraded = (("node", "spine.1"),)
    slowed = times.steps({"a": (work, across), "b": (work, inside)})
    # healthy, ECMP spreads the ring's S bytes each way over both half-NIC uplinks (S / NIC);
    # with one spine left they all take one (2 S / NIC). The job inside one leaf is not
    # re-rated; the kind is rebuilt once for that fabric
    latency = healthy["a"] - SIZE / NIC
    assert healthy["a"] - latency == pytest.approx(SIZE / NIC, rel=1e-9)
    assert slowed["a"] - latency == pytest.approx(2 * SIZE / NIC, rel=1e-9)
    alone = replay(_all_reduce(), make_model(degraded_graph(G, ("node", "spine.1")),
                                             ideal_constants), NoCompute(), placement=across)
    assert slowed["a"] == alone.iteration_time_s
    assert slowed["b"] == healthy["b"] and built == [(("node", "spine.1"),)]
    times.degraded = ()
    assert times.steps({"a": (work, across)}) == {"a": healthy["a"]}


def test_two_placements_of_one_shape_on_hosts_of_different_links_take_different_times(
        ideal_constants):
    # servers 1 and 3 have half-speed NIC cables: (0, 2) and (1, 3) are one shape (a rank
    # under each leaf), but the ring of (1, 3) moves its S bytes at NIC / 2: 2 S / NIC
    G = star_graph(4, nic_bw=NIC, leaves=2, uplink_bw=NIC)
    for s, leaf in ((1, "leaf.g0"), (3, "leaf.g1")):
        G.edges[f"n{s}.nic0", leaf]["bw_bytes_per_s"] = NIC / 2
    model = make_model(G, ideal_constants)
    times = StepTimes(Layout.of(model.cluster))
    assert times.layout.links == (0, 1, 0, 1)
    work = Work("ar", _all_reduce(), model, NoCompute())
    fast = times.alone(work, Placement((0, 2)))
    slow = times.alone(work, Placement((1, 3)))
    latency = fast - SIZE / NIC
    assert slow - latency == pytest.approx(2 * SIZE / NIC, rel=1e-9)
    assert times.counts.alone == 2 and times.counts.hits == 0
    assert times.alone(work, Placement((1, 3))) == slow and times.counts.hits == 1


def test_a_mix_s_scheduled_spine_link_and_gpu_failures_end_to_end(tmp_path):
    # two 16-GPU quickstart jobs spread over both leaf groups (servers 0+2 and 1+3, both
    # across the spine); a spine down 10-70 s and a leaf-spine cable down 20-140 s stop
    # nothing (the fabric reroutes: the jobs are re-rated on it, their kinds built there);
    # a GPU of server 0 at 30 s stops the job on it, which keeps no step (no checkpoint)
    from simulator.fleet.build import build_fleet
    from simulator.fleet.mix import load_mix
    (tmp_path / "m.yaml").write_text(
        "name: m\ncluster: {topology: dgx-a100-superpod, nodes: 4, "
        "topology_set: {params.nodes_per_leaf: 2}}\nscheduler: fifo\nplacement: spread\n"
        "jobs: [{name: a, arrival: 0 s, scenario: quickstart, gpus: 16, steps: 200},\n"
        "       {name: b, arrival: 0 s, scenario: quickstart, gpus: 16, steps: 200}]\n"
        "failures: {spine_repair: 1 min, link_repair: 2 min, schedule: [{at: 10 s, switch: "
        "spine.0}, {at: 20 s, link: [spine.1, leaf.r0.g0]}, {at: 30 s, gpu: n0.gpu3}]}\n")
    fleet = build_fleet(*load_mix(tmp_path / "m.yaml"))
    result = fleet.run()
    rows = {j["job"]: j for j in result.jobs}
    assert sorted(j["restarts"] for j in rows.values()) == [0, 1]
    hit = next(j for j in rows.values() if j["restarts"])
    # the steps of its first 30 s, lost: 30 s of steps at most (a degraded step is no
    # shorter than a healthy one)
    assert 0 < hit["lost_steps"] <= 30 / hit["step_alone_s"] * (1 + 1e-12)
    assert all(j["state"] == "done" and j["slowdown"] >= 1.0 for j in rows.values())
    # the degraded fabrics were simulated: more than the two jobs' shapes alone
    assert result.counts["alone"] + result.counts["together"] > 2


def test_a_nic_s_second_cable_down_re_rates_the_multi_server_jobs_on_its_server(
        ideal_constants):
    # the rule of who meets a degraded fabric: a job inside one leaf crosses no spine, so
    # only a NIC cable of one of its servers (``slowed``) sends it to the rebuilt kind
    model = make_model(_two_spines(ideal_constants), ideal_constants)
    times = StepTimes(Layout.of(model.cluster))
    work = Work("ar", _all_reduce(), model, NoCompute())
    rebuilt = []

    def rebuild(w, degraded):
        rebuilt.append(degraded)
        return Work("ar rebuilt", w.trace, model, NoCompute(), degraded=degraded)
    times.rebuild = rebuild
    times.degraded = (("edge", "leaf.g1", "n2.nic0"),)
    times.slowed = frozenset({2})
    times.steps({"inside": (work, Placement((0, 1)))})
    assert rebuilt == []                                 # servers 0-1: not slowed
    times.steps({"inside": (work, Placement((2, 3)))})
    assert rebuilt == [times.degraded]                   # server 2's cable
    assert times.counts.alone == 2                       # (2, 3) simulated on the rebuilt
