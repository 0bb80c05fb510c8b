"""The one scenario -> graph -> cluster wiring (simulator.topology.build) and the one link
capacity rule (Cluster.capacities_at)."""

import numpy as np
import pytest
import yaml

from simulator.cluster import Cluster
from simulator.constants import load_constants
from simulator.errors import ConfigError
from simulator.scenario import scenario_from_dict
from simulator.topology import dgx_a100_node
from simulator.topology.build import load_cluster, scenario_cluster
from simulator.topology.loader import resolve_topology, topology_from_dict


def test_capacities_at_is_nominal_times_type_then_class_efficiency():
    c = Cluster(dgx_a100_node())
    eff = {"nvlink": 0.5, "pcie-gen4-x16": 0.25, "pcie": 0.9}
    cap = c.capacities_at(eff)
    for i in range(c.n_links):
        factor = eff.get(c.link_type[i], eff.get(c.link_class[i], 1.0))
        assert cap[i] == c.nominal_bytes_per_s[i] * factor
    assert np.array_equal(Cluster(dgx_a100_node(), link_efficiency=eff).capacity_bytes_per_s,
                          cap)


def test_from_graph_uses_the_shipped_calibration_by_default():
    k = load_constants()
    a, b = Cluster.from_graph(dgx_a100_node()), Cluster.from_graph(dgx_a100_node(), k)
    assert np.array_equal(a.capacity_bytes_per_s, a.capacities_at(k.link_efficiency))
    assert np.array_equal(a.capacity_bytes_per_s, b.capacity_bytes_per_s)


def test_scenario_link_bandwidth_reaches_the_capacities():
    scn = scenario_from_dict({"name": "t", "model": "gpt2-small", "strategy": {"name": "ddp"},
                              "cluster": {"topology": "dgx-a100-superpod", "nodes": 2,
                                          "links": {"ib-hdr": {"bw": "400 Gb/s"}}}})
    c = scenario_cluster(scn)
    ib = c.link_type == "ib-hdr"
    eff = load_constants().link_efficiency["net"]
    lanes = np.array([d.get("lanes", 1.0) for _, _, d in c.G.edges(data=True)
                      for _ in (0, 1)])[ib]
    # 400 Gb/s = 50e9 bytes/s per physical link, x lanes, x the net efficiency
    assert np.allclose(c.capacity_bytes_per_s[ib], 50e9 * lanes * eff)
    same = load_cluster("dgx-a100-superpod", 2, {"ib-hdr": {"bw": "400 Gb/s"}})
    assert np.array_equal(same.capacity_bytes_per_s, c.capacity_bytes_per_s)


def _superpod(links):
    data = yaml.safe_load(resolve_topology("dgx-a100-superpod").read_text())
    data["links"] = links
    return data


def test_scenario_overrides_win_field_by_field_over_the_file():
    G = topology_from_dict(_superpod({"ib-hdr": {"bw": "100 Gb/s", "latency": "3 us"}}),
                           links={"ib-hdr": {"bw": "400 Gb/s"}})
    cables = [d for _, _, d in G.edges(data=True)
              if d["link_type"] == "ib-hdr" and d["lanes"] == 1.0]
    assert cables and all(d["bw_bytes_per_s"] == 50e9 and d["latency_s"] == 3e-6
                          for d in cables)


@pytest.mark.parametrize("links, message", [
    ({"ib-hdr": {"speed": "1 GB/s"}}, "cluster.links: links.ib-hdr.speed: unknown key(s) "
     "'speed'; valid: bw, latency"),
    ({"ib-hdr": {"bw": "0 GB/s"}}, "cluster.links: links.ib-hdr.bw: bandwidth must be > 0, "
     "got '0 GB/s'"),
    ({"roce-400": {"bw": "1 GB/s"}}, "cluster.links: links.roce-400: no link of type "
     "'roce-400' in this topology; present: ib-hdr, nvlink3, pcie-gen4-x16, xgmi"),
])
def test_bad_scenario_link_override_is_one_line_naming_cluster_links(links, message):
    with pytest.raises(ConfigError) as info:
        topology_from_dict(_superpod({}), source="x.yaml", links=links)
    assert str(info.value) == message


def test_a_graph_is_checked_once_fabric_or_single_server(monkeypatch):
    # the fabrics run check_cluster on what they build; the loader checks only the others
    # (a single server), so a 16,384-server graph is not walked twice
    from simulator.topology import checks, fabrics, loader
    calls = []
    real = checks.check_cluster
    for module in (fabrics, loader):
        monkeypatch.setattr(module, "check_cluster", lambda G: calls.append(G) or real(G))
    rail = {"name": "r", "generator": "rail_optimized",
            "params": {"nodes": 3, "node": {"type": "dgx_a100"}, "nodes_per_leaf": 2}}
    G = topology_from_dict(rail)
    assert calls == [G]
    calls.clear()
    G = topology_from_dict({"name": "one", "generator": "dgx_a100_node", "params": {}})
    assert calls == [G]


def test_per_link_arrays_follow_the_edges_in_order():
    c = Cluster(dgx_a100_node(), link_efficiency={"nvlink": 0.5})
    for i, (u, v, d) in enumerate(c.G.edges(data=True)):
        assert c.link_id[(u, v)] == 2 * i and c.link_id[(v, u)] == 2 * i + 1
        for j in (2 * i, 2 * i + 1):
            assert c.nominal_bytes_per_s[j] == d["bw_bytes_per_s"]
            assert c.link_type[j] == d["link_type"] and c.link_class[j] == d["link_class"]
            eff = 0.5 if d["link_class"] == "nvlink" else 1.0
            assert c.capacity_bytes_per_s[j] == d["bw_bytes_per_s"] * eff
        assert d["cost"] == max(1, round(1e15 / d["bw_bytes_per_s"]))


def test_the_cluster_walks_the_edges_in_the_graphs_own_order():
    import networkx as nx

    from simulator.cluster import _edges
    from simulator.topology import rail_optimized
    G = rail_optimized(3, {"type": "dgx_a100"}, nodes_per_leaf=2)
    G.add_edge("n0.gpu0", "n0.gpu0", bw_bytes_per_s=1.0, latency_s=0.0)   # a self-loop too
    assert list(_edges(G)) == list(G.edges(data=True))
    H = nx.path_graph(5)
    assert list(_edges(H)) == list(H.edges(data=True))
