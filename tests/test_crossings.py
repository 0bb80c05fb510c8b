"""Edges between servers laid out by table (simulator/collectives/crossings.py,
ring_tables.py) against the server-by-server layout of blocks.py: the same entries in the
same order, for rings and for double binary trees."""

import numpy as np
import pytest

from simulator.cluster import Cluster
from simulator.collectives import ring_tables
from simulator.collectives.blocks import named_orders, ring_blocks, tree_blocks
from simulator.collectives.layouts import dtree_parent, make_communicator, server_orders
from simulator.topology import leaf_spine, rail_optimized

DGX = {"type": "dgx_a100", "gpu": "A100-SXM4-80GB", "nics": 8, "nic": "ib-hdr"}
PCIE = {"type": "pcie", "gpu": "A100-PCIE-40GB", "gpus": 4, "nics": 2, "nic": "roce-100",
        "gpus_per_pcie_switch": 2}


def unequal_paths():
    # leaf 0 -> leaf 1 costs 4 links' worth through spine 0, directly or by way of leaf 2
    G = leaf_spine(6, PCIE, nodes_per_leaf=2, spines=2)
    G.edges["spine.0", "leaf.g1"]["bw_bytes_per_s"] /= 3
    G.edges["leaf.g0", "spine.1"]["bw_bytes_per_s"] /= 10
    return G


CASES = [
    (lambda: rail_optimized(9, DGX, nodes_per_leaf=4, spines=4), None),       # 8 channels
    (lambda: rail_optimized(9, DGX, nodes_per_leaf=4, spines=4), [3 + 8 * s for s in range(9)]),
    (lambda: rail_optimized(9, DGX, nodes_per_leaf=4, spines=4), [0, 1, 2, 9, 17, 40, 70]),
    (lambda: leaf_spine(5, PCIE, nodes_per_leaf=2, spines=2), None),
    (unequal_paths, None),
    (unequal_paths, [0, 4, 8, 12, 16, 20])]


def by_table_and_by_server(build, ranks, table, servers):
    G = build()
    fast, slow = Cluster(G), Cluster(G)
    for cluster in (fast, slow):
        comm = make_communicator(cluster, ranks or list(range(cluster.n_gpus)))
        per_server = server_orders(cluster, comm)
        if cluster is fast:
            got = table(cluster, per_server)
        else:
            want = servers(cluster, per_server)
    assert len(got) == len(want) == 3 and len(got[0]) > 0
    for x, y in zip(got, want):
        assert x.dtype == y.dtype and np.array_equal(x, y)


@pytest.mark.parametrize("build, ranks", CASES)
def test_rings_by_table_are_the_server_by_server_rings(build, ranks):
    by_table_and_by_server(build, ranks,
                           lambda c, p: ring_tables.ring_entries(c, p, 0.5),
                           lambda c, p: ring_blocks(c, p, 0.5).entries())


def channels(per_server):
    return max(len(nics) for _, _, (nics, _) in per_server)


@pytest.mark.parametrize("build, ranks", CASES)
def test_trees_by_table_are_the_server_by_server_trees(build, ranks):
    by_table_and_by_server(
        build, ranks, lambda c, p: ring_tables.tree_entries(c, p, 0.5, dtree_parent),
        lambda c, p: tree_blocks(c, named_orders(p, channels(p)), 0.5,
                                 dtree_parent).entries())


@pytest.mark.parametrize("server_by_server, by_table", [
    ("ring_blocks", lambda c, p: ring_tables.ring_entries(c, p, 1.0)),
    ("tree_blocks", lambda c, p: ring_tables.tree_entries(c, p, 1.0, dtree_parent))])
def test_a_server_without_its_nics_switch_falls_back_to_server_by_server(
        monkeypatch, server_by_server, by_table):
    G = rail_optimized(5, DGX, nodes_per_leaf=2, spines=2)
    G.remove_edge("n4.nic3", "leaf.r3.g2")
    cluster = Cluster(G)
    per_server = server_orders(cluster, make_communicator(cluster, [3 + 8 * s for s in range(5)]))
    calls = []
    original = getattr(ring_tables, server_by_server)
    monkeypatch.setattr(ring_tables, server_by_server,
                        lambda *a: calls.append(a) or original(*a))
    with pytest.raises(Exception, match="not attached"):
        by_table(cluster, per_server)
    assert len(calls) == 1


@pytest.mark.parametrize("build", [lambda: rail_optimized(9, DGX, nodes_per_leaf=4, spines=4),
                                   lambda: leaf_spine(5, PCIE, nodes_per_leaf=2, spines=2),
                                   unequal_paths])
def test_rings_laid_out_together_are_each_ring_laid_out_alone(build, monkeypatch):
    """rings_entries (many rings, one table per channel count and chunk) against
    ring_entries of each ring alone: the same entries, in the same order, bit for bit;
    pairs of servers (context parallelism), rings of several GPUs per server and of every
    server, several chunks."""
    monkeypatch.setattr(ring_tables, "_RINGS_PER_TABLE", 3)
    G = build()
    fast, slow = Cluster(G), Cluster(G)
    n, per = fast.n_gpus, fast.n_gpus // len(fast.gpus_by_server)
    groups = [[g, (g + per) % n] for g in range(n)]                   # two servers each
    groups += [[g, (g + 3 * per + 1) % n, (g + per) % n] for g in range(0, n, 3)]
    groups += [list(range(n)), list(range(0, n, per)), list(range(1, n, 2))]
    rings = {c: [server_orders(c, make_communicator(c, g)) for g in groups]
             for c in (fast, slow)}
    got = ring_tables.rings_entries(fast, rings[fast], 0.5)
    assert len({channels(p) for p in rings[fast]}) >= 1 and len(got) == len(groups)
    for mine, per_server in zip(got, rings[slow]):
        want = ring_tables.ring_entries(slow, per_server, 0.5)
        for x, y in zip(mine, want):
            assert x.dtype == y.dtype and np.array_equal(x, y)


def test_rings_laid_out_together_fall_back_to_each_ring_where_a_table_lacks_an_entry():
    G = rail_optimized(5, DGX, nodes_per_leaf=2, spines=2)
    G.remove_edge("n4.nic3", "leaf.r3.g2")
    cluster = Cluster(G)
    fine = [[0, 8], [1, 9]]
    rings = [server_orders(cluster, make_communicator(cluster, g)) for g in fine]
    want = [ring_tables.ring_entries(cluster, p, 1.0) for p in rings]
    got = ring_tables.rings_entries(cluster, rings, 1.0)
    assert all(np.array_equal(x, y) for g, w in zip(got, want) for x, y in zip(g, w))
    broken = rings + [server_orders(cluster, make_communicator(cluster, [3, 35]))]
    with pytest.raises(Exception, match="not attached"):
        ring_tables.rings_entries(cluster, broken, 1.0)
