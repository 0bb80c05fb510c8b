"""Link classes (simulator/network/orbits.py, reduced.py): the flow fabric's solve on one
link of each class of equivalent links gives the replay of the solve on every link, and of
one flow per instance, to the last bit (records, iteration time, link counters); the
utilisation samples within a few ulps; the partition's invariants hold on hand-built flows;
and a class split while a transfer crosses it keeps every link's counters exact."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest
import simpy

from simulator.models import load_model
from simulator.network.bundle import bundle_flows, incidence
from simulator.network.fabric import Flow, FlowFabric
from simulator.network.maxmin import share_bandwidth_checked
from simulator.network.orbits import LinkClasses
from simulator.network.reduced import ClassSolver
from simulator.network.solve import Solver
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.moe import ExpertLoad
from simulator.pipeline import run_setup

from test_engine_bundle import GPT, PLANS, _a_nic_link, _setup, _trace

SAMPLE_RTOL = 1e-12


def _three(setup):
    """(classes + bundles, every link + bundles, every link + one flow per instance)."""
    out = []
    for classes, bundles in ((True, True), (False, True), (False, False)):
        engine = dataclasses.replace(setup.engine, link_classes=classes, bundles=bundles)
        out.append(run_setup(dataclasses.replace(setup, engine=engine)).timeline)
    return out


def _exact(tl) -> tuple:
    """What must be the same to the last bit: records, time, counters, sample instants."""
    records = sorted((r.cls, r.op_id, r.start_s, r.end_s) for r in tl.records)
    return (records, tl.iteration_time_s, tl.link_bytes.tobytes(),
            tl.link_occupancy_bytes.tobytes(), [t for t, _ in tl.link_samples])


def _same(a, b) -> None:
    assert _exact(a) == _exact(b)
    for (_, fa), (_, fb) in zip(a.link_samples, b.link_samples):
        np.testing.assert_allclose(fa, fb, rtol=SAMPLE_RTOL, atol=0)


def _check(setup) -> list:
    classes, links, exact = _three(setup)
    _same(classes, links)
    _same(classes, exact)
    assert classes.events == links.events
    assert classes.fabric_stats == links.fabric_stats
    return [classes, links, exact]


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_solve_on_classes_is_the_solve_on_every_link(name):
    _check(_setup(_trace(PLANS[name], 32), nodes=4))


def test_moe_uneven_routing_on_classes():
    model = dataclasses.replace(load_model("mixtral-8x7b"), layers=2)
    plan = ParallelPlan(pp=2, dp_shard=8, ep=8, dp_mode="zero1")
    trace = _trace(plan, 16, m=2, model=model, use_distributed_optimizer=True,
                   moe_load=ExpertLoad(distribution="zipf", zipf_s=1.0))
    _check(_setup(trace, nodes=2, topology="dgx-h100-superpod"))


@pytest.mark.parametrize("fidelity", ["flow", "analytical"])
def test_a_degraded_nic_on_classes(fidelity):
    setup = _setup(_trace(ParallelPlan(tp=8, pp=2, dp_replicate=2, dp_mode="ddp"), 32),
                   nodes=4, sets=[f"simulation.fidelity={fidelity}"])
    setup.cluster.capacity_bytes_per_s[_a_nic_link(setup.cluster)] *= 0.25
    classes, _, _ = _check(setup)
    if fidelity == "flow":
        assert classes.fabric_stats["splits"] > 0


def test_uneven_oversubscribed_leaves_on_classes():
    plan = ParallelPlan(tp=8, pp=2, dp_replicate=3, dp_mode="ddp")
    setup = _setup(_trace(plan, 48), nodes=6, topology="a100-roce-leaf-spine",
                   sets=["topology.params.oversubscription=4"])
    classes, _, _ = _check(setup)
    assert classes.fabric_stats["splits"] > 0


def test_classes_stay_few_as_replicas_grow(monkeypatch):
    counts = []
    for nodes in (4, 16):           # TP8 x PP2: 2 and 8 replicas
        plan = ParallelPlan(tp=8, pp=2, dp_replicate=nodes // 2, dp_mode="ddp")
        setup = _setup(_trace(plan, 8 * nodes), nodes=nodes)
        fabric = _fabric_after(setup, monkeypatch)
        counts.append(fabric._solver.classes.n)
        links = len(setup.cluster.capacity_bytes_per_s)
        assert fabric._solver.classes.n < links
    assert counts[1] <= 2 * counts[0]     # the links grow 4x, the classes barely


def _fabric_after(setup, monkeypatch):
    replay = importlib.import_module("simulator.engine.replay")
    seen = []
    real = replay.make_fabric

    def spy(*args, **kw):
        seen.append(real(*args, **kw))
        return seen[-1]
    with monkeypatch.context() as m:
        m.setattr(replay, "make_fabric", spy)
        run_setup(setup)
    return seen[0]


# ---------------------------------------------------------------- the pieces


def _flow(links, coef, size=100.0, **kw):
    return Flow(size, np.array(links, np.int64), np.array(coef, float), **kw)


def _entries_per_link(flows, link):
    return [(i, c) for i, f in enumerate(flows) for l, c in zip(f.links, f.coef) if l == link]


def test_the_partition_keeps_invariant_a_and_restricts_to_one_link_a_class():
    cap = np.array([10.0, 10.0, 10.0, 10.0, 10.0, 5.0])
    flows = [_flow([0, 1, 2, 3], [1.0, 1.0, 2.0, 2.0]),       # {0,1} and {2,3} alike
             _flow([1, 0], [0.5, 0.5]),                          # the same on 0 and 1
             _flow([2, 2, 3], [1.0, 1.0, 2.0]),                  # 2: (1, 1), 3: (2): apart
             _flow([5], [1.0])]
    classes = LinkClasses(cap)
    rs = classes.restricted(flows)
    of = classes.of_link
    assert of[0] == of[1] and of[2] != of[3] and of[4] != of[0] and of[5] != of[4]
    for a in range(6):              # (a): links of a class, the same ordered entries
        for b in range(6):
            if of[a] == of[b]:
                assert _entries_per_link(flows, a) == _entries_per_link(flows, b)
                assert cap[a] == cap[b]
    # restricted: the entries on the first link of each class, in the flow's order
    assert rs[0].links.tolist() == [of[0], of[2], of[3]] and rs[0].coef.tolist() == [1, 2, 2]
    assert rs[1].links.tolist() == [of[1]] and rs[1].coef.tolist() == [0.5]
    assert rs[2].coef.tolist() == [1.0, 1.0, 2.0]
    n = classes.n
    classes.restricted(flows)       # seen before: nothing splits
    assert classes.n == n


def test_invariant_b_marks_classes_only_some_instances_cross():
    cap = np.full(4, 10.0)
    bundle = bundle_flows([_flow([0, 2], [1.0, 1.0]), _flow([1, 3], [1.0, 1.0])])
    classes = LinkClasses(cap)
    (r,) = classes.restricted([bundle])
    # the bundle crosses all four alike: one class, crossed by both instances
    assert classes.n == 1 and r.whole.all() and len(r.pair_class) == 0
    (r, _) = classes.restricted([bundle, _flow([1], [1.0])])    # link 1 now apart
    of = classes.of_link
    assert of[0] == of[2] == of[3] != of[1]
    # {0, 2, 3}: both instances cross it; {1}: only instance 1 ((b) fails there)
    assert list(zip(r.pair_class.tolist(), r.pair_part.tolist())) == [(of[1], 1)]
    assert r.links.tolist() == [of[0], of[1]]    # kept: link 0 (first of its class), link 1
    assert r.whole.tolist() == [True, False]


def _solve_both(flows, cap, groups=None):
    out = []
    for cls in (ClassSolver, Solver):
        s = cls(cap)
        if groups is not None:
            s.track(groups, int(groups.max()) + 1)
        out.append((s, *s.solve(flows)))
    return out


def test_class_solve_matches_on_random_symmetric_and_asymmetric_sets():
    rng = np.random.default_rng(7)
    for trial in range(20):
        n_links, servers = 40, 4
        cap = np.full(n_links, 10.0)
        cap[rng.integers(n_links)] *= rng.choice([1.0, 0.5])
        groups = np.arange(n_links) % 3
        flows = []
        for _ in range(6):
            per = rng.integers(1, 4)
            base = rng.choice(10, size=per)
            coef = rng.uniform(0.5, 2.0, per)
            parts = [_flow(base + 10 * s, coef) for s in range(servers)]
            flows.append(bundle_flows(parts) if rng.random() < 0.7 else parts[0])
        (cs, a, sa), (ls, b, sb) = _solve_both(flows, cap, groups)
        assert sa.tolist() == sb.tolist()
        if a is None:
            continue
        assert a.rates.tobytes() == b.rates.tobytes()
        occ = cs.classes.per_link(_dense(a.links, a.occupancy, cs.classes.n))
        assert occ.tobytes() == _dense(b.links, b.occupancy, n_links).tobytes()
        np.testing.assert_allclose(a.group_load, b.group_load, rtol=SAMPLE_RTOL, atol=0)


def _dense(slots, values, n):
    out = np.zeros(n)
    out[slots] = values
    return out


def test_the_split_check_on_classes_is_the_check_on_links():
    cap = np.array([10.0, 10.0, 10.0])
    a, b, other = _flow([0], [1.0]), _flow([1], [1.0]), _flow([1], [1.0])
    flows = [bundle_flows([a, b]), other]
    _, split = share_bandwidth_checked(incidence(flows), cap)
    (_, sol, split_c), _ = _solve_both(flows, cap)
    assert sol is None and split_c.tolist() == split.tolist() == [True, False]


def test_counters_expand_to_every_link_and_survive_a_class_split_mid_transfer():
    def run(link_classes):
        env = simpy.Environment()
        fabric = FlowFabric(env, np.full(4, 10.0), link_classes=link_classes)
        fabric.track(np.zeros(4, np.int64), 1)
        # one bundle over links 0-1 and 2-3 (one class each pair), then, mid-way, a flow
        # on link 2 alone splits that class and the bundle
        fabric.transfer(bundle_flows([_flow([0, 1], [1.0, 1.0]), _flow([2, 3], [1.0, 1.0])]))

        def late():
            yield env.timeout(3.0)
            fabric.transfer(_flow([2], [1.0], size=30.0))
        env.process(late())
        env.run()
        return fabric
    c, e = run(True), run(False)
    assert c.link_bytes.tobytes() == e.link_bytes.tobytes()
    assert c.link_occupancy_bytes.tobytes() == e.link_occupancy_bytes.tobytes()
    # by hand: 0,1 carry 100 B; 2 carries the bundle's 100 B and the flow's 30 B
    assert c.link_bytes.tolist() == pytest.approx([100.0, 100.0, 130.0, 100.0])
    assert c.splits == e.splits == 1
    assert c._solver.classes.n > 1


def test_both_numberings_of_the_solved_classes_agree():
    from simulator.network.maxmin import renumbered
    links = np.array([7, 3, 7, 2000, 3], np.int64)
    few, many = renumbered(links, 2001), renumbered(links, 10 ** 6)   # mark / sort
    assert few[0].tolist() == many[0].tolist() == [3, 7, 2000]
    assert few[1].tolist() == many[1].tolist() == [1, 0, 1, 2, 0]
