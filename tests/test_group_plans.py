"""Collective plans of groups inside one server read off one planned group per shape
(simulator/collectives/groups.py) are the plans each group gets on its own, field for field
and bit for bit; where they cannot be (a degraded link in one server, groups across
servers, hash ECMP) the group is planned on its own."""

import numpy as np
import pytest

from plan_helpers import assert_plans_equal
from simulator.cluster import Cluster
from simulator.collectives import groups as groups_module
from simulator.constants import load_constants
from simulator.collectives.model import CollectiveModel
from simulator.topology import leaf_spine, rail_optimized

DGX = {"type": "dgx_a100", "gpu": "A100-SXM4-80GB", "nics": 8, "nic": "ib-hdr"}
H100 = {"type": "dgx_a100", "gpu": "H100-SXM", "nics": 8, "nic": "ib-ndr"}
PCIE = {"type": "pcie", "gpu": "A100-PCIE-40GB", "gpus": 4, "nics": 2, "nic": "roce-100",
        "gpus_per_pcie_switch": 2}


def assert_same_plans(G, op, size, groups, how=("auto", "auto", 0), **cluster_kw):
    """The fast model's plans against each group's own ``plan`` (a fresh model); returns
    how many groups the fast model planned in full."""
    fast = CollectiveModel(Cluster(G, **cluster_kw), load_constants())
    slow = CollectiveModel(Cluster(G, **cluster_kw), load_constants())
    planned = []
    real = fast.plan
    fast.plan = lambda *a, **k: planned.append(a) or real(*a, **k)
    got = fast.plan_groups(op, size, groups, *how)
    want = [slow.plan(op, size, list(g), *how) for g in groups]
    assert_plans_equal(got, want)
    return len(planned)


def _servers(n_servers, gpus=8, members=range(8)):
    return [tuple(s * gpus + i for i in members) for s in range(n_servers)]


@pytest.mark.parametrize("op,size", [("all_reduce", 4096), ("all_reduce", 64 << 20),
                                     ("all_gather", 1 << 20), ("reduce_scatter", 256 << 20)])
def test_tensor_parallel_groups_are_the_group_by_group_plans(op, size):
    G = rail_optimized(6, DGX, nodes_per_leaf=4, spines=4)
    # one planned in full per shape: whole servers, then halves (two shapes: GPUs 0-3, 4-7)
    assert assert_same_plans(G, op, size, _servers(6)) == 1
    halves = _servers(6, members=range(4)) + [tuple(s * 8 + i for i in range(4, 8))
                                              for s in range(6)]
    assert assert_same_plans(G, op, size, halves) == 2


def test_nvls_and_pinned_choices_on_h100_servers():
    G = rail_optimized(4, H100, nodes_per_leaf=2, spines=2)
    assert assert_same_plans(G, "all_reduce", 64 << 20, _servers(4)) == 1
    assert assert_same_plans(G, "all_gather", 1 << 20, _servers(4), ("ring", "LL128", 0)) == 1
    assert assert_same_plans(G, "broadcast", 1 << 20, _servers(4), ("ring", "auto", 3)) == 1


def test_rank_order_is_part_of_the_shape():
    G = rail_optimized(4, DGX, nodes_per_leaf=2, spines=2)
    groups = [(0, 1, 2, 3), (8, 9, 10, 11), (19, 18, 17, 16), (27, 26, 25, 24)]
    assert assert_same_plans(G, "all_reduce", 1 << 20, groups) == 2


def test_pcie_servers_keep_the_p2p_discount():
    G = leaf_spine(5, PCIE, nodes_per_leaf=2, spines=2)
    assert assert_same_plans(G, "all_reduce", 1 << 20, _servers(5, gpus=4, members=range(4))) \
        == 1


def test_a_degraded_link_inside_one_server_plans_that_server_on_its_own():
    G = rail_optimized(4, DGX, nodes_per_leaf=2, spines=2)
    G.edges["n2.gpu3", "n2.nvswitch"]["bw_bytes_per_s"] /= 4
    # servers 0, 1 and 3 read off the first; server 2's group is planned on its own, and
    # its plan differs from the others' (a slower ring)
    assert assert_same_plans(G, "all_reduce", 64 << 20, _servers(4)) == 2
    model = CollectiveModel(Cluster(G), load_constants())
    plans = model.plan_groups("all_reduce", 64 << 20, _servers(4))
    assert plans[2].predicted_s > plans[0].predicted_s == plans[1].predicted_s


def test_groups_across_servers_read_off_by_ring_shape_and_hash_ecmp_plans_group_by_group():
    G = rail_optimized(4, DGX, nodes_per_leaf=2, spines=2)
    across = [tuple(s * 8 + i for s in range(4)) for i in range(8)]     # FSDP-like, ppn 1
    # each group on its own rail, the rails alike: one ring shape, one plan in full
    assert assert_same_plans(G, "all_gather", 1 << 20, across) == 1
    # an all_reduce has the tree to compare: every group planned on its own
    assert assert_same_plans(G, "all_reduce", 1 << 20, across) == 8
    assert assert_same_plans(G, "all_reduce", 1 << 20, across, ("ring", "auto", 0)) == 1
    assert assert_same_plans(G, "all_reduce", 1 << 20, _servers(4), ecmp="hash") == 4


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_reduce"])
def test_pairs_across_servers_have_their_rings_laid_out_together_and_the_same_plans(
        op, monkeypatch):
    # context-parallel-like groups: one GPU on each of two servers (rings laid out ahead,
    # all at once: CollectiveModel.lay_out_rings), some planned twice, some 3 servers wide
    from simulator.collectives import layouts, ring_tables
    together = []
    real = layouts.rings_entries
    monkeypatch.setattr(layouts, "rings_entries", lambda c, r, e: together.append(len(r))
                        or real(c, r, e))
    monkeypatch.setattr(ring_tables, "ring_entries", None)     # no ring laid out alone
    G = rail_optimized(6, DGX, nodes_per_leaf=2, spines=2)
    pairs = [(g, (g + 8) % 48) for g in range(48)] + [(5, 13), (2, 40, 17)]
    # three ring shapes: a pair under one leaf (servers 0-1, 2-3, 4-5), a pair across the
    # spines (1-2, 3-4, 5-0), the group of three; an all_reduce has the tree to compare
    # (planned pair by pair) unless the ring is pinned
    assert assert_same_plans(G, op, 3 << 20, pairs) == (len(pairs) if op == "all_reduce"
                                                        else 3)
    assert assert_same_plans(G, op, 3 << 20, pairs, ("ring", "LL128", 0)) == 3
    assert together == [49, 49]         # the distinct rings, each call's


def test_no_cluster_without_exact_blocks_reads_off(monkeypatch):
    # the guard itself: without exact server blocks nothing is read off
    monkeypatch.setattr(groups_module, "blocks_exact", lambda *a: False)
    G = rail_optimized(3, DGX, nodes_per_leaf=2, spines=2)
    assert assert_same_plans(G, "all_reduce", 1 << 20, _servers(3)) == 3


def test_a_second_call_with_the_same_shape_plans_none_in_full():
    G = rail_optimized(4, DGX, nodes_per_leaf=2, spines=2)
    model = CollectiveModel(Cluster(G), load_constants())
    model.plan_groups("all_reduce", 1 << 20, _servers(2))
    planned = []
    real = model.plan
    model.plan = lambda *a, **k: planned.append(a) or real(*a, **k)
    again = model.plan_groups("all_reduce", 1 << 20, [tuple(range(16, 24)),
                                                      tuple(range(24, 32))])
    assert planned == []
    slow = CollectiveModel(Cluster(G), load_constants())
    want = [slow.plan("all_reduce", 1 << 20, list(range(s, s + 8))) for s in (16, 24)]
    assert [p.predicted_s for p in again] == [p.predicted_s for p in want]
    assert all(np.array_equal(p.links, w.links) for p, w in zip(again, want))


class _OneByOne:
    """The collective model seen through ``plan`` only: every group planned on its own."""

    def __init__(self, model):
        self.model, self.cluster = model, model.cluster

    def plan(self, *a, **k):
        return self.model.plan(*a, **k)


def test_a_tensor_parallel_replay_is_the_group_by_group_replay_bit_for_bit():
    import dataclasses

    from replay_helpers import assert_same_replay, plan_setup, plan_trace
    from simulator.strategies.parallel import ParallelPlan
    from simulator.pipeline import run_setup

    setup = plan_setup(plan_trace(ParallelPlan(tp=8, pp=2, dp_shard=2, dp_mode="fsdp"), 32),
                       nodes=4)
    fast = run_setup(setup).timeline
    slow = run_setup(dataclasses.replace(
        setup, collectives=_OneByOne(setup.collectives))).timeline
    assert_same_replay(fast, slow)
    key = lambda r: (r.cls, r.op_id)       # noqa: E731
    assert sorted(fast.records, key=key) == sorted(slow.records, key=key)   # every field


def test_servers_of_another_design_plan_their_own_groups():
    # a cluster of two designs (8 NICs, then 2 NICs per server): one full plan per design
    from simulator.topology import dgx_a100_node
    G = dgx_a100_node(None, 0, nics=8)
    for server, nics in ((1, 2), (2, 8), (3, 2)):
        dgx_a100_node(G, server, nics=nics)
    assert assert_same_plans(G, "all_reduce", 64 << 20, _servers(4)) == 2
    assert assert_same_plans(G, "all_gather", 1 << 20, _servers(4, members=(0, 2, 4, 6))) == 2


def test_capacities_set_anew_on_the_cluster_plan_the_groups_again():
    G = rail_optimized(3, DGX, nodes_per_leaf=2, spines=2)
    model = CollectiveModel(Cluster(G), load_constants())
    before = model.plan_groups("all_reduce", 64 << 20, _servers(1))[0]
    model.cluster.capacity_bytes_per_s = model.cluster.capacity_bytes_per_s / 2
    after = model.plan_groups("all_reduce", 64 << 20, _servers(3))
    assert after[1].predicted_s == after[2].predicted_s > before.predicted_s


def test_a_server_lacking_an_internal_link_plans_its_group_on_its_own():
    G = rail_optimized(4, DGX, nodes_per_leaf=2, spines=2)
    G.remove_edge("n1.gpu5", "n1.nvswitch")
    # servers 0, 2 and 3 read off the first; server 1 lacks a link of the design
    assert assert_same_plans(G, "all_gather", 1 << 20, _servers(4, members=range(4))) == 2


def test_groups_of_mixed_sizes_and_orders_are_their_own_plans():
    G = rail_optimized(4, DGX, nodes_per_leaf=2, spines=2)
    groups = [(0, 1, 2, 3), (8, 9), (17, 16, 18, 19), (24, 25, 26, 27), (10, 11),
              (4, 12)]                                           # the last across servers
    assert assert_same_plans(G, "all_reduce", 1 << 20, groups) == 5     # 4 shapes
    even = [(0, 1), (9, 8), (16, 17), (3, 11), (25, 24)]          # one size, one across
    assert assert_same_plans(G, "all_reduce", 1 << 20, even) == 3


@pytest.mark.parametrize("radix, width", [(1, 3), (3, 9), (23, 9), (1 << 20, 4)])
def test_unique_rows_are_numpys_unique_rows(radix, width):
    # the last case does not fit an int64 as one number: numpy's own unique of rows
    rows = np.random.default_rng(3).integers(0, min(radix, 3), size=(500, width))
    rows[:, 0] = radix - 1
    found, inverse = groups_module._unique_rows(rows, radix)
    want, want_inverse = np.unique(rows, axis=0, return_inverse=True)
    assert np.array_equal(found, want) and np.array_equal(inverse, want_inverse.ravel())


def _context_parallel(n_servers, gpus=8, stride=8):
    """One GPU on each of two servers, as Megatron's context-parallel pairs (TP innermost):
    rank ``r`` with ``r + stride``, both on the same local GPU."""
    return [(s * gpus + i, s * gpus + i + stride) for s in range(0, n_servers, 2)
            for i in range(gpus)]


FABRICS = {
    "rail-optimized": lambda: rail_optimized(8, H100, nodes_per_leaf=4, spines=2),
    "leaf-spine": lambda: leaf_spine(8, DGX, nodes_per_leaf=2, spines=2),
    "leaf-spine, 2:1 oversubscribed": lambda: leaf_spine(8, DGX, nodes_per_leaf=2, spines=2,
                                                          oversubscription=2.0),
    "leaf-spine, PCIe servers": lambda: leaf_spine(8, PCIE, nodes_per_leaf=2, spines=2),
}


@pytest.mark.parametrize("fabric", list(FABRICS))
@pytest.mark.parametrize("op,how", [("all_gather", ("auto", "auto", 0)),
                                    ("reduce_scatter", ("auto", "auto", 0)),
                                    ("all_reduce", ("ring", "auto", 0)),
                                    ("all_gather", ("ring", "Simple", 0))])
def test_groups_across_servers_read_off_their_ring_shape_are_their_own_plans(fabric, op,
                                                                              how):
    # a reused plan equals a freshly made one, field for field, bit for bit, on groups of
    # several shapes: context-parallel pairs, pairs across the spines, two GPUs on each
    # of two servers, an uneven group (two GPUs on one server, one on the other), a pair
    # in the other order
    G = FABRICS[fabric]()
    gpus = 4 if "PCIe" in fabric else 8
    groups = (_context_parallel(8, gpus, gpus) + [(gpus + i, 2 * gpus + i) for i in range(gpus)]
              + [(0, 1, gpus, gpus + 1), (2 * gpus, 2 * gpus + 1, 3 * gpus),
                 (5 * gpus + 1, 4 * gpus + 1)])
    planned = assert_same_plans(G, op, 5 << 20, groups, how)
    assert planned < len(groups)


def test_a_degraded_link_between_servers_plans_its_groups_on_their_own():
    G = rail_optimized(4, DGX, nodes_per_leaf=4, spines=2)
    pairs = _context_parallel(4)                 # 16 pairs, one shape: one plan in full
    assert assert_same_plans(G, "all_gather", 64 << 20, pairs) == 1
    G.edges["n3.nic2", "leaf.r2.g0"]["bw_bytes_per_s"] /= 4
    # the pair on GPU 2 of servers 2 and 3 crosses the slower NIC link: a shape of its own
    assert assert_same_plans(G, "all_gather", 64 << 20, pairs) == 2
    model = CollectiveModel(Cluster(G), load_constants())
    plans = model.plan_groups("all_gather", 64 << 20, pairs)
    slow = pairs.index((18, 26))
    assert plans[slow].predicted_s > plans[0].predicted_s
    assert len({p.predicted_s for i, p in enumerate(plans) if i != slow}) == 1


def test_capacities_set_anew_plan_the_groups_across_servers_again():
    G = rail_optimized(4, DGX, nodes_per_leaf=2, spines=2)
    model = CollectiveModel(Cluster(G), load_constants())
    pairs = _context_parallel(4)
    before = model.plan_groups("all_gather", 64 << 20, pairs)
    model.cluster.capacity_bytes_per_s = model.cluster.capacity_bytes_per_s / 2
    after = model.plan_groups("all_gather", 64 << 20, pairs)
    fresh = CollectiveModel(Cluster(G), load_constants())
    fresh.cluster.capacity_bytes_per_s = fresh.cluster.capacity_bytes_per_s / 2
    assert_plans_equal(after, [fresh.plan("all_gather", 64 << 20, list(p)) for p in pairs])
    assert after[0].predicted_s > before[0].predicted_s
