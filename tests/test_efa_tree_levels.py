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


# ---------------------------------------------- NCCL 2.28's p2p channels on p5 (docs only)
def _reverse_bits(x, n_bits):
    """bitops.h reverseBits: the bottom n_bits of x reversed, the top bits dropped."""
    return int(format(x & ((1 << n_bits) - 1), f"0{n_bits}b")[::-1], 2) if n_bits else 0


def _base_for_round(r, group=8, per_batch=8, p2p_channels=8):
    """channel.h ncclP2pChannelBaseForRound with nNodes > 1."""
    base = (r // group) * -(-group // per_batch) + (r % group) // per_batch
    return _reverse_bits(base, p2p_channels.bit_length() - 1)


def test_docs_p2p_channels_on_two_instances():
    """docs/collective-model.md, alltoall: on 2 p5 instances (8 p2p channels, 2 channels a
    network peer) the NVLink rounds run on channels 0-1 and the remote rounds on 4-5; on 4
    instances the remote groups take 4, 2, 6; on 8, seven channels; 16 and 32 share."""
    from pathlib import Path
    parts = 2
    local = {(_base_for_round(r) + k) % 8 for r in range(8) for k in range(parts)}
    remote = {(_base_for_round(r) + k) % 8 for r in range(8, 16) for k in range(parts)}
    assert (local, remote) == ({0, 1}, {4, 5})
    assert [_base_for_round(8 * g) for g in range(1, 4)] == [4, 2, 6]
    assert sorted(_base_for_round(8 * g) for g in range(1, 8)) == [1, 2, 3, 4, 5, 6, 7]
    per_channel = [sum(_base_for_round(8 * g) == c for g in range(32)) for c in range(8)]
    assert per_channel == [4] * 8          # 32 instances: 4 groups a channel (ch 0: local + 3)
    text = " ".join((Path(__file__).parents[1] / "docs" / "collective-model.md")
                    .read_text().split())
    assert "the 8 NVLink rounds take base 0 (channels 0 and 1) and the 8 remote rounds base 4 " \
           "(channels 4 and 5)" in text
    assert "remote groups on channels 4, 2, 6 on 4 instances" in text
