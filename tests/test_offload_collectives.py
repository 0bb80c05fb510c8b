"""NVLS, NVLS-Tree, CollNet (IB SHARP) and PAT, the NCCL knobs that choose among them, the
tree's latency across servers, and the one-line errors for algorithms the hardware lacks.
Numbers are checked against the formulas of simulator/collectives/offload.py and pat.py."""

import math

import pytest

from simulator.cluster import Cluster
from simulator.constants import load_constants
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
    # NCCL 2.19+: 2 (min(1, ppn-1) x 3.7 + (ppn-1) x 0.4 arity) + 31 net, ppn = 8
    lat = (K.launch_overhead_s + K.protocol_latency_factor["Simple"] * 2 * (3.7 + 7 * 0.4)
           * US + 31.0 * US)
    assert plan.latency_s == pytest.approx(lat)
    assert plan.proto == "Simple"
    chain = m.plan("all_reduce", 1 << 30, ranks(m), algo="collnet_chain")
    lat = (K.launch_overhead_s + K.protocol_latency_factor["Simple"] * 2 * 7 * 2.8 * US
           + 30.0 * US)
    assert chain.latency_s == pytest.approx(lat)


def test_collnet_direct_needs_an_nvswitch_chain_does_not(tmp_path):
    # NCCL 2.19+ tuning.cc: "Disable CollNet+Direct if not on an NVSwitch system"
    path = tmp_path / "pcie-sharp.yaml"
    path.write_text("name: pcie-sharp\ngenerator: superpod\nparams:\n  nodes: 2\n"
                    "  node: {type: pcie, gpu: H100-PCIE-80GB, gpus: 4, nics: 4, "
                    "nic: ib-ndr}\n  sharp: true\n")
    G = load_topology(path)
    m = CollectiveModel(Cluster.from_graph(G, K), K, NcclConfig(collnet_enable=True))
    comm = make_communicator(m.cluster, ranks(m))
    assert "collnet_direct" not in m._candidates("all_reduce", comm)
    assert "collnet_chain" in m._candidates("all_reduce", comm)
    with pytest.raises(ConfigError, match="collnet_direct needs an NVSwitch"):
        m.plan("all_reduce", 1 << 20, ranks(m), algo="collnet_direct")


def test_nvls_all_gather_is_not_offered_past_nccls_nvls_arity():
    # NCCL_MAX_NVLS_ARITY (32 from 2.20, 8 before): an NVL72 rack's 72 GPUs are too many
    # for NVLS all_gather/reduce_scatter; all_reduce has no such limit
    m = model("gb200-nvl72", nodes=1)
    comm = make_communicator(m.cluster, ranks(m))
    assert comm.ppn == 72
    for op in ("all_gather", "reduce_scatter"):
        assert "nvls" not in m._candidates(op, comm)
    assert "nvls" in m._candidates("all_reduce", comm)
    with pytest.raises(ConfigError, match="spans at most 32 GPUs"):
        m.plan("all_gather", 1 << 20, ranks(m), algo="nvls")
    for version, limit in (("2.19", 8), ("2.20", 32)):
        old = model("gb200-nvl72", nodes=1, version=version)
        sub = list(range(limit)), list(range(limit + 1))
        assert "nvls" in old._candidates("all_gather", make_communicator(old.cluster, sub[0]))
        assert "nvls" not in old._candidates("all_gather",
                                             make_communicator(old.cluster, sub[1]))


# ---------------------------------------------------------------------------------- PAT
def test_pat_at_one_gpu_per_node_takes_log2_steps():
    m = model("dgx-h100-superpod", nodes=4, version="2.23")
    one_per_node = [0, 8, 16, 24]
    plan = m.plan("all_gather", 1 << 20, one_per_node, algo="pat")
    # NCCL 2.28 tuning.cc: base 8.0 + log2i(4) x 14 / 3.5 + 4 ranks x 2.8 us
    lat = (K.launch_overhead_s + K.protocol_latency_factor["Simple"] * 8.0 * US
           + 2 * 14.0 / 3.5 * US + 4 * 2.8 * US)
    assert plan.latency_s == pytest.approx(lat)
    ring = m.plan("all_gather", 1 << 20, one_per_node, algo="ring", proto="Simple")
    # same bytes on the same links at NCCL's 0.75 PAT bandwidth factor
    assert (plan.predicted_s - plan.latency_s) == pytest.approx(
        (ring.predicted_s - ring.latency_s) / 0.75, rel=1e-9)
    with pytest.raises(ConfigError, match="pat runs at one GPU per server"):
        m.plan("all_gather", 1 << 20, ranks(m), algo="pat")


def test_tuner_takes_pat_where_nccls_model_does():
    """NCCL 2.23+ at one GPU per server: PAT's latency grows with nRanks x 2.8 us and its
    bandwidth is 0.75 of the ring's, so on 32 servers it wins small and mid sizes against
    ring/LL (31 net steps) and loses large ones to ring/Simple; 2.21 has no PAT."""
    m = model("dgx-h100-superpod", nodes=32, version="2.23")
    one_per_node = list(range(0, 256, 8))
    algo = {s: m.plan("all_gather", s, one_per_node).algo for s in (8, 1 << 20, 1 << 30)}
    assert algo[8] == "pat" and algo[1 << 20] == "pat" and algo[1 << 30] == "ring"
    old = model("dgx-h100-superpod", nodes=32)
    assert old.plan("all_gather", 8, one_per_node).algo == "ring"


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


def test_nccl_algo_naming_none_of_an_ops_algorithms_keeps_the_ring():
    # NCCL 2.19+ tuning.cc: "at least set ring algo available" when NCCL_ALGO leaves a
    # collective nothing; CollNet implements all_reduce only here
    m = model("dgx-a100", algo="collnetdirect", collnet_enable=True)
    comm = make_communicator(m.cluster, ranks(m))
    assert m._candidates("all_gather", comm) == ("ring",)
    with pytest.raises(ConfigError, match="has no SHARP switches"):
        m._candidates("all_reduce", comm)


def test_sharp_asked_in_a_scenario_on_a_fabric_without_it(capsys):
    args = ("run", "scenarios/resnet50-ddp-8gpu.yaml", "--quiet",
            "--set", "nccl={algo: collnetdirect, collnet_enable: true}")
    code, out, err = run_main(capsys, *args)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "resnet50-ddp-8gpu.yaml: nccl.algo: no algorithm left for all_reduce" in err
    assert "collnet_direct reduces on the switches (IB SHARP), but dgx-a100 has no SHARP" in err
    code, out, err = run_main(capsys, *args, "--set", "cluster.topology=dgx-h100-superpod",
                              "--set", "cluster.nodes=2")
    assert code == 0, err
