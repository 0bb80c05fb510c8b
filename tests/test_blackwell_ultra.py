"""Blackwell Ultra and multi-node Blackwell shipped (issue 47): B300 and GB300 in the
catalog with their sourced figures, DGX B300 (one server and SuperPOD) and GB300 NVL72
topologies, their prices, and a single server's file that names its fabric
(``multi_node``), so ``--set cluster.topology=dgx-b200`` on a 256-GPU scenario runs, the
same graph and the same step as ``dgx-b200-superpod``."""

from __future__ import annotations

import json
import re

import networkx as nx
import pytest

from simulator.compare.cost import resolve_price
from simulator.errors import ConfigError
from simulator.hardware import gpu_spec
from simulator.topology import load_topology, resolve_topology, topology_from_dict
from test_cli import run_main


@pytest.mark.parametrize("name, bf16, fp8, hbm, tdp", [
    ("B300", 2250e12, 4500e12, 288 << 30, 1100), ("GB300", 2500e12, 5000e12, 288 << 30, 1400)])
def test_blackwell_ultra_carries_its_datasheet_figures(name, bf16, fp8, hbm, tdp):
    g = gpu_spec(name)
    assert (g.peak_flops["bf16"], g.low_precision_flops["fp8"]) == (bf16, fp8)
    assert g.hbm_bytes == hbm and g.hbm_bw_bytes_per_s == 8000e9 and g.tdp_w == tdp
    assert g.peak_flops["fp64"] == 1.25e12       # Blackwell Ultra gave up FP64
    assert g.family == "blackwell" and g.nvls and g.sm_count == 160
    assert re.search(r"20\d\d-\d\d-\d\d", g.source)


@pytest.mark.parametrize("name, gpus, model, per_domain, nic, sharp", [
    ("dgx-b300", 8, "B300", 8, "ib-xdr", False),
    ("dgx-b300-superpod", 32, "B300", 8, "ib-xdr", True),
    ("gb300-nvl72", 144, "GB300", 72, "ib-xdr", True)])
def test_shipped_blackwell_ultra_topologies(name, gpus, model, per_domain, nic, sharp):
    G = load_topology(resolve_topology(name))
    assert G.graph["gpu"] == model and G.graph["gpus_per_node"] == per_domain
    assert sum(k == "gpu" for _, k in G.nodes(data="kind")) == gpus
    assert bool(G.graph.get("sharp")) == sharp
    if per_domain < gpus:
        assert {d["link_type"] for _, _, d in G.edges(data=True)
                if d["link_class"] == "net"} == {nic}


@pytest.mark.parametrize("gpu, label, usd_per_gpu_hour", [
    ("B300", "p6-b300.48xlarge", 142.416 / 8), ("GB300", "GB300 NVL72", 18.00)])
def test_blackwell_ultra_is_priced(gpu, label, usd_per_gpu_hour):
    price = resolve_price(gpu)
    assert label in price.label
    assert price.usd_per_gpu_hour == pytest.approx(usd_per_gpu_hour)


def _same_graph(a: nx.Graph, b: nx.Graph) -> bool:
    return (dict(a.nodes(data=True)) == dict(b.nodes(data=True))
            and {frozenset((u, v)): d for u, v, d in a.edges(data=True)}
            == {frozenset((u, v)): d for u, v, d in b.edges(data=True)})


@pytest.mark.parametrize("server, fabric", [("dgx-b200", "dgx-b200-superpod"),
                                            ("dgx-b300", "dgx-b300-superpod")])
def test_a_server_with_nodes_is_its_fabric(server, fabric):
    a = load_topology(resolve_topology(server), nodes=4)
    b = load_topology(resolve_topology(fabric), nodes=4)
    assert _same_graph(a, b) and a.graph == b.graph
    assert len(load_topology(resolve_topology(server)).graph) == len(
        load_topology(resolve_topology("dgx-b200")).graph)       # alone: one server


def test_the_servers_own_settings_travel_to_the_fabric():
    """A --set topology.params.* on the single server is kept when it scales out."""
    data = {"name": "mine", "generator": "dgx_a100_node", "multi_node": "dgx-b200-superpod",
            "params": {"gpu": "B300", "nics": 8, "nic": "ib-xdr"},
            "links": {"ib-xdr": {"bw": "400 Gb/s"}}}
    G = topology_from_dict(data, source="mine.yaml", nodes=2)
    assert G.graph["gpu"] == "B300" and G.graph["nodes"] == 2
    assert {d["bw_bytes_per_s"] / d.get("lanes", 1.0) for _, _, d in G.edges(data=True)
            if d["link_type"] == "ib-xdr"} == {400e9 / 8}        # per physical link


def test_a_server_without_a_fabric_is_still_refused():
    data = {"name": "one", "generator": "dgx_a100_node", "params": {"gpu": "B200"}}
    with pytest.raises(ConfigError, match="builds a single server"):
        topology_from_dict(data, source="one.yaml", nodes=2)
    data["multi_node"] = "dgx-b200-superpd"
    with pytest.raises(ConfigError, match="did you mean 'dgx-b200-superpod'"):
        topology_from_dict(data, source="one.yaml", nodes=2)


def test_dgx_b200_on_a_256_gpu_scenario_runs_as_the_superpod(capsys):
    """Issue 47: this failed naming an A100 generator."""
    steps = []
    for topology in ("dgx-b200", "dgx-b200-superpod"):
        code, out, err = run_main(capsys, "run", "llama3-70b-fsdp-tp8-256gpu", "--set",
                                  f"cluster.topology={topology}", "--format", "json", "-q")
        assert code == 0, err
        steps.append(json.loads(out)["iteration_time_s"])
    assert steps[0] == steps[1]
