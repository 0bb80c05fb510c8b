"""The cluster's index (servers, link ends), its routes (simulator/routes.py) and its memo
(simulator/memo.py) on a two-server graph small enough to know every answer by hand."""

import zlib

import networkx as nx
import numpy as np
import pytest

from simulator.cluster import Cluster
from simulator.errors import TopologyError
from simulator.memo import Memo


def _link(G, u, v, bw, cls, latency=1e-6):
    G.add_edge(u, v, bw_bytes_per_s=bw, latency_s=latency, link_class=cls)


def tiny() -> nx.Graph:
    """Two servers of design ``t``: GPUs 0 and 1 on an NVSwitch and on a PCIe switch with
    NIC 0; each NIC on its own leaf, the leaves joined by two spines."""
    G = nx.Graph(name="tiny")
    for s in (0, 1):
        p, own = f"n{s}.", {"server": s, "template": "t"}
        for i in (0, 1):
            G.add_node(f"{p}gpu{i}", kind="gpu", local=f"gpu{i}", index=i, rank=2 * s + i,
                       **own)
        G.add_node(f"{p}nvswitch", kind="nvswitch", local="nvswitch", **own)
        G.add_node(f"{p}pcie0", kind="pcie_switch", local="pcie0", index=0, **own)
        G.add_node(f"{p}nic0", kind="nic", local="nic0", index=0, **own)
        for i in (0, 1):
            _link(G, f"{p}gpu{i}", f"{p}nvswitch", 300e9, "nvlink")
            _link(G, f"{p}gpu{i}", f"{p}pcie0", 25e9, "pcie", 2e-6)
        _link(G, f"{p}pcie0", f"{p}nic0", 25e9, "pcie", 2e-6)
    for n in ("leaf.a", "leaf.b", "spine.0", "spine.1"):
        G.add_node(n, kind="switch", tier=n.split(".")[0])
    _link(G, "n0.nic0", "leaf.a", 1e9, "net")
    _link(G, "n1.nic0", "leaf.b", 1e9, "net")
    for spine in ("spine.0", "spine.1"):
        _link(G, "leaf.a", spine, 1e9, "net", 3e-6)
        _link(G, spine, "leaf.b", 1e9, "net", 3e-6)
    return G


def ids(cluster, path):
    return [cluster.link_id[(a, b)] for a, b in zip(path, path[1:])]


# ------------------------------------------------------------------------ the memo
def test_the_memo_makes_each_value_once_and_keeps_it():
    memo, made = Memo(), []

    def make(value):
        made.append(value)
        return value

    assert memo.get(("a", 1), lambda: make([1])) == [1]
    assert memo.get(("a", 1), lambda: make([2])) == [1]         # kept, not made again
    assert memo.get(("b", 1), lambda: make(None)) is None
    assert memo.get(("b", 1), lambda: make("again")) is None    # None is kept too
    assert made == [[1], None]


def test_the_memo_keeps_nothing_when_making_fails():
    memo = Memo()

    def fail():
        raise ValueError("no")

    with pytest.raises(ValueError):
        memo.get("k", fail)
    assert memo.get("k", lambda: 3) == 3
    with pytest.raises(TypeError):
        memo.get(["unhashable"], lambda: 0)


def test_each_cluster_has_a_memo_of_its_own():
    a, b = Cluster(tiny()), Cluster(tiny())
    a.memo.get("x", dict)["k"] = 1
    assert b.memo.get("x", dict) == {} and a.memo.get("x", dict) == {"k": 1}


# ------------------------------------------------------------------------ the index
def test_servers_list_their_nodes_and_gpus():
    c = Cluster(tiny())
    assert c.server_members(1) == ["n1.gpu0", "n1.gpu1", "n1.nvswitch", "n1.pcie0", "n1.nic0"]
    assert c.gpus_by_server == {0: ["n0.gpu0", "n0.gpu1"], 1: ["n1.gpu0", "n1.gpu1"]}
    assert c.gpus_of_server(1) == ["n1.gpu0", "n1.gpu1"]
    with pytest.raises(KeyError):
        c.server_members(2)


def test_link_ends_are_the_ends_of_each_link_id():
    c = Cluster(tiny())
    assert len(c.link_ends) == c.n_links == 2 * c.G.number_of_edges()
    assert c.link_ends[:2] == [("n0.gpu0", "n0.nvswitch"), ("n0.nvswitch", "n0.gpu0")]
    assert all(c.link_id[ends] == i for i, ends in enumerate(c.link_ends))


# ------------------------------------------------------------------ between servers
def test_a_nic_s_switch_is_its_switch_neighbour():
    G = tiny()
    G.add_node("n1.nic1", kind="nic", local="nic1", index=1, server=1, template="t")
    _link(G, "n1.pcie0", "n1.nic1", 25e9, "pcie")
    routes = Cluster(G).routes
    assert routes.attached_switch("n0.nic0") == "leaf.a"
    assert routes.attached_switch("n1.nic0") == "leaf.b"
    with pytest.raises(TopologyError, match="not attached"):
        routes.attached_switch("n1.nic1")
    with pytest.raises(TopologyError, match="not in the topology"):
        routes.attached_switch("n7.nic0")


def test_switch_paths_are_the_equal_cost_ones_in_adjacency_order():
    G = tiny()
    G.add_node("leaf.z", kind="switch", tier="leaf")            # cabled to nothing
    routes = Cluster(G).routes
    assert routes.switch_paths("leaf.a", "leaf.b") == [["leaf.a", "spine.0", "leaf.b"],
                                                       ["leaf.a", "spine.1", "leaf.b"]]
    assert routes.switch_paths("leaf.a", "leaf.a") == [["leaf.a"]]
    with pytest.raises(TopologyError, match="disconnected"):
        routes.switch_paths("leaf.a", "leaf.z")


def test_the_switch_graph_keeps_the_switches_and_their_links_in_graph_order():
    routes = Cluster(tiny()).routes
    H = routes.switch_graph
    assert list(H.nodes) == ["leaf.a", "leaf.b", "spine.0", "spine.1"]
    assert list(H.adj["leaf.a"]) == ["spine.0", "spine.1"]       # its NIC is not a switch
    assert H.number_of_edges() == 4
    assert routes.switch_router.paths("leaf.b", "leaf.a", 64) == \
        [["leaf.b", "spine.0", "leaf.a"], ["leaf.b", "spine.1", "leaf.a"]]


def test_core_link_ids_are_one_row_per_equal_length_path():
    c = Cluster(tiny())
    core = c.routes.core_link_ids("leaf.a", "leaf.b")
    assert core.tolist() == [ids(c, ["leaf.a", "spine.0", "leaf.b"]),
                             ids(c, ["leaf.a", "spine.1", "leaf.b"])]
    assert c.routes.core_link_ids("leaf.a", "leaf.a").shape == (1, 0)


def test_core_link_ids_are_none_where_the_paths_differ_in_length():
    G = tiny()
    # leaf.a -> leaf.b through spine.0 (two links of cost 1e6) costs what a three-link
    # detour through two faster switches does (5e5 + 5e5 + 1e6)
    G.remove_edge("leaf.a", "spine.1")
    G.remove_edge("spine.1", "leaf.b")
    G.add_node("mid", kind="switch", tier="spine")
    _link(G, "leaf.a", "mid", 2e9, "net")
    _link(G, "mid", "spine.1", 2e9, "net")
    _link(G, "spine.1", "leaf.b", 1e9, "net")
    c = Cluster(G)
    assert sorted(map(len, c.routes.switch_paths("leaf.a", "leaf.b"))) == [3, 4]
    assert c.routes.core_link_ids("leaf.a", "leaf.b") is None
    # the NIC-to-NIC route takes both paths, half the bytes each
    route = c.route("n0.nic0", "n1.nic0")
    assert route.coef.tolist() == [0.5] * (4 + 5)


def test_a_fabric_route_spreads_over_the_spines():
    c = Cluster(tiny())
    route = c.route("n0.nic0", "n1.nic0")
    first = ["n0.nic0", "leaf.a", "spine.0", "leaf.b", "n1.nic0"]
    second = ["n0.nic0", "leaf.a", "spine.1", "leaf.b", "n1.nic0"]
    assert route.links.tolist() == ids(c, first) + ids(c, second)
    assert route.coef.tolist() == [0.5] * 8
    assert route.latency_s == pytest.approx(1e-6 + 3e-6 + 3e-6 + 1e-6)
    assert route.extra_latency_s == 0.0


# -------------------------------------------------------------------- in a server
def test_local_paths_are_found_once_per_design_and_named_per_server():
    routes = Cluster(tiny()).routes
    assert routes.local_paths("n0.gpu0", "n0.gpu1") == [["n0.gpu0", "n0.nvswitch", "n0.gpu1"]]
    assert routes.local_paths("n1.gpu0", "n1.gpu1") == [["n1.gpu0", "n1.nvswitch", "n1.gpu1"]]
    assert routes.local_paths("n1.gpu1", "n1.nic0") == [["n1.gpu1", "n1.pcie0", "n1.nic0"]]


def test_a_design_s_links_are_listed_as_routes_use_them_and_read_per_server():
    c = Cluster(tiny())
    routes = c.routes
    with pytest.raises(IndexError):
        routes.local_link("t", 0)                   # no route yet
    r0 = c.route("n0.gpu0", "n0.gpu1")
    assert r0.links.tolist() == ids(c, ["n0.gpu0", "n0.nvswitch", "n0.gpu1"])
    assert [routes.local_link("t", k) for k in (0, 1)] == [("gpu0", "nvswitch"),
                                                         ("nvswitch", "gpu1")]
    assert routes.server_link_ids("n1.gpu1").tolist() == \
        ids(c, ["n1.gpu0", "n1.nvswitch", "n1.gpu1"])
    c.route("n1.gpu1", "n1.nic0")                   # two more links, at the list's end
    assert routes.local_link("t", 3) == ("pcie0", "nic0")
    assert routes.server_link_ids("n0.nic0", "t").tolist() == \
        ids(c, ["n0.gpu0", "n0.nvswitch", "n0.gpu1", "n0.pcie0", "n0.nic0"])
    with pytest.raises(IndexError):
        routes.local_link("t", 4)


def test_routes_are_kept_once_per_pair_and_label_under_hash_only():
    spread, hashed = Cluster(tiny()), Cluster(tiny(), ecmp="hash")
    for c in (spread, hashed):
        first = c.route("n0.gpu0", "n1.gpu0", label=1)
        assert c.route("n0.gpu0", "n1.gpu0", label=1) is first
        c.route("n0.gpu0", "n1.gpu0", label=2)
    assert spread.routes.kept == 1 and hashed.routes.kept == 2


def test_paths_route_splits_evenly_under_spread_ecmp():
    c = Cluster(tiny())
    paths = [["n0.nic0", "leaf.a", "spine.0", "leaf.b"], ["n0.nic0", "leaf.a", "spine.1",
                                                          "leaf.b"]]
    route = c.routes.paths_route(paths, "n0.nic0", "leaf.b", 0)
    assert route.links.tolist() == ids(c, paths[0]) + ids(c, paths[1])
    assert route.coef.tolist() == [0.5] * 6
    assert route.latency_s == pytest.approx(7e-6)
    with pytest.raises(KeyError):
        c.routes.paths_route([["n0.nic0", "leaf.b"]], "n0.nic0", "leaf.b", 0)


@pytest.mark.parametrize("qps", [1, 3])
def test_paths_route_pins_each_queue_pair_to_its_hashed_path(qps):
    c = Cluster(tiny(), ecmp="hash", seed=5)
    paths = [["leaf.a", "spine.0", "leaf.b"], ["leaf.a", "spine.1", "leaf.b"]]
    route = c.routes.paths_route(paths, "x", "y", 9, qps)
    picks = [zlib.crc32(b"x|y|9|5") % 2] + [zlib.crc32(f"x|y|9|5|qp{q}".encode()) % 2
                                            for q in range(1, qps)]
    want = np.zeros(c.n_links)
    for i in picks:
        np.add.at(want, ids(c, paths[i]), 1.0 / qps)
    got = np.zeros(c.n_links)
    np.add.at(got, route.links, route.coef)
    assert got == pytest.approx(want, abs=0)


# ------------------------------------------------------------------ NIC selection
def test_nearest_nics_are_the_cheapest_of_the_server_s_nics():
    G = tiny()
    G.add_node("n0.nic1", kind="nic", local="nic1", index=1, server=0, template="t")
    _link(G, "n0.nvswitch", "n0.nic1", 1e9, "pcie")          # one slow link away
    routes = Cluster(G).routes
    assert routes.nearest_nics("n0.gpu1") == ["n0.nic0"]
    G = tiny()
    G.remove_node("n1.nic0")
    with pytest.raises(TopologyError, match="no NIC"):
        Cluster(G).routes.nearest_nics("n1.gpu0")
