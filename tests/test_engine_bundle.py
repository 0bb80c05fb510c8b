"""Bundles (simulator/network/bundle.py): identical instances of a collective and members of
a send moved as one flow; the pieces: a bundle is its instances' entries in order and splits
back, the checked solve flags a bundle whose instances freeze apart, a split bundle finishes
with its last instance. Whole replays with bundles against the reference fabric (one flow
per instance where they split): tests/test_engine_reference.py."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.network.bundle import bundle_flows, bundled, incidence, instances
from simulator.network.fabric import Flow, FlowFabric
from simulator.network.maxmin import share_bandwidth, share_bandwidth_checked
from simulator.sim import Environment



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
    env = Environment()
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
