"""Topology generators: invariants of the graphs (counts, degrees, ranks, uplink sums)."""

import math
from collections import Counter

import networkx as nx
import numpy as np
import pytest

from simulator.errors import ConfigError, TopologyError
from simulator.hardware import link_spec
from simulator.topology import (GENERATORS, check_cluster, check_connected, dgx_a100_node,
                                leaf_spine, pcie_node, rail_optimized, single_switch)

DGX = {"type": "dgx_a100", "gpu": "A100-SXM4-80GB", "nics": 8, "nic": "ib-hdr"}
PCIE = {"type": "pcie", "gpus": 4, "nics": 2, "nic": "roce-100"}
FABRICS = [single_switch, leaf_spine, rail_optimized]
HDR = link_spec("ib-hdr").bw_bytes_per_s


def kinds(G):
    return Counter(kind for _, kind in G.nodes(data="kind"))


def neighbour_kinds(G, n):
    return sorted(G.nodes[m]["kind"] for m in G[n])


def nic_leaf(G, nic):
    return next(m for m in G[nic] if G.nodes[m]["kind"] == "switch")


def uplink_per_leaf(G):
    """Sum of leaf-spine edge bandwidth, per leaf (bytes/s)."""
    out = Counter()
    for u, v, bw in G.edges(data="bw_bytes_per_s"):
        tiers = {G.nodes[u].get("tier"), G.nodes[v].get("tier")}
        if tiers == {"leaf", "spine"}:
            out[u if G.nodes[u]["tier"] == "leaf" else v] += bw
    return out


# --- single servers ---------------------------------------------------------------------

def test_dgx_node_counts_and_graph_attrs():
    G = dgx_a100_node()
    assert kinds(G) == {"gpu": 8, "nvswitch": 1, "pcie_switch": 4, "cpu": 2, "nic": 8}
    # 8 NVLink + 8 GPU-PCIe + 8 NIC-PCIe + 4 PCIe-CPU + 1 xGMI
    assert G.number_of_edges() == 29
    assert G.graph == {"name": "dgx_a100", "gpu": "A100-SXM4-80GB", "gpus_per_node": 8,
                       "nodes": 1}
    check_cluster(G)


def test_dgx_each_gpu_has_nvswitch_and_pcie_edge():
    G = dgx_a100_node()
    for i in range(8):
        gpu = f"n0.gpu{i}"
        assert neighbour_kinds(G, gpu) == ["nvswitch", "pcie_switch"]
        assert G.has_edge(gpu, f"n0.pcie{i // 2}")
        edge = G.edges[gpu, "n0.nvswitch"]
        assert edge["bw_bytes_per_s"] == pytest.approx(300e9)
        assert (edge["link_type"], edge["link_class"]) == ("nvlink3", "nvlink")
    assert G.edges["n0.cpu0", "n0.cpu1"]["link_type"] == "xgmi"
    assert {G.nodes[c]["kind"] for c in G["n0.pcie3"]} == {"gpu", "nic", "cpu"}
    assert G.has_edge("n0.pcie3", "n0.cpu1") and G.has_edge("n0.pcie0", "n0.cpu0")


@pytest.mark.parametrize("nics", [1, 2, 4, 8, 16])
def test_dgx_nic_placement(nics):
    G = dgx_a100_node(nics=nics)
    assert kinds(G)["nic"] == nics
    for j in range(nics):
        assert list(G[f"n0.nic{j}"]) == [f"n0.pcie{j * 4 // nics}"]
    per_switch = Counter(next(iter(G[f"n0.nic{j}"])) for j in range(nics))
    assert len(set(per_switch.values())) == 1


def test_dgx_with_8_nics_puts_each_nic_next_to_its_gpu():
    G = dgx_a100_node()
    for j in range(8):
        assert set(G[f"n0.nic{j}"]) == {f"n0.pcie{j // 2}"} and G.has_edge(
            f"n0.gpu{j}", f"n0.pcie{j // 2}")


def test_h100_uses_nvlink4_and_gen5():
    G = dgx_a100_node(gpu="H100-SXM", nic="ib-ndr")
    assert G.edges["n0.gpu0", "n0.nvswitch"]["bw_bytes_per_s"] == pytest.approx(450e9)
    assert G.edges["n0.gpu0", "n0.pcie0"]["link_type"] == "pcie-gen5-x16"


def test_node_attributes_follow_conventions():
    G = dgx_a100_node(server=3)
    gpu = G.nodes["n3.gpu5"]
    assert gpu == {"kind": "gpu", "server": 3, "local": "gpu5", "index": 5, "rank": 29,
                   "template": "dgx_a100:gpu=A100-SXM4-80GB:nics=8:nic=ib-hdr"}
    assert G.nodes["n3.nvswitch"]["local"] == "nvswitch"
    for n, d in G.nodes(data=True):
        assert n == f"n3.{d['local']}" and d["server"] == 3 and "template" in d
    for _, _, d in G.edges(data=True):
        assert set(d) == {"bw_bytes_per_s", "latency_s", "link_type", "link_class", "lanes"}


def test_builders_compose_into_one_graph():
    G = dgx_a100_node(server=0)
    dgx_a100_node(G, server=1)
    assert G.graph["nodes"] == 2 and kinds(G)["gpu"] == 16
    with pytest.raises(ConfigError, match="server: server 1 is already in the graph"):
        dgx_a100_node(G, server=1)
    with pytest.raises(ConfigError, match="gpu: graph already has gpu="):
        dgx_a100_node(G, server=2, gpu="A100-SXM4-40GB")


@pytest.mark.parametrize("gpus, per_switch, switches, cpus", [
    (1, 2, 1, 1), (2, 2, 1, 1), (4, 2, 2, 2), (8, 2, 4, 2), (8, 4, 2, 2), (3, 1, 3, 2)])
def test_pcie_node_shape(gpus, per_switch, switches, cpus):
    G = pcie_node(gpus=gpus, gpus_per_pcie_switch=per_switch, nics=3)
    assert kinds(G) == {"gpu": gpus, "pcie_switch": switches, "cpu": cpus, "nic": 3}
    assert G.has_edge("n0.cpu0", "n0.cpu1") == (cpus == 2)
    assert all(d["link_class"] != "nvlink" for _, _, d in G.edges(data=True))
    for i in range(gpus):
        assert list(G[f"n0.gpu{i}"]) == [f"n0.pcie{i // per_switch}"]
    for j in range(3):
        assert list(G[f"n0.nic{j}"]) == [f"n0.pcie{j % switches}"]
    check_cluster(G)


@pytest.mark.parametrize("kwargs, field", [
    ({"nics": 3}, "nics"), ({"nics": 0}, "nics"), ({"gpu": "A100-PCIE-40GB"}, "gpu"),
    ({"gpu": "V100"}, "gpu"), ({"nic": "nvlink3"}, "nic"), ({"nic": "ib-gdr"}, "nic"),
    ({"server": -1}, "server"), ({"server": 1.5}, "server")])
def test_dgx_bad_arguments(kwargs, field):
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        dgx_a100_node(**kwargs)


@pytest.mark.parametrize("kwargs, field", [
    ({"gpus": 0}, "gpus"), ({"gpus": 9}, "gpus"), ({"nics": 0}, "nics"),
    ({"gpus_per_pcie_switch": 0}, "gpus_per_pcie_switch"), ({"nic": "xgmi"}, "nic")])
def test_pcie_bad_arguments(kwargs, field):
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        pcie_node(**kwargs)


# --- multi-node fabrics -----------------------------------------------------------------

@pytest.mark.parametrize("fabric", FABRICS)
@pytest.mark.parametrize("node, gpn", [(DGX, 8), (PCIE, 4)])
@pytest.mark.parametrize("nodes", [1, 3, 21])
def test_fabric_invariants(fabric, node, gpn, nodes):
    G = fabric(nodes, node)
    check_cluster(G)
    assert nx.is_connected(G)
    assert G.graph["nodes"] == nodes and G.graph["gpus_per_node"] == gpn
    ranks = sorted(r for n, r in G.nodes(data="rank") if G.nodes[n]["kind"] == "gpu")
    assert ranks == list(range(nodes * gpn))
    for n, d in G.nodes(data=True):
        if d["kind"] == "gpu":
            assert d["rank"] == d["server"] * gpn + d["index"]
        elif d["kind"] == "nic":
            assert neighbour_kinds(G, n) == ["pcie_switch", "switch"]
        elif d["kind"] == "switch":
            assert d["tier"] in ("leaf", "spine", "single")
    assert len({d["template"] for _, d in G.nodes(data=True) if "template" in d}) == 1


def test_generators_registry_describes_each_generator():
    assert set(GENERATORS) == {"dgx_a100_node", "oam_mesh_node", "pcie_node", "single_switch",
                               "leaf_spine",
                               "rail_optimized", "superpod"}
    for name, (function, description) in GENERATORS.items():
        assert function.__name__ == name and len(description) > 20


def test_single_switch():
    G = single_switch(3, DGX)
    assert G.nodes["switch"] == {"kind": "switch", "tier": "single"}
    assert G.degree("switch") == 24
    assert all(d["link_type"] == "ib-hdr" for _, _, d in G.edges("switch", data=True))


@pytest.mark.parametrize("nodes, per_leaf, spines, over", [
    (1, 16, None, 1.0), (40, 16, None, 1.0), (40, 16, 4, 2.0), (7, 2, 3, 0.5)])
def test_leaf_spine_structure_and_uplinks(nodes, per_leaf, spines, over):
    G = leaf_spine(nodes, DGX, nodes_per_leaf=per_leaf, spines=spines, oversubscription=over)
    n_leaves, n_spines = math.ceil(nodes / per_leaf), spines or 8
    tiers = Counter(t for _, t in G.nodes(data="tier") if t)
    assert tiers == {"leaf": n_leaves, "spine": n_spines}
    for s in range(nodes):
        assert {nic_leaf(G, f"n{s}.nic{j}") for j in range(8)} == {f"leaf.g{s // per_leaf}"}
    uplinks = uplink_per_leaf(G)
    assert len(uplinks) == n_leaves
    for leaf, total in uplinks.items():
        assert total == pytest.approx(per_leaf * 8 * HDR / over)
        assert sorted(m for m in G[leaf] if m.startswith("spine")) == [
            f"spine.{i}" for i in range(n_spines)]


@pytest.mark.parametrize("nodes, per_leaf, spines, over", [
    (1, 20, None, 1.0), (45, 20, None, 1.0), (45, 20, 2, 4.0), (5, 1, 1, 1.0)])
def test_rail_optimized_structure_and_uplinks(nodes, per_leaf, spines, over):
    G = rail_optimized(nodes, DGX, nodes_per_leaf=per_leaf, spines=spines,
                       oversubscription=over)
    groups = math.ceil(nodes / per_leaf)
    assert Counter(t for _, t in G.nodes(data="tier") if t) == {"leaf": 8 * groups,
                                                                 "spine": spines or 8}
    for s in range(nodes):
        for j in range(8):
            leaf = nic_leaf(G, f"n{s}.nic{j}")
            assert leaf == f"leaf.r{j}.g{s // per_leaf}"
            assert G.nodes[leaf]["rail"] == j
    for leaf, total in uplink_per_leaf(G).items():
        assert total == pytest.approx(per_leaf * HDR / over)
    assert "rail" not in G.nodes["spine.0"]


def test_uplink_link_type_sets_class_and_latency():
    G = leaf_spine(2, {"type": "dgx_a100", "nic": "roce-100"}, uplink="roce-400")
    edge = G.edges["leaf.g0", "spine.0"]
    assert edge["link_type"] == "roce-400"
    assert edge["latency_s"] == link_spec("roce-400").latency_s
    assert edge["bw_bytes_per_s"] == pytest.approx(16 * 8 * 12.5e9 / 8)


def test_bisection_halves_with_oversubscription_two():
    full = sum(uplink_per_leaf(rail_optimized(40, DGX)).values())
    half = sum(uplink_per_leaf(rail_optimized(40, DGX, oversubscription=2.0)).values())
    assert half == pytest.approx(full / 2)


def test_large_rail_optimized_cluster():
    G = rail_optimized(512, DGX)
    assert kinds(G)["gpu"] == 4096
    assert G.graph["nodes"] == 512
    assert G.nodes["n511.gpu7"]["rank"] == 4095


@pytest.mark.parametrize("fabric", FABRICS)
@pytest.mark.parametrize("kwargs, field", [
    ({"nodes": 0}, "nodes"), ({"nodes": True}, "nodes"), ({"nodes": 2.0}, "nodes"),
    ({"node": {"gpu": "A100-SXM4-80GB"}}, "node.type"),
    ({"node": {"type": "dgx_a100", "nicz": 8}}, "node.nicz"),
    ({"node": {"type": "dgx_a100", "nics": 3}}, "node.nics"),
    ({"node": {"type": "pcie", "gpus": 9}}, "node.gpus"),
    ({"node": "dgx"}, "node")])
def test_fabric_bad_common_arguments(fabric, kwargs, field):
    args = {"nodes": 2, "node": DGX, **kwargs}
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        fabric(**args)


@pytest.mark.parametrize("fabric", [leaf_spine, rail_optimized])
@pytest.mark.parametrize("kwargs, field", [
    ({"oversubscription": 0}, "oversubscription"),
    ({"oversubscription": -1.0}, "oversubscription"),
    ({"oversubscription": "2"}, "oversubscription"),
    ({"nodes_per_leaf": 0}, "nodes_per_leaf"), ({"spines": 0}, "spines"),
    ({"uplink": "nvlink3"}, "uplink"), ({"uplink": "400 Gb/s"}, "uplink")])
def test_clos_bad_arguments(fabric, kwargs, field):
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        fabric(2, DGX, **kwargs)


# --- checks -------------------------------------------------------------------------------

def test_check_cluster_rejects_disconnected_graph():
    G = dgx_a100_node()
    G.add_node("orphan", kind="switch", tier="single")
    with pytest.raises(TopologyError,
                       match=r"topology is disconnected: 1 of 24 nodes unreachable from "
                             r"'n0\.gpu0' \('orphan'\)"):
        check_cluster(G)
    with pytest.raises(TopologyError, match="disconnected"):
        check_connected(G)


def test_check_cluster_rejects_two_unjoined_servers():
    G = dgx_a100_node(server=0)
    dgx_a100_node(G, server=1)
    with pytest.raises(TopologyError, match=r"unreachable from 'n0\.gpu0'.*'n1\."):
        check_cluster(G)


def test_check_cluster_rejects_bad_ranks_and_edges():
    G = dgx_a100_node()
    G.nodes["n0.gpu3"]["rank"] = 9
    with pytest.raises(TopologyError, match="ranks are not 0..7"):
        check_cluster(G)
    G = dgx_a100_node()
    G.edges["n0.cpu0", "n0.cpu1"]["bw_bytes_per_s"] = 0.0
    with pytest.raises(TopologyError, match="edge 'n0.cpu0'-'n0.cpu1': bw_bytes_per_s"):
        check_cluster(G)
    G = dgx_a100_node()
    G.edges["n0.cpu0", "n0.cpu1"]["latency_s"] = -1.0
    with pytest.raises(TopologyError, match="latency_s must be >= 0"):
        check_cluster(G)
    with pytest.raises(TopologyError, match="no GPU"):
        check_cluster(nx.Graph([("a", "b")]))



@pytest.mark.parametrize("value", [np.float64(1e9), 10**400, True, float("nan"), None, "1e9",
                                   -1.0, 0])
@pytest.mark.parametrize("field", ["bw_bytes_per_s", "latency_s"])
def test_check_cluster_judges_edge_figures_as_the_edge_walk_does(value, field):
    # the vectorised check passes plain figures and hands anything else to the walk
    from simulator.topology import checks

    G = dgx_a100_node()
    G.edges["n0.cpu0", "n0.cpu1"][field] = value
    try:
        checks._check_edges(G)
        want = None
    except TopologyError as exc:
        want = str(exc)
    if want is None:
        check_cluster(G)
    else:
        with pytest.raises(TopologyError) as got:
            check_cluster(G)
        assert str(got.value) == want
