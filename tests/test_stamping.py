"""Bulk stamping of servers builds the graph that stamping server by server builds."""

from pathlib import Path

import networkx as nx
import pytest

from simulator.topology.servers import server_layout, stamp
from simulator.topology.stamping import stamp_servers
from simulator.topology.systems import nvl_rack_layout

DESIGNS = [
    {"type": "dgx_a100"},
    {"type": "dgx_a100", "gpu": "H100-SXM", "nics": 16, "nic": "ib-ndr"},
    {"type": "dgx_a100", "nics": 4, "nic_pcie": [3, 0, 1, 2]},
    {"type": "pcie", "gpus": 3, "nics": 2},
    {"type": "pcie", "gpus": 1, "gpus_per_pcie_switch": 1},
]


def _layouts():
    return [server_layout(d) for d in DESIGNS] + [nvl_rack_layout(gpus=4)]


def _dump(G: nx.Graph) -> tuple:
    """Everything observable in order: nodes with data, adjacency with data, edges."""
    return (list(G.nodes(data=True)),
            [(u, list(nbrs.items())) for u, nbrs in G.adjacency()],
            list(G.edges(data=True)))


@pytest.mark.parametrize("layout", _layouts(), ids=lambda lay: lay.template)
def test_bulk_stamp_equals_one_by_one(layout):
    old = nx.Graph()
    for s in range(3):
        stamp(old, layout, s)
    new = nx.Graph()
    stamp_servers(new, layout, 3)
    assert _dump(new) == _dump(old)
    assert new.number_of_edges() == 3 * len({frozenset((u, v)) for u, v, _ in layout.edges})


def test_edge_data_shared_by_both_directions_and_not_across_servers():
    layout = server_layout({"type": "dgx_a100"})
    G = nx.Graph()
    stamp_servers(G, layout, 2)
    assert G.adj["n0.gpu0"]["n0.nvswitch"] is G.adj["n0.nvswitch"]["n0.gpu0"]
    G.adj["n0.gpu0"]["n0.nvswitch"]["bw_bytes_per_s"] = 1.0
    assert G.edges["n1.gpu0", "n1.nvswitch"]["bw_bytes_per_s"] != 1.0
    assert G.nodes["n1.gpu3"]["rank"] == 8 + 3
    assert G.nodes["n0.nvswitch"] is not G.nodes["n1.nvswitch"]


def test_refuses_a_graph_with_nodes():
    G = nx.Graph()
    G.add_node("x")
    with pytest.raises(ValueError):
        stamp_servers(G, server_layout({"type": "dgx_a100"}), 1)


def _one_by_one(G, layout, count):
    for s in range(count):
        stamp(G, layout, s)


@pytest.mark.parametrize("name", ["dgx-a100-superpod", "dgx-h100-superpod", "gb200-nvl72",
                                  "a100-roce-leaf-spine", "hgx-h100-roce", "aws-p5"])
def test_shipped_fabrics_build_the_graph_of_stamping_one_by_one(name, monkeypatch):
    from simulator.topology import fabrics
    from simulator.topology.loader import load_topology
    path = Path(__file__).resolve().parents[1] / "topologies" / f"{name}.yaml"
    new = load_topology(path, nodes=5)
    monkeypatch.setattr(fabrics, "stamp_servers", _one_by_one)
    old = load_topology(path, nodes=5)
    assert _dump(new) == _dump(old) and new.graph == old.graph
    gpus = [n for n, kind in new.nodes(data="kind") if kind == "gpu"]
    assert len(gpus) == 5 * new.graph["gpus_per_node"]


def test_add_links_is_add_edges_from():
    from simulator.topology.stamping import add_links

    def build(fill):
        G = nx.Graph()
        G.add_nodes_from(["a", "b", "c"])
        G.add_edge("a", "b", bw=1.0, tag="old")
        fill(G, [("a", "c"), ("a", "b"), ("c", "d"), ("d", "a"), ("b", "b")],
             {"bw": 2.0, "latency_s": 0.0})
        return G

    want = build(lambda G, pairs, attrs: G.add_edges_from((u, v, attrs) for u, v in pairs))
    got = build(add_links)
    assert _dump(got) == _dump(want)
    assert got.edges["a", "c"] is got.adj["c"]["a"]                 # one dict, both ways
    assert got.edges["a", "c"] is not got.edges["d", "a"]           # a copy per edge

    class Sub(nx.Graph):
        pass

    G = Sub()
    add_links(G, [("x", "y")], {"bw": 1.0})
    assert list(G.edges(data=True)) == [("x", "y", {"bw": 1.0})]
