"""NVLS, NVLS-Tree, CollNet (IB SHARP) and PAT, the NCCL knobs that choose among them, the
tree's latency across servers, and the one-line errors for algorithms the hardware lacks.
Numbers are checked against the formulas of simulator/collectives/offload.py and pat.py."""

import math

import pytest

from simulator.cluster import Cluster
from simulator.collectives.constants import load_constants
from simulator.collectives.layouts import make_communicator
from simulator.collectives.model import CollectiveModel
from simulator.collectives.nccl_config import NcclConfig
from simulator.errors import ConfigError
from simulator.hardware import link_spec
from simulator.topology import load_topology, resolve_topology
from test_cli import run_main

US = 1e-6
K = load_constants()


def model(name, nodes=None, **nccl):
    G = load_topology(resolve_topology(name), nodes=nodes)
    return CollectiveModel(Cluster.from_graph(G, K), K, NcclConfig(**nccl))


def ranks(m):
    return list(range(m.cluster.n_gpus))


# ------------------------------------------------------------------------------- NVLS
def test_nvls_all_reduce_time_is_latency_plus_one_buffer_over_nvlink():
    m = model("dgx-h100")
    size = 1 << 30
    plan = m.plan("all_reduce", size, ranks(m), algo="nvls")
    lat = K.launch_overhead_s + K.protocol_latency_factor["Simple"] * 25.0 * US
    rate = link_spec("nvlink4").bw_bytes_per_s * K.link_efficiency["nvlink"] * K.nvls_efficiency
    assert plan.latency_s == pytest.approx(lat)
    assert plan.predicted_s == pytest.approx(lat + size / rate)


def test_nvls_reduce_scatter_carries_n_minus_1_over_n():
    m = model("dgx-h100")
    size = 1 << 30
    plan = m.plan("reduce_scatter", size, ranks(m), algo="nvls")
    assert plan.payload_bytes == pytest.approx(size * 7 / 8)


def test_tuner_picks_nvls_for_large_h100_all_reduce_and_ring_before_nccl_2_17():
    big = 1 << 30
    assert model("dgx-h100").plan("all_reduce", big, list(range(8))).algo == "nvls"
    old = model("dgx-h100", version="2.16")
    assert old.plan("all_reduce", big, list(range(8))).algo == "ring"
    no = model("dgx-h100", algo="^nvls,nvls_tree")
    assert no.plan("all_reduce", big, list(range(8))).algo in ("ring", "tree")
    off = model("dgx-h100", nvls_enable=False)
    assert off.plan("all_reduce", big, list(range(8))).algo != "nvls"


def test_nvls_tree_across_servers_latency_and_shards():
    m = model("dgx-h100-superpod", nodes=4)
    plan = m.plan("all_reduce", 1 << 30, ranks(m), algo="nvls_tree")
    lat = (K.launch_overhead_s + K.protocol_latency_factor["Simple"] * 25.0 * US
           + 2 * math.log2(4) * 14.0 * US)
    assert plan.latency_s == pytest.approx(lat)
    assert m.plan("all_reduce", 1 << 30, ranks(m)).algo == "nvls_tree"


# ------------------------------------------------------------------------------ CollNet
def test_collnet_is_offered_only_when_enabled_and_costs_nccls_formula():
    plain = model("dgx-h100-superpod", nodes=2)
    comm_algos = plain._candidates("all_reduce",
                                   make_communicator(plain.cluster, ranks(plain)))
    assert not any(a.startswith("collnet") for a in comm_algos)
    m = model("dgx-h100-superpod", nodes=2, collnet_enable=True)
    plan = m.plan("all_reduce", 1 << 30, ranks(m), algo="collnet_direct")
    lat = (K.launch_overhead_s + K.protocol_latency_factor["Simple"] * 2 * 7 * 3.7 * US
           + 31.0 * US)
    assert plan.latency_s == pytest.approx(lat)
    assert plan.proto == "Simple"


# ---------------------------------------------------------------------------------- PAT
def test_pat_at_one_gpu_per_node_takes_log2_steps():
    m = model("dgx-h100-superpod", nodes=4, version="2.23")
    one_per_node = [0, 8, 16, 24]
    plan = m.plan("all_gather", 1 << 20, one_per_node, algo="pat")
    lat = (K.launch_overhead_s + K.protocol_latency_factor["Simple"] * 8.4 * US
           + 2 * 9.6 * US)
    assert plan.latency_s == pytest.approx(lat)
    with pytest.raises(ConfigError, match="pat runs at one GPU per server"):
        m.plan("all_gather", 1 << 20, ranks(m), algo="pat")


# ------------------------------------------------------------------ tree latency, knobs
def test_tree_gains_two_net_hops_per_doubling_of_servers():
    """NCCL's tree: 2 log2(nodes) x the net hop; the calibrated factor covers the first
    level (what the 1-2 server tables measured), so to the tuner 2 -> 16 servers adds
    2 x 3 x 5.0 us (hop_latency_us.net.tree.LL), not the factor times it; the plan is timed
    with one ring LL network step (2.7 us) up and one down per level: 2 x 3 x 2.7 us."""
    ms = {n: model("dgx-a100-superpod", nodes=n) for n in (2, 16)}
    lat = {n: m.plan("all_reduce", 8, list(range(8 * n)), algo="tree", proto="LL").latency_s
           for n, m in ms.items()}
    tuner = {n: m.latency_s("all_reduce", "tree", "LL",
                            make_communicator(m.cluster, list(range(8 * n))), "nvlink", 8)
             for n, m in ms.items()}
    assert tuner[16] - tuner[2] == pytest.approx(2 * 3 * 5.0 * US)
    assert lat[16] - lat[2] == pytest.approx(2 * 3 * 2.7 * US)
    fixed = K.protocol_latency_factor["LL"] * (4.4 + 2 * (7 * 0.52 + 5.0)) * US
    assert lat[2] == pytest.approx(K.launch_overhead_s + fixed)


def test_channel_knobs_clamp_nccl_channels():
    assert model("dgx-h100", max_channels=4).k.channels == 4
    assert model("dgx-h100", min_channels=32).k.channels == 32
    assert model("dgx-h100").k.channels == K.channels


def test_nccl_proto_list_restricts_the_tuner():
    m = model("dgx-a100", proto="^LL,LL128")
    assert m.plan("all_reduce", 8, list(range(8))).proto == "Simple"


def test_nccl_config_rejects_bad_values():
    with pytest.raises(ValueError, match="quote the version"):
        NcclConfig(version=2.2)
    with pytest.raises(ValueError, match="unknown algorithm 'rign'"):
        NcclConfig(algo="rign")


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("topology, algo, message", [
    ("dgx-a100", "nvls", "nvls needs NVLink SHARP"),
    ("hgx-a100-pcie", "nvls", "nvls needs NVLink SHARP"),
    ("hgx-h100-roce", "collnet_direct", "has no SHARP switches"),
])
def test_algorithm_the_hardware_lacks_is_one_line_exit_2(capsys, topology, algo, message):
    code, out, err = run_main(capsys, "collective", "all_reduce", "--topology", topology,
                              "--algo", algo, "-b", "1M", "-e", "1M")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert message in err


def test_bad_nccl_option_is_a_usage_error(capsys):
    code, out, err = run_main(capsys, "collective", "all_reduce", "--nccl-version", "two")
    assert code == 2 and "--nccl-version" in err


def test_scenario_nccl_block_reaches_the_model(capsys):
    code, out, err = run_main(capsys, "run", "--set", "nccl={algo: ring, version: '2.19'}",
                              "--format", "json")
    assert code == 0, err
    code, out, err = run_main(capsys, "run", "--set", "nccl.algo=warp")
    assert code == 2 and "--set nccl.algo: unknown algorithm 'warp'" in err
