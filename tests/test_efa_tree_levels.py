"""A tree's levels between AWS p5 instances wait for the network latency aws-ofi-nccl
reports (simulator/collectives/tree_latency.py, ``plugin_levels_s``): 75 us (platform-aws.cpp,
p5/p5e ``latency = 75.0``, NCCL's ``graph->latencyInter``) per level and direction, twice for
Simple, over the double binary tree's depth, as NCCL 2.28's tuning.cc adds it to the tree's
``interLat``. Rings, point-to-point, one instance and InfiniBand are unchanged; the tuner's
choice is unchanged. The arithmetic is written out."""

import math

import pytest

from simulator.cluster import Cluster
from simulator.collectives.model import CollectiveModel
from simulator.collectives.tree_latency import plugin_levels_s, tree_depth
from simulator.constants import load_constants
from simulator.topology.loader import load_topology, resolve_topology

K = load_constants()
US = 1e-6
MIB = 1 << 20


def _model(name, nodes):
    G = load_topology(resolve_topology(name), nodes=nodes)
    return CollectiveModel(Cluster.from_graph(G, K), K)


def _without_plugin_latency(name, nodes):
    m = _model(name, nodes)
    m.latency_inter_s = 0.0
    return m


def test_the_plugins_latency_is_read_for_p5_only():
    assert _model("aws-p5", 2).latency_inter_s == pytest.approx(75.0 * US)
    assert _model("dgx-h100-superpod", 2).latency_inter_s == 0.0


@pytest.mark.parametrize("nodes, depth", [(2, 1), (3, 2), (4, 2), (8, 3), (16, 4), (32, 5)])
def test_levels_arithmetic(nodes, depth):
    assert tree_depth(nodes) == depth
    assert plugin_levels_s(75 * US, "LL128", nodes) == pytest.approx(2 * depth * 75 * US)
    assert plugin_levels_s(75 * US, "LL", nodes) == pytest.approx(2 * depth * 75 * US)
    # Simple: "Also add the flush extra latency" (tuning.cc): 150 us per level and direction
    assert plugin_levels_s(75 * US, "Simple", nodes) == pytest.approx(2 * depth * 150 * US)


def test_one_server_or_no_reported_latency_adds_nothing():
    assert plugin_levels_s(75 * US, "LL128", 1) == 0.0
    assert plugin_levels_s(0.0, "Simple", 32) == 0.0


@pytest.mark.parametrize("nodes", [4, 8, 32])
def test_tree_all_reduce_on_p5_pays_each_level(nodes):
    ranks = list(range(8 * nodes))
    a = _model("aws-p5", nodes).plan("all_reduce", 32 * MIB, ranks, "tree", "LL128")
    b = _without_plugin_latency("aws-p5", nodes).plan("all_reduce", 32 * MIB, ranks, "tree",
                                                       "LL128")
    depth = math.ceil(math.log2(nodes))
    assert a.latency_s - b.latency_s == pytest.approx(2 * depth * 75 * US)
    assert a.predicted_s - b.predicted_s == pytest.approx(2 * depth * 75 * US)


@pytest.mark.parametrize("nodes", [2, 32])
def test_nvls_tree_on_p5_pays_simples_doubled_latency(nodes):
    ranks = list(range(8 * nodes))
    a = _model("aws-p5", nodes).plan("all_reduce", 512 * MIB, ranks, "nvls_tree")
    b = _without_plugin_latency("aws-p5", nodes).plan("all_reduce", 512 * MIB, ranks,
                                                       "nvls_tree")
    assert a.latency_s - b.latency_s == pytest.approx(2 * tree_depth(nodes) * 2 * 75 * US)


@pytest.mark.parametrize("op, algo, proto", [("all_reduce", "ring", "LL128"),
                                             ("all_reduce", "ring", "Simple"),
                                             ("all_gather", "ring", "LL128"),
                                             ("all_to_all", "direct", "Simple")])
def test_rings_and_point_to_point_are_unchanged(op, algo, proto):
    # their network steps pay EFA's fitted step and p2p costs (collectives/messages.py)
    ranks = list(range(32))
    a = _model("aws-p5", 4).plan(op, 64 * MIB, ranks, algo, proto)
    b = _without_plugin_latency("aws-p5", 4).plan(op, 64 * MIB, ranks, algo, proto)
    assert a.latency_s == b.latency_s and a.predicted_s == b.predicted_s


@pytest.mark.parametrize("nodes, mib", [(2, 32), (2, 512), (4, 32), (16, 4096), (32, 512)])
def test_the_choice_is_the_tuners_own(nodes, mib):
    """The plugin's latency times the chosen plan; what is chosen (aws-ofi-nccl's regions
    from 3 instances, NCCL's own model below) does not move."""
    ranks = list(range(8 * nodes))
    a = _model("aws-p5", nodes).plan("all_reduce", mib * MIB, ranks)
    b = _without_plugin_latency("aws-p5", nodes).plan("all_reduce", mib * MIB, ranks)
    assert (a.algo, a.proto) == (b.algo, b.proto)
