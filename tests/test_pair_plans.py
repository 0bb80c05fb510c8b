"""Send/recv plans read off one planned pair per shape (simulator/collectives/pairs.py) are
the plans each pair gets on its own, field for field and bit for bit."""

import numpy as np
import pytest

from plan_helpers import assert_plans_equal
from simulator.cluster import Cluster
from simulator.collectives import pairs as pairs_module
from simulator.constants import load_constants
from simulator.collectives.model import CollectiveModel
from simulator.topology import leaf_spine, rail_optimized

DGX = {"type": "dgx_a100", "gpu": "A100-SXM4-80GB", "nics": 8, "nic": "ib-hdr"}
PCIE = {"type": "pcie", "gpu": "A100-PCIE-40GB", "gpus": 4, "nics": 2, "nic": "roce-100",
        "gpus_per_pcie_switch": 2}


def assert_same_plans(G, pairs, size, **cluster_kw):
    fast = CollectiveModel(Cluster(G, **cluster_kw), load_constants())
    slow = CollectiveModel(Cluster(G, **cluster_kw), load_constants())
    got = fast.plan_pairs(size, pairs)
    want = [slow.plan("send_recv", size, [a, b]) for a, b in pairs]
    assert_plans_equal(got, want)
    return fast


@pytest.mark.parametrize("size", [4096, 64 << 20])          # LL and Simple
def test_pipeline_sends_between_servers_are_the_pair_by_pair_plans(size, monkeypatch):
    G = rail_optimized(9, DGX, nodes_per_leaf=4, spines=4)
    # every GPU of servers 0-3 to the same GPU of the server 4 further (other leaves too),
    # a few to other GPUs, and pairs inside one server
    pairs = [(r, r + 32) for r in range(32)] + [(3, 70), (70, 3), (0, 1), (9, 15), (15, 9)]
    planned = []
    real = CollectiveModel.plan
    monkeypatch.setattr(CollectiveModel, "plan",
                        lambda self, *a, **k: planned.append(a) or real(self, *a, **k))
    assert_same_plans(G, pairs, size)
    # the fast model plans one pair per shape (GPU places, same server or not) in full; the
    # slow one every pair
    shapes = {(a % 8, b % 8, a // 8 == b // 8) for a, b in pairs}
    assert len(planned) - len(pairs) == len(shapes) < len(pairs)


def test_pcie_servers_keep_the_p2p_discount():
    G = leaf_spine(5, PCIE, nodes_per_leaf=2, spines=2)
    assert_same_plans(G, [(0, 1), (0, 2), (4, 6), (1, 3), (0, 4), (4, 8), (8, 12)], 1 << 20)


def test_a_faster_cable_changes_some_routes_and_still_gives_the_same_plans():
    G = rail_optimized(9, DGX, nodes_per_leaf=4, spines=4)
    G.edges["leaf.r0.g0", "spine.0"]["bw_bytes_per_s"] *= 4
    assert_same_plans(G, [(r, r + 40) for r in range(32)], 1 << 20)


def test_hash_ecmp_plans_pair_by_pair(monkeypatch):
    calls = []
    monkeypatch.setattr(pairs_module, "_routes", lambda *a: calls.append(a))
    G = rail_optimized(5, DGX, nodes_per_leaf=2, spines=2)
    assert_same_plans(G, [(0, 8), (1, 9)], 1 << 20, ecmp="hash")
    assert calls == []


def test_a_second_batch_of_the_same_shapes_plans_none_in_full(monkeypatch):
    G = rail_optimized(9, DGX, nodes_per_leaf=4, spines=4)
    fast = assert_same_plans(G, [(r, r + 32) for r in range(8)], 1 << 20)
    planned = []
    real = CollectiveModel.plan
    monkeypatch.setattr(CollectiveModel, "plan",
                        lambda self, *a, **k: planned.append(a) or real(self, *a, **k))
    again = fast.plan_pairs(1 << 20, [(r, r + 32) for r in range(8, 16)])
    assert planned == []
    slow = CollectiveModel(Cluster(G), load_constants())
    want = [real(slow, "send_recv", 1 << 20, [r, r + 32]) for r in range(8, 16)]
    assert [p.predicted_s for p in again] == [p.predicted_s for p in want]
    assert all(np.array_equal(p.links, w.links) for p, w in zip(again, want))


def test_read_off_rates_are_the_bottleneck_rates_also_for_a_route_crossing_a_link_twice():
    from simulator.network.fabric import Flow, bottleneck_rate

    G = rail_optimized(5, DGX, nodes_per_leaf=2, spines=2)
    G.edges["n4.nic0", "leaf.r0.g2"]["bw_bytes_per_s"] /= 3
    model = CollectiveModel(Cluster(G), load_constants())
    plan = model.plan("send_recv", 1 << 20, [0, 24])
    links = plan.links                   # the NIC links once per spine path
    assert len(set(links.tolist())) < len(links)
    twice = links.copy()
    twice[1] = twice[0]                  # another pattern: summed one by one
    other = model.plan("send_recv", 1 << 20, [8, 32]).links      # a slower NIC link
    items = [(0, links, None), (1, twice, None), (2, other, None), (3, links[::-1], None)]
    want = [bottleneck_rate(Flow(plan.payload_bytes, x, plan.coef, plan.latency_s,
                                 plan.max_rate), model.cluster.capacity_bytes_per_s)
            for _, x, _ in items]
    got = pairs_module._rates(model.cluster, plan, [x for _, x, _ in items])
    assert pairs_module._rates(model.cluster, plan, np.stack([x for _, x, _ in items])) == want
    assert got == want and len(set(want)) > 1


def test_alike_rows_are_the_rows_whose_entries_pair_up_as_the_first_rows_do():
    rng = np.random.default_rng(7)
    for width in (1, 2, 5, 12):
        table = rng.integers(0, 6, size=(400, width))
        table[1] = table[0] + 10                     # the same pattern, other links
        _, first, where = np.unique(table[0], return_index=True, return_inverse=True)
        equal = table[:, :, None] == table[:, None, :]
        want = (equal == equal[0]).all(axis=(1, 2))
        got = pairs_module._alike_rows(table, first, where.ravel())
        assert got.tolist() == want.tolist() and want[1] and want.all() == (width == 1)


def test_plans_read_off_after_other_layouts_grew_the_servers_link_ids():
    # server link ids kept per server (blocks._link_ids) must follow the design's list as
    # later routes grow it: pairs of GPU 0, then a ring over GPU 3 of every server, then
    # pairs of other GPUs, all on one model
    G = rail_optimized(9, DGX, nodes_per_leaf=4, spines=4)
    fast = CollectiveModel(Cluster(G), load_constants())
    slow = CollectiveModel(Cluster(G), load_constants())
    first, later = [(0, 32), (8, 40)], [(r, r + 33) for r in range(1, 8)] + [(9, 14)]
    ring = [3 + 8 * s for s in range(9)]
    got = fast.plan_pairs(1 << 20, first) + [fast.plan("all_reduce", 1 << 20, ring)] + \
        fast.plan_pairs(1 << 20, later)
    want = [slow.plan("send_recv", 1 << 20, [a, b]) for a, b in first] + \
        [slow.plan("all_reduce", 1 << 20, ring)] + \
        [slow.plan("send_recv", 1 << 20, [a, b]) for a, b in later]
    assert_plans_equal(got, want)


def test_a_placed_plan_is_dataclasses_replace_of_its_links_time_and_wire():
    from dataclasses import fields, replace

    from simulator.collectives.plan import Plan
    G = rail_optimized(3, DGX, nodes_per_leaf=2, spines=2)
    plan = CollectiveModel(Cluster(G), load_constants()).plan("send_recv", 4096, [0, 8])
    links, wire = plan.links + 1, np.ones(len(plan.links))
    got = plan.placed(links, 1.5, wire)
    want = replace(plan, links=links, predicted_s=1.5, wire_coef=wire)
    assert type(got) is Plan and got.links is links and got.predicted_s == 1.5
    assert got.wire_coef is wire and plan.predicted_s != 1.5      # the original unchanged
    assert_plans_equal([got], [want])
    assert [f.name for f in fields(got)] == [f.name for f in fields(want)]


def test_a_plans_flow_carries_its_payload_links_latency_cap_label_and_wire():
    import numpy as np

    from simulator.collectives.plan import Plan
    links, coef, wire = np.array([3, 4]), np.array([1.0, 0.5]), np.array([2.0, 1.0])
    plan = Plan("all_gather", "ring", "simple", 8, 2, 1024, 2e-6, 896.0, links, coef, 5e9,
                1e-3, wire)
    f = plan.flow()
    assert (f.size_bytes, f.latency_s, f.max_rate, f.label) == (896.0, 2e-6, 5e9,
                                                                "all_gather/ring/simple")
    assert f.links is links and f.coef is coef and f.wire_coef is wire and f.parts is None


def test_pairs_are_laid_out_by_table_not_pair_by_pair(monkeypatch):
    monkeypatch.setattr(pairs_module, "_pair_by_pair", lambda *a: pytest.fail("per pair"))
    G = rail_optimized(9, DGX, nodes_per_leaf=4, spines=4)
    assert_same_plans(G, [(r, r + 32) for r in range(32)] + [(0, 1), (70, 3)], 1 << 20)


def test_switch_paths_of_unequal_lengths_take_each_pairs_route():
    G = leaf_spine(6, PCIE, nodes_per_leaf=2, spines=2)
    # leaf 0 -> leaf 1 costs 4 links' worth through spine 0, directly or by way of leaf 2
    G.edges["spine.0", "leaf.g1"]["bw_bytes_per_s"] /= 3
    G.edges["leaf.g0", "spine.1"]["bw_bytes_per_s"] /= 10
    assert {len(p) for p in Cluster(G).routes.switch_paths("leaf.g0", "leaf.g1")} == {3, 5}
    assert_same_plans(G, [(0, 8), (1, 9), (2, 10), (0, 4), (9, 1), (4, 12)], 1 << 20)


def test_a_nic_without_its_switch_is_reported_as_pair_by_pair():
    from simulator.errors import TopologyError

    G = rail_optimized(5, DGX, nodes_per_leaf=2, spines=2)
    G.remove_edge("n4.nic0", "leaf.r0.g2")
    model = CollectiveModel(Cluster(G), load_constants())
    assert len(model.plan_pairs(1 << 20, [(1, 9), (9, 17)])) == 2     # server 4 unused
    with pytest.raises(TopologyError, match="not attached"):
        model.plan_pairs(1 << 20, [(0, 32)])
