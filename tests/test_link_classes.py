"""Link classes (simulator/network/orbits.py, reduced.py): the flow fabric's solve on one
link of each class of equivalent links; the classes stay few as replicas grow; the
partition's invariants hold on hand-built flows; the solve on classes is the solve on every
link on random sets; and a class split while a transfer crosses it keeps every link's
counters exact. Whole replays on classes against the reference fabric (every link):
tests/test_engine_reference.py."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.sim import Environment
from simulator.network.bundle import bundle_flows, incidence
from simulator.network.fabric import Flow, FlowFabric
from simulator.network.maxmin import share_bandwidth_checked
from simulator.network.orbits import LinkClasses
from simulator.network.reduced import ClassSolver
from simulator.network.solve import Solver
from simulator.strategies.parallel import ParallelPlan

from replay_helpers import plan_setup, plan_trace, replay_on

SAMPLE_RTOL = 1e-12


def test_classes_stay_few_as_replicas_grow():
    counts = []
    for nodes in (4, 16):           # TP8 x PP2: 2 and 8 replicas
        plan = ParallelPlan(tp=8, pp=2, dp_replicate=nodes // 2, dp_mode="ddp")
        setup = plan_setup(plan_trace(plan, 8 * nodes), nodes=nodes)
        made = []
        replay_on(setup, lambda env, cap: made.append(FlowFabric(env, cap)) or made[-1])
        counts.append(made[0].link_class_count)
        assert counts[-1] < len(setup.cluster.capacity_bytes_per_s)
    assert counts[1] <= 2 * counts[0]     # the links grow 4x, the classes barely


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
        env = Environment()
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
    assert c.link_class_count > 1


def test_both_numberings_of_the_solved_classes_agree():
    from simulator.network.maxmin import renumbered
    links = np.array([7, 3, 7, 2000, 3], np.int64)
    few, many = renumbered(links, 2001), renumbered(links, 10 ** 6)   # mark / sort
    assert few[0].tolist() == many[0].tolist() == [3, 7, 2000]
    assert few[1].tolist() == many[1].tolist() == [1, 0, 1, 2, 0]
