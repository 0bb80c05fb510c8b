"""Routing over the cluster graph: cheapest paths, ECMP, NIC ownership."""

import numpy as np
import pytest

from simulator.cluster import Cluster
from simulator.collectives.layouts import home_nic, owned_nics
from simulator.errors import TopologyError
from simulator.topology import dgx_a100_node, rail_optimized

DGX = {"type": "dgx_a100", "gpu": "A100-SXM4-80GB", "nics": 8, "nic": "ib-hdr"}


def classes(cluster, route):
    return [str(c) for c in cluster.link_class[route.links]]


def test_gpus_in_a_dgx_talk_over_nvswitch_not_pcie():
    c = Cluster(dgx_a100_node())
    r = c.route("n0.gpu0", "n0.gpu1")        # same PCIe switch, yet NVLink is cheaper
    assert classes(c, r) == ["nvlink", "nvlink"]
    assert r.coef.tolist() == [1.0, 1.0]


def test_gpu_reaches_its_nic_through_its_pcie_switch():
    c = Cluster(dgx_a100_node())
    assert classes(c, c.route("n0.gpu5", "n0.nic5")) == ["pcie", "pcie"]
    assert c.routes.nearest_nics("n0.gpu5") == ["n0.nic4", "n0.nic5"]
    assert owned_nics(c, "n0.gpu5") == ["n0.nic5"] and home_nic(c, "n0.gpu4") == "n0.nic4"


def test_same_rail_stays_on_its_leaf_and_other_groups_spread_over_spines():
    G = rail_optimized(4, DGX, nodes_per_leaf=2, spines=4)
    c = Cluster(G)
    same_leaf = c.route("n0.nic3", "n1.nic3")
    assert len(same_leaf.links) == 2                      # nic -> leaf -> nic
    across = c.route("n0.nic3", "n2.nic3")                # leaf group 0 -> group 1
    assert len(across.links) == 4 * 4                     # 4 equal paths of 4 hops
    assert np.allclose(across.coef, 0.25)
    load = np.bincount(across.links, weights=across.coef, minlength=c.n_links)
    assert load.sum() == pytest.approx(4.0)               # one unit of payload per hop


def test_hash_ecmp_pins_one_path_deterministically():
    G = rail_optimized(4, DGX, nodes_per_leaf=2, spines=4)
    a = Cluster(G, ecmp="hash", seed=1)
    b = Cluster(G, ecmp="hash", seed=1)
    ra, rb = a.route("n0.nic3", "n2.nic3", label=7), b.route("n0.nic3", "n2.nic3", label=7)
    assert len(ra.links) == 4 and ra.links.tolist() == rb.links.tolist()
    picked = {tuple(a.route("n0.nic3", "n2.nic3", label=k).links) for k in range(32)}
    assert 1 < len(picked) <= 4                            # labels spread over the spines


def test_disconnected_pair_is_a_topology_error():
    G = dgx_a100_node()
    G.add_node("leaf.orphan", kind="switch", tier="leaf")
    c = Cluster(G)
    with pytest.raises(TopologyError, match="disconnected"):
        c.route("n0.gpu0", "leaf.orphan")


def test_efficiency_scales_capacity_by_link_type_then_class():
    c = Cluster(dgx_a100_node(), link_efficiency={"nvlink": 0.5, "pcie-gen4-x16": 0.25})
    nv = c.link_class == "nvlink"
    assert np.allclose(c.capacity_bytes_per_s[nv], 0.5 * c.nominal_bytes_per_s[nv])
    pcie = c.link_type == "pcie-gen4-x16"
    assert np.allclose(c.capacity_bytes_per_s[pcie], 0.25 * c.nominal_bytes_per_s[pcie])


@pytest.mark.parametrize("topo,nodes", [("dgx-a100-superpod", 2), ("hgx-a100-pcie", None),
                                        ("aws-p4d", 2)])
def test_fast_local_routes_equal_the_general_path_routes(topo, nodes):
    from simulator.constants import load_constants
    from simulator.topology.loader import load_topology, resolve_topology
    G = load_topology(resolve_topology(topo), nodes=nodes)
    c = Cluster.from_graph(G, load_constants())
    ends = [n for n, d in G.nodes(data=True) if d.get("kind") in ("gpu", "nic")]
    pairs = [(a, b) for a in ends for b in ends
             if a != b and G.nodes[a]["server"] == G.nodes[b]["server"]]
    assert pairs
    for a, b in pairs:
        fast = c.route(a, b)
        general = c.routes.paths_route(c.routes.local_paths(a, b), a, b, 0)
        assert np.array_equal(fast.links, general.links)
        assert np.array_equal(fast.coef, general.coef)
        assert fast.latency_s == general.latency_s


def test_nics_of_a_server_are_those_of_nics_by_server():
    G = rail_optimized(3, DGX, nodes_per_leaf=2, spines=2)
    G.add_node("n9.nic0", kind="nic", server=9, index=0)        # a server of NICs only
    G.add_edge("n9.nic0", "leaf.r0.g0", bw_bytes_per_s=1e9, latency_s=0.0)
    lazy, whole = Cluster(G), Cluster(G)
    for server in [2, 0, 9, 1, 5]:
        assert lazy.nics_of_server(server) == whole.nics_by_server.get(server, [])
        assert whole.nics_of_server(server) == whole.nics_by_server.get(server, [])
    assert "nics_by_server" not in lazy.__dict__


def test_a_communicator_counts_its_ranks_once_and_compares_by_its_groups():
    from simulator.collectives.layouts import Communicator

    a, b = Communicator((("x", "y"), ("z",))), Communicator((("x", "y"), ("z",)))
    assert (a.n_ranks, a.ppn, a.n_nodes) == (3, 2, 2)
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1


def test_link_type_groups_are_the_sorted_types_and_each_links_position():
    G = rail_optimized(4, DGX, nodes_per_leaf=2, spines=4)
    G.add_edge("n0.gpu0", "n0.gpu1", bw_bytes_per_s=1e9, latency_s=0.0, link_class="nvlink")
    c = Cluster(G)       # the added edge has no link_type: its group is ""
    names, group = c.link_type_groups()
    types = c.link_type.tolist()
    assert names == sorted(set(types)) and "" in names and len(names) >= 4
    assert group.dtype == np.int64 and [names[g] for g in group] == types


def test_link_class_and_type_are_each_edges_own_strings_both_ways():
    """The per-link strings, made from the distinct (type, class) pairs, are what one
    string per edge, repeated for both directions, makes: values and width; and the catalog
    latency follows the type (an edge without one keeps its own latency)."""
    from simulator.cluster import _edges
    from simulator.hardware import link_names, link_spec

    G = rail_optimized(4, DGX, nodes_per_leaf=2, spines=4)
    G.add_edge("n0.gpu0", "n0.gpu1", bw_bytes_per_s=1e9, latency_s=3e-6)    # neither
    c = Cluster(G)
    edges = [d for _, _, d in _edges(G)]
    for name, default, got in (("link_class", "net", c.link_class),
                               ("link_type", "", c.link_type)):
        want = np.repeat(np.array([d.get(name, default) for d in edges]), 2)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
    known = set(link_names())
    want = [link_spec(d["link_type"]).latency_s if d.get("link_type") in known
            else d["latency_s"] for d in edges for _ in (0, 1)]
    assert c.catalog_latency_s.tolist() == want
    assert "net" in c.link_class.tolist() and "" in c.link_type.tolist()
