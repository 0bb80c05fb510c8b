"""A flow that recurs refines the link classes once (simulator/network/orbits.py,
bundle.py): a bundle that splits again gives instances on the very same arrays
(:class:`~simulator.network.bundle.Splitter`), so the classes and the remembered solves know
them; and more distinct flows than a small table would keep (4,096 did, and a step of TP2 x
CP4 x FSDP on 8,192 GPUs meets 11,533) are each refined once however often they return.
Same times either way: tests/test_engine_reference.py replays against the reference fabric."""

from __future__ import annotations

import numpy as np

from simulator.network.bundle import Splitter, bundle_flows, instances
from simulator.network.fabric import Flow, FlowFabric
from simulator.network.orbits import LinkClasses
from simulator.sim import Environment


def _flow(links, coef, size=100.0, **kw):
    return Flow(size, np.array(links, np.int64), np.array(coef, float), **kw)


def _counting(monkeypatch) -> list:
    """The flows LinkClasses.refine is called with, from now on."""
    seen: list = []
    refine = LinkClasses.refine

    def counted(self, flow):
        seen.append(flow)
        refine(self, flow)

    monkeypatch.setattr(LinkClasses, "refine", counted)
    return seen


def test_a_bundle_split_again_gives_its_instances_on_the_same_arrays():
    split = Splitter()
    one = bundle_flows([_flow([0, 1], [1.0, 2.0]),
                        _flow([2, 3], [1.0, 2.0], wire_coef=np.array([1.0, 1.0]))])
    one.start_s = 0.5
    first, again = split(one), split(one.fresh())
    plain = instances(one)
    for a, b, p in zip(first, again, plain):
        assert a is not b and a.parts is None and b.parts is None
        assert a.links is b.links and a.coef is b.coef and a.wire_coef is b.wire_coef
        assert a.links.tolist() == p.links.tolist() and a.coef.tolist() == p.coef.tolist()
        assert a.wire_coef.tolist() == p.wire_coef.tolist()
    assert [f.start_s for f in first] == [0.5, 0.5]
    lone = _flow([4], [1.0])
    assert split(lone) == [lone]


def test_a_recurring_split_bundle_refines_the_classes_once_per_instance(monkeypatch):
    refined = _counting(monkeypatch)
    env = Environment()
    fabric = FlowFabric(env, np.full(3, 10.0))
    bundle = bundle_flows([_flow([0], [1.0]), _flow([1], [1.0])])
    other = _flow([1], [1.0])       # shares link 1 with the second instance: a split

    def rounds():
        for _ in range(5):
            a, b = fabric.transfer(bundle.fresh()), fabric.transfer(other.fresh())
            yield a & b

    env.process(rounds())
    env.run()
    assert fabric.splits == 5
    # the bundle, the other flow and the two instances: four, once each
    assert len(refined) == 4


def test_many_distinct_flows_returning_are_each_refined_once(monkeypatch):
    n = 5000                        # more than the 4,096 kept before
    classes = LinkClasses(np.full(n, 10.0))
    flows = [_flow([i], [1.0]) for i in range(n)]
    refined = _counting(monkeypatch)
    for _ in range(2):
        for f in flows:
            classes.restricted([f])
    assert len(refined) == n
