"""Layouts built without one route per edge (all_to_all summed per link, rings and trees
server by server) against the edge-by-edge ones."""

import numpy as np
import pytest

from simulator.cluster import Cluster
from simulator.collectives import layouts
from simulator.constants import load_constants
from simulator.collectives.layouts import direct_edges, direct_pair_edges, make_communicator
from simulator.collectives.model import CollectiveModel
from simulator.topology import leaf_spine, rail_optimized

DGX = {"type": "dgx_a100", "gpu": "A100-SXM4-80GB", "nics": 8, "nic": "ib-hdr"}
PCIE = {"type": "pcie", "gpu": "A100-PCIE-40GB", "gpus": 4, "nics": 2, "nic": "roce-100",
        "gpus_per_pcie_switch": 2}


def dense(cluster, edges):
    links, coef = edges.arrays()
    return (np.bincount(links, coef, cluster.n_links),
            np.bincount(links, edges.wire_coef(), cluster.n_links))


def assert_same_layout(cluster, ranks, eff=1.0):
    comm = make_communicator(cluster, ranks)
    agg = dense(cluster, direct_edges(cluster, comm, None, eff))
    pairs = dense(cluster, direct_pair_edges(cluster, comm, None, eff))
    for a, p in zip(agg, pairs):
        assert np.array_equal(a > 0, p > 0)                    # the same links
        assert np.allclose(a, p, rtol=1e-12, atol=0.0)         # the same coefficients
    return agg


def test_rail_optimized_superpod_sums_like_every_pair_routed():
    c = Cluster(rail_optimized(9, DGX, nodes_per_leaf=4, spines=4))
    coef, wire = assert_same_layout(c, list(range(c.n_gpus)))
    # A NIC uplink carries its GPU's traffic to every GPU off the server: 8 x 9 - 8 = 64.
    assert coef[c.link_id[("n0.nic3", "leaf.r3.g0")]] == 64.0
    assert np.array_equal(coef, wire)                           # NVLink: no P2P discount


def test_a_partial_communicator_sums_like_every_pair_routed():
    c = Cluster(rail_optimized(9, DGX, nodes_per_leaf=4, spines=4))
    assert_same_layout(c, [0, 1, 2, 9, 17, 18, 40, 41, 42, 43, 70])


def test_pcie_servers_keep_the_p2p_discount_and_a_second_nic():
    c = Cluster(leaf_spine(5, PCIE, nodes_per_leaf=2, spines=2))
    coef, wire = assert_same_layout(c, list(range(c.n_gpus)), eff=0.5)
    assert (coef > wire).any()            # PCIe GPU pairs take 1 / 0.5 of their links


def test_switch_pairs_off_the_two_hop_rule_take_the_router_paths():
    G = rail_optimized(9, DGX, nodes_per_leaf=4, spines=4)
    # One faster leaf-spine cable: the cheapest link is now that one, so no leaf pair's
    # paths cost twice the cheapest link and every pair goes through the router's search.
    G.edges["leaf.r0.g0", "spine.0"]["bw_bytes_per_s"] *= 4
    c = Cluster(G)
    assert_same_layout(c, list(range(c.n_gpus)))


def test_no_route_per_gpu_pair_is_built():
    c = Cluster(rail_optimized(9, DGX, nodes_per_leaf=4, spines=4))
    comm = make_communicator(c, list(range(c.n_gpus)))
    direct_edges(c, comm)
    # one server of the design: 8 x 7 GPU pairs and 8 GPU-NIC routes each way
    assert c.routes.kept == 8 * 7 + 2 * 8


@pytest.mark.parametrize("what", ["hash", "latency"])
def test_hash_ecmp_and_latency_what_ifs_keep_one_route_per_pair(what):
    G = rail_optimized(3, DGX, nodes_per_leaf=2, spines=2)
    if what == "latency":
        G.edges["leaf.r0.g0", "spine.0"]["latency_s"] *= 10
    c = Cluster(G, ecmp="hash" if what == "hash" else "spread")
    comm = make_communicator(c, list(range(c.n_gpus)))
    a, b = direct_edges(c, comm), direct_pair_edges(c, comm)
    assert all(np.array_equal(x, y) for x, y in zip(a.arrays(), b.arrays()))
    assert a.step_extra_s() == b.step_extra_s()


def test_the_all_to_all_time_is_the_per_pair_time(monkeypatch):
    k = load_constants()
    G = rail_optimized(9, DGX, nodes_per_leaf=4, spines=4)
    summed = CollectiveModel(Cluster.from_graph(G, k), k).plan("all_to_all", 1 << 26,
                                                                list(range(72)))
    monkeypatch.setattr(layouts, "aggregable", lambda cluster: False)
    routed = CollectiveModel(Cluster.from_graph(G, k), k).plan("all_to_all", 1 << 26,
                                                                list(range(72)))
    assert summed.predicted_s == pytest.approx(routed.predicted_s, rel=1e-12)
    assert summed.latency_s == routed.latency_s


@pytest.mark.parametrize("fn", [layouts.ring_edges, layouts.tree_edges])
@pytest.mark.parametrize("build, ranks", [
    (lambda: rail_optimized(9, DGX, nodes_per_leaf=4, spines=4), None),
    (lambda: rail_optimized(9, DGX, nodes_per_leaf=4, spines=4), [0, 1, 2, 9, 17, 40, 70]),
    (lambda: leaf_spine(5, PCIE, nodes_per_leaf=2, spines=2), None)])
def test_rings_and_trees_laid_out_by_server_match_edge_by_edge(monkeypatch, fn, build, ranks):
    G = build()
    fast = Cluster(G)
    comm = make_communicator(fast, ranks or list(range(fast.n_gpus)))
    a = fn(fast, comm, pcie_p2p_efficiency=0.5)
    monkeypatch.setattr(layouts, "aggregable", lambda cluster: False)
    slow = Cluster(G)
    b = fn(slow, comm, pcie_p2p_efficiency=0.5)
    for x, y in zip((*a.arrays(), a.wire_coef()), (*b.arrays(), b.wire_coef())):
        assert np.array_equal(x, y)                   # same entries, same order
    # a server of one design is routed once: the routes cached are those of one server
    # plus the NIC-to-NIC ones, far fewer than the edges
    assert fast.routes.kept < slow.routes.kept


def test_spread_fabric_routes_are_the_path_by_path_ones():
    G = rail_optimized(9, DGX, nodes_per_leaf=4, spines=4)
    G.edges["leaf.r1.g0", "spine.2"]["latency_s"] *= 3      # a what-if on one path
    fast, slow = Cluster(G), Cluster(G)
    for a, b in [("n0.nic1", "n5.nic1"), ("n0.nic1", "n1.nic1"), ("n8.nic1", "n0.nic1"),
                 ("leaf.r1.g0", "n6.nic1")]:
        r = fast.route(a, b)
        sw_a = a if a.startswith("leaf") else slow.routes.attached_switch(a)
        sw_b = slow.routes.attached_switch(b)
        core = slow.routes.switch_paths(sw_a, sw_b)
        head = [a] if a != sw_a else []
        o = slow.routes.paths_route([head + p + [b] for p in core], a, b, 0)
        assert np.array_equal(r.links, o.links) and np.array_equal(r.coef, o.coef)
        assert (r.latency_s, r.extra_latency_s) == (o.latency_s, o.extra_latency_s)


def test_communicator_groups_ranks_by_server_in_their_given_order():
    c = Cluster(rail_optimized(9, DGX, nodes_per_leaf=4, spines=4))
    ranks = [70, 3, 9, 0, 71, 8, 40, 2]
    by_server: dict = {}
    for r in ranks:                     # the rule, rank by rank
        by_server.setdefault(int(c.server_of_rank[r]), []).append(c.gpus[r])
    want = tuple(tuple(by_server[s]) for s in sorted(by_server))
    assert make_communicator(c, ranks).groups == want
    assert make_communicator(c, []).groups == ()


def test_an_edge_set_joins_its_parts_once_and_its_plans_share_them():
    cluster = Cluster(rail_optimized(3, DGX, nodes_per_leaf=2, spines=2))
    comm = make_communicator(cluster, list(range(cluster.n_gpus)))
    es = layouts.tree_edges(cluster, comm)
    links, coef = es.arrays()
    assert es.arrays()[0] is links and es.wire_coef() is es.wire_coef()
    assert not links.flags.writeable and not coef.flags.writeable
    unique, where = es.link_index()
    want_unique, want_where = np.unique(links, return_inverse=True)
    assert np.array_equal(unique, want_unique) and np.array_equal(where, want_where)
    # a part added after the join is joined in, and the index worked out anew
    es.links.append(links[:3])
    es.coefs.append(coef[:3])
    es.wires.append(coef[:3])
    assert np.array_equal(es.arrays()[0], np.concatenate([links, links[:3]]))
    assert len(es.link_index()[1]) == len(links) + 3
    # the model's plans of one edge set (each protocol) hold one copy of its link ids
    model = CollectiveModel(cluster, load_constants())
    plans = [model.plan("all_reduce", 2**30, list(range(cluster.n_gpus)), "tree", proto)
             for proto in ("LL", "LL128", "Simple")]
    assert plans[0].links is plans[1].links is plans[2].links
    assert plans[0].wire_coef is plans[2].wire_coef
