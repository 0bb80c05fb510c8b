"""Bundles (simulator/network/bundle.py): identical instances of a collective and members of
a send moved as one flow give the same replay, to the last bit, as one flow per instance;
where the instances stop being equivalent (a degraded link, servers of different designs,
uneven expert routing) the fabric splits the bundle and the replay is still the exact one;
and the events no longer grow with the number of data-parallel replicas."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import simpy

from simulator.models import load_model
from simulator.network.fabric import Flow, FlowFabric
from simulator.network.bundle import bundle_flows, bundled, instances
from simulator.network.maxmin import share_bandwidth, share_bandwidth_checked
from simulator.network.bundle import incidence
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.parallel.generate import build_parallel
from simulator.strategies.parallel.moe import ExpertLoad
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario, resolve_scenario
from simulator.strategies import World

GPT = dataclasses.replace(load_model("gpt3-1.3b"), layers=4)


def _trace(plan: ParallelPlan, gpus: int, m: int = 2, model=GPT, seq_len: int = 128, **cfg):
    cfg = MegatronConfig(micro_batch=1, grad_accum=m, **cfg)
    return build_parallel(model, plan, cfg, World(gpus, 8), seq_len=seq_len)


def _setup(trace, nodes: int, topology: str = "dgx-a100-superpod", sets=()):
    scn = load_scenario(resolve_scenario("quickstart"),
                        [f"cluster.topology={topology}", f"cluster.nodes={nodes}",
                         "training.seq_len=128", "simulation.variability=none", *sets])
    return dataclasses.replace(build_setup(scn, extrapolate_steps=False), trace=trace)


def _both(setup):
    """(bundled, one flow per instance) replays of ``setup``."""
    out = []
    for bundles in (True, False):
        engine = dataclasses.replace(setup.engine, bundles=bundles)
        out.append(run_setup(dataclasses.replace(setup, engine=engine)).timeline)
    return out


def _same(a, b) -> None:
    key = lambda r: (r.cls, r.op_id)       # noqa: E731
    ra, rb = sorted(a.records, key=key), sorted(b.records, key=key)
    assert [(r.cls, r.op_id, r.start_s, r.end_s) for r in ra] == \
        [(r.cls, r.op_id, r.start_s, r.end_s) for r in rb]
    assert a.iteration_time_s == b.iteration_time_s
    assert a.link_bytes.tobytes() == b.link_bytes.tobytes()
    assert a.link_occupancy_bytes.tobytes() == b.link_occupancy_bytes.tobytes()
    assert [(t, f.tobytes()) for t, f in a.link_samples] == \
        [(t, f.tobytes()) for t, f in b.link_samples]


PLANS = {                          # 32 GPUs, 4 servers
    "tp-only": ParallelPlan(tp=8, dp_replicate=4, dp_mode="ddp"),
    "pp+dp": ParallelPlan(pp=4, dp_replicate=8, dp_mode="ddp"),
    "tp+pp+fsdp": ParallelPlan(tp=2, pp=2, dp_shard=8, dp_mode="fsdp"),
    "tp+pp interleaved, distributed optimizer": ParallelPlan(
        tp=8, pp=2, vp=2, dp_shard=2, schedule="interleaved_1f1b", dp_mode="zero1"),
}


@pytest.mark.parametrize("name", sorted(PLANS))
def test_bundled_replay_is_the_per_instance_replay_bit_for_bit(name):
    bundled_tl, exact = _both(_setup(_trace(PLANS[name], 32), nodes=4))
    _same(bundled_tl, exact)
    assert bundled_tl.events < exact.events


def test_the_analytical_fabric_times_a_bundle_by_its_slowest_instance():
    setup = _setup(_trace(PLANS["tp+pp+fsdp"], 32), nodes=4,
                   sets=["simulation.fidelity=analytical"])
    setup.cluster.capacity_bytes_per_s[_a_nic_link(setup.cluster)] *= 0.25
    a, b = _both(setup)
    _same(a, b)


def test_expert_all_to_all_with_uneven_routing_is_the_per_instance_replay():
    model = dataclasses.replace(load_model("mixtral-8x7b"), layers=2)
    plan = ParallelPlan(pp=2, dp_shard=8, ep=8, dp_mode="zero1")
    trace = _trace(plan, 16, m=2, model=model, use_distributed_optimizer=True,
                   moe_load=ExpertLoad(distribution="zipf", zipf_s=1.0))
    a, b = _both(_setup(trace, nodes=2, topology="dgx-h100-superpod"))
    _same(a, b)


def test_a_degraded_nic_splits_the_bundles_and_the_replay_stays_exact():
    setup = _setup(_trace(ParallelPlan(tp=8, pp=2, dp_replicate=2, dp_mode="ddp"), 32),
                   nodes=4)
    # one NIC of one server at a quarter of its rate
    setup.cluster.capacity_bytes_per_s[_a_nic_link(setup.cluster)] *= 0.25
    a, b = _both(setup)
    _same(a, b)
    assert a.fabric_stats["splits"] > 0 and b.fabric_stats["splits"] == 0


def _a_nic_link(cluster) -> int:
    """A link between a NIC and its switch (the slowest class of link of a server)."""
    for (u, v), i in cluster.link_id.items():
        if "nic" in u.lower() and "nic" not in v.lower():
            return i
    raise AssertionError("no NIC link")


def test_events_do_not_grow_with_the_data_parallel_replicas():
    events, exact = [], []
    for nodes in (4, 8, 16):        # TP8 x PP2: 2, 4, 8 replicas
        plan = ParallelPlan(tp=8, pp=2, dp_replicate=nodes // 2, dp_mode="ddp")
        a, b = _both(_setup(_trace(plan, 8 * nodes), nodes=nodes))
        events.append(a.events)
        exact.append(b.events)
    # doubling the replicas adds no event (from 2 to 4 a few: some sends between stages
    # then cross a spine, a latency of their own, a bundle of their own)
    assert events[1] == events[2] and events[0] <= events[1] < exact[0]
    assert exact[0] < exact[1] < exact[2]


# ---------------------------------------------------------------- the pieces


def _flow(links, coef, size=100.0, **kw):
    return Flow(size, np.array(links, np.int64), np.array(coef, float), **kw)


def test_a_bundle_is_its_instances_entries_in_order_and_splits_back():
    a, b = _flow([0, 1], [1.0, 2.0]), _flow([2, 3], [1.0, 2.0], wire_coef=np.array([1., 1.]))
    one = bundle_flows([a, b])
    assert one.links.tolist() == [0, 1, 2, 3] and one.parts.tolist() == [0, 2, 4]
    assert one.wire_coef.tolist() == [1.0, 2.0, 1.0, 1.0]     # a's coef stands for its wire
    back = instances(one)
    assert [f.links.tolist() for f in back] == [[0, 1], [2, 3]]
    assert [f.parts for f in back] == [None, None]
    # only neighbours of the same size, latency and cap are bundled
    c = _flow([4], [1.0], latency_s=1e-6)
    assert [len(instances(f)) for f in bundled([a, b, c, a])] == [2, 1, 1]


def test_the_checked_solve_flags_a_bundle_whose_instances_freeze_apart():
    cap = np.array([10.0, 10.0, 10.0])
    a, b, other = _flow([0], [1.0]), _flow([1], [1.0]), _flow([1], [1.0])
    rates, split = share_bandwidth_checked(incidence([bundle_flows([a, b])]), cap)
    assert not split.any() and rates.tolist() == [10.0]     # disjoint: both at 10
    exact = share_bandwidth(incidence([a, b, other]), cap)
    assert exact.tolist() == [10.0, 5.0, 5.0]                # b shares link 1
    _, split = share_bandwidth_checked(incidence([bundle_flows([a, b]), other]), cap)
    assert split.tolist() == [True, False]


def test_a_split_bundle_finishes_when_its_last_instance_does():
    env = simpy.Environment()
    fabric = FlowFabric(env, np.array([10.0, 10.0]))
    both = fabric.transfer(bundle_flows([_flow([0], [1.0]), _flow([1], [1.0])]))
    other = fabric.transfer(_flow([1], [1.0]))
    env.run()
    assert fabric.splits == 1
    # link 1 shared: 5 + 5 until t = 20 for b and other; a alone at 10 ends at t = 10
    assert both.value.end_s == pytest.approx(100.0 / 5.0)
    assert other.value.end_s == pytest.approx(100.0 / 5.0)
    assert fabric.link_bytes.tolist() == pytest.approx([100.0, 200.0])


def test_a_solve_on_the_used_links_only_is_the_solve_on_every_link():
    from simulator.network.maxmin import FlowIncidence, on_used_links
    from simulator.network.fabric import bottleneck_rate
    rng = np.random.default_rng(3)
    cap = rng.uniform(1.0, 10.0, 200)
    links = [rng.choice(200, size=rng.integers(1, 12)) for _ in range(30)]
    coefs = [rng.uniform(0.1, 2.0, len(x)) for x in links]
    inc = FlowIncidence.from_lists(links, coefs)
    local, used = on_used_links(inc, len(cap))
    assert share_bandwidth(local, cap[used]).tobytes() == share_bandwidth(inc, cap).tobytes()
    for x, c in zip(links, coefs):      # one flow alone: the dense bincount's arithmetic
        load = np.bincount(x, weights=c, minlength=len(cap))
        assert bottleneck_rate(Flow(1.0, x, c), cap) == np.min(cap[load > 0] / load[load > 0])


def test_uneven_leaves_on_an_oversubscribed_fabric_give_the_per_instance_replay():
    # 6 servers, 4 a leaf: one full leaf and one half-full, spines at 4:1; some replicas'
    # sends and rings cross the spines and others do not
    plan = ParallelPlan(tp=8, pp=2, dp_replicate=3, dp_mode="ddp")
    setup = _setup(_trace(plan, 48), nodes=6, topology="a100-roce-leaf-spine",
                   sets=["topology.params.oversubscription=4"])
    a, b = _both(setup)
    _same(a, b)
    assert a.fabric_stats["splits"] > 0          # the fallback was taken
