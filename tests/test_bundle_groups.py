"""A bundle whose instances stop being identical splits into groups, not into every instance
(simulator/network/bundle.py ``groups_of``, ``keeps_order``; ``FlowFabric._groups_of``):
the instances are grouped by their rate in a solve with one flow per instance, and each
group is a bundle again, which the checked solve tests like any other (and splits again
where its instances part later). A group keeps each link's terms in instance order or it is
not made. Same ends and counters as the plain loop that splits into instances, to the last
bit (tests/test_fabric_reference.py on random bundles of up to eight instances;
tests/test_engine_reference.py on whole replays)."""

from __future__ import annotations

import numpy as np
import pytest

from reference_fabric import ListFabric
from simulator.network import active
from simulator.network.bundle import Splitter, bundle_flows, groups_of, keeps_order
from simulator.network.fabric import Flow, FlowFabric
from simulator.sim import Environment


def _flow(links, coef=None, size=100.0, **kw):
    coef = [1.0] * len(links) if coef is None else coef
    return Flow(size, np.array(links, np.int64), np.array(coef, float), **kw)


def test_instances_are_grouped_by_rate_in_order_of_their_first():
    assert groups_of(np.array([5.0, 2.5, 5.0, 2.5, 1.0])) == ((0, 2), (1, 3), (4,))
    assert groups_of(np.array([3.0, 3.0])) == ((0, 1),)


def test_groups_keep_order_unless_a_shared_link_would_add_its_terms_out_of_order():
    # instances 0..3 on links 0..3; instances 0 and 1 also share link 9
    shared_early = bundle_flows([_flow([0, 9]), _flow([1, 9]), _flow([2]), _flow([3])])
    # groups (0, 2), (1, 3): positions 0, 2, 1, 3; on link 9: instance 0 (position 0)
    # then instance 1 (position 2): in order
    assert keeps_order(shared_early, ((0, 2), (1, 3)))
    # instances 1 and 2 share link 9: instance 1 at position 2, instance 2 at position 1
    shared_late = bundle_flows([_flow([0]), _flow([1, 9]), _flow([2, 9]), _flow([3])])
    assert not keeps_order(shared_late, ((0, 2), (1, 3)))
    assert keeps_order(shared_late, ((0, 1, 2), (3,)))


def test_a_group_is_a_bundle_of_its_instances_entries_in_order():
    one = bundle_flows([_flow([0, 1]), _flow([2]), _flow([3, 4]), _flow([5])])
    split = Splitter()
    a, b = split(one, ((0, 2), (1, 3)))
    assert a.links.tolist() == [0, 1, 3, 4] and a.parts.tolist() == [0, 2, 4]
    assert b.links.tolist() == [2, 5] and b.parts.tolist() == [0, 1, 2]
    again = split(one.fresh(), ((0, 2), (1, 3)))        # recurring: the same arrays
    assert again[0].links is a.links and again[1].parts is b.parts
    lone = split(one, ((0, 1, 2), (3,)))[1]
    assert lone.parts is None and lone.links.tolist() == [5]


def _sizes_after_splits(monkeypatch) -> list:
    """The number of flows of each set right after a bundle in it splits."""
    sizes: list = []
    split = active.FlowSet.split

    def counted(self, *args):
        out = split(self, *args)
        sizes.append(len(self.flows))
        return out

    monkeypatch.setattr(active.FlowSet, "split", counted)
    return sizes


def _run(make, capacity, flows):
    env = Environment()
    fabric = make(env, capacity)
    done = [fabric.transfer(f) for f in flows]
    env.run()
    return [(e.value.start_s, e.value.end_s) for e in done], fabric


@pytest.mark.parametrize("classes", [False, True])
def test_eight_instances_of_two_kinds_split_into_two_flows(monkeypatch, classes):
    # instances 2 and 5 share their link with another transfer: half rate until it ends
    capacity = np.full(10, 10.0)
    bundle = bundle_flows([_flow([k]) for k in range(8)])
    other = _flow([2, 5], size=50.0)
    sizes = _sizes_after_splits(monkeypatch)
    ends, fabric = _run(lambda env, cap: FlowFabric(env, cap, link_classes=classes),
                        capacity, [bundle, other])
    assert fabric.splits == 1 and sizes == [3]      # groups (0, 1, 3, 4, 6, 7), (2, 5)
    ref_ends, ref = _run(ListFabric, capacity, [bundle.fresh(), other.fresh()])
    assert ends == ref_ends
    # the others at 10 B/s end at 10 s; 2 and 5 share with `other` at 5 B/s each until it
    # ends at 10 s (50 B), then take their last 50 B at 10 B/s: 15 s
    assert [end for _, end in ends] == [15.0, 10.0]
    assert fabric.link_bytes.tobytes() == ref.wire.tobytes()
    assert fabric.link_occupancy_bytes.tobytes() == ref.occupancy.tobytes()


def test_groups_that_would_reorder_a_shared_link_are_cut_into_instances(monkeypatch):
    # instances 1 and 2 share link 9 (10 B/s; the others 5 B/s): alone, all four at 5.
    # Another transfer takes link 1 three bytes a byte: full at 5 / 4 = 1.25 B/s
    # (instance 1); instances 0, 2 and 3 keep 5. By rate the groups would be (0, 2, 3),
    # (1,): instance 2 ahead of instance 1 on link 9, so every instance is a flow.
    capacity = np.full(10, 5.0)
    capacity[9] = 10.0
    bundle = bundle_flows([_flow([0]), _flow([1, 9]), _flow([2, 9]), _flow([3])])
    other = _flow([1], [3.0], size=50.0)
    sizes = _sizes_after_splits(monkeypatch)
    ends, fabric = _run(FlowFabric, capacity, [bundle, other])
    assert sizes == [5]
    ref_ends, ref = _run(ListFabric, capacity, [bundle.fresh(), other.fresh()])
    assert ends == ref_ends
    assert fabric.link_bytes.tobytes() == ref.wire.tobytes()
    assert fabric.link_occupancy_bytes.tobytes() == ref.occupancy.tobytes()


def test_a_recurring_split_is_grouped_once(monkeypatch):
    worked: list = []
    grouping = FlowFabric._grouping

    def counted(self, flows, split):
        worked.append(len(flows))
        return grouping(self, flows, split)

    monkeypatch.setattr(FlowFabric, "_grouping", counted)
    env = Environment()
    fabric = FlowFabric(env, np.full(10, 10.0))
    bundle = bundle_flows([_flow([k]) for k in range(8)])
    other = _flow([2, 5], size=50.0)
    for _ in range(4):          # one round after another, each run to its end
        for flow in (bundle, other):
            fabric.transfer(flow.fresh())
        env.run()
    assert fabric.splits == 4 and worked == [2]
