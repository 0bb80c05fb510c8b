"""`nccl.version` swaps the tuner's per-release constants (nccl.yaml ``tuner_releases``):
a version switch changes exactly the fields its entry lists, and the latencies follow
NCCL's formulas with that entry's numbers."""

import math

import pytest

from simulator.cluster import Cluster
from simulator.constants import for_release, load_constants, read_data
from simulator.collectives.layouts import make_communicator
from simulator.collectives.model import CollectiveModel
from simulator.collectives.nccl_config import NcclConfig, release_entry
from simulator.topology import load_topology, resolve_topology
from test_cli import run_main

US = 1e-6
K = load_constants()
TABLE = read_data("nccl.yaml")["tuner_releases"]
TUNER_FIELDS = {"base_latency_s", "hop_latency_s", "offload_latency_s", "bandwidth_factor",
                "ring_simple_plateau_factor", "ring_inter_steps_per_node_minus"}


def superpod(nodes, **nccl):
    G = load_topology(resolve_topology("dgx-a100-superpod"), nodes=nodes)
    return CollectiveModel(Cluster.from_graph(G, K), K, NcclConfig(**nccl))


@pytest.mark.parametrize("version, entry", [("2.4", "2.7"), ("2.7", "2.7"), ("2.12", "2.7"),
                                            ("2.19.3", "2.19"), ("2.21", "2.19"),
                                            ("2.28", "2.28"), ("2.30", "2.28")])
def test_a_version_takes_the_newest_entry_not_newer_than_it(version, entry):
    assert release_entry(version)[0] == entry


def test_no_version_keeps_the_calibrated_tables_and_a_given_one_swaps_them():
    assert NcclConfig().tuner_release() is None
    assert superpod(2).k == K.replace(channels=K.channels)
    assert NcclConfig(version="2.21").tuner_release() == "2.21"


@pytest.mark.parametrize("release", sorted(TABLE))
def test_a_release_changes_only_the_fields_its_entry_lists(release):
    k = for_release(K, TABLE[release])
    changed = {f for f in K.__dataclass_fields__ if getattr(k, f) != getattr(K, f)}
    assert changed <= TUNER_FIELDS
    e = TABLE[release]
    assert k.base_latency_s["tree"]["LL"] == pytest.approx(e["base_latency_us"]["tree"]["LL"] * US)
    assert k.hop_latency_s["net"]["ring"]["Simple"] == pytest.approx(
        e["hop_latency_us"]["net"]["ring"]["Simple"] * US)
    assert k.bandwidth_factor["ring"]["LL"] == e["ring_ll_bw_factor"]
    assert k.bandwidth_factor["tree"] == K.bandwidth_factor["tree"]
    assert k.ring_simple_plateau_factor == e["ring_simple_plateau_factor"]
    assert k.tree_correction is K.tree_correction
    assert k.pat_latency_s == K.pat_latency_s
    for algo, row in e.get("offload_latency_us", {}).items():
        assert k.offload_latency_s[algo]["net"] == pytest.approx(row["net"] * US)


def _tree_ll_latency(k, ppn, nodes):
    # model.latency_s: launch + scale x (base + 2((ppn-1) intra + 1 x net)) + 2 (levels-1) net
    levels = math.log2(nodes)
    scale = k.protocol_latency_factor["LL"]
    base, intra = k.base_latency_s["tree"]["LL"], k.hop_latency_s["nvlink"]["tree"]["LL"]
    net = k.hop_latency_s["net"]["tree"]["LL"]
    return (k.launch_overhead_s + scale * (base + 2 * ((ppn - 1) * intra + min(levels, 1) * net))
            + 2 * max(levels - 1, 0) * net)


@pytest.mark.parametrize("version, base_us, intra_us", [("2.7", 4.4, 0.52), ("2.19", 6.8, 0.6),
                                                       ("2.28", 6.8, 0.6)])
def test_8_byte_all_reduce_on_16_servers_follows_the_release_table(version, base_us, intra_us):
    m = superpod(16, version=version)
    plan = m.plan("all_reduce", 8, list(range(m.cluster.n_gpus)))
    assert (plan.algo, plan.proto) == ("tree", "LL")
    assert m.k.base_latency_s["tree"]["LL"] == pytest.approx(base_us * US)
    assert m.k.hop_latency_s["nvlink"]["tree"]["LL"] == pytest.approx(intra_us * US)
    comm = make_communicator(m.cluster, list(range(m.cluster.n_gpus)))
    tuner = m.latency_s("all_reduce", "tree", "LL", comm, "nvlink", 8)
    assert tuner == pytest.approx(_tree_ll_latency(m.k, 8, 16))
    # timed: the 3 levels beyond the first at the release's ring LL network step, not its
    # tree hop (collectives/tree_latency.py)
    net, step = m.k.hop_latency_s["net"]["tree"]["LL"], m.k.hop_latency_s["net"]["ring"]["LL"]
    assert plan.latency_s == pytest.approx(_tree_ll_latency(m.k, 8, 16) - 2 * 3 * (net - step))


def test_ring_inter_steps_follow_the_release():
    # all_reduce on 2 servers x 8: nsteps 30; 2.19 crosses 2 x nNodes = 4 times, 2.28 2 x (2-1)
    for version, inter in (("2.19", 4), ("2.28", 2)):
        m = superpod(2, version=version)
        comm = make_communicator(m.cluster, list(range(16)))
        k = m.k
        scale = k.protocol_latency_factor["LL"]
        hw = k.hop_latency_s
        fixed = (k.base_latency_s["ring"]["LL"] + (30 - inter) * hw["nvlink"]["ring"]["LL"]
                 + inter * hw["net"]["ring"]["LL"])
        lat = m.latency_s("all_reduce", "ring", "LL", comm, "nvlink", 8)
        assert lat == pytest.approx(k.launch_overhead_s + scale * fixed)


def test_the_version_shows_in_the_collective_header_and_changes_the_time(capsys):
    args = ["collective", "all_reduce", "--topology", "dgx-a100-superpod", "--nodes", "2",
            "-b", "8", "-e", "8", "--format", "csv"]
    code0, out0, _ = run_main(capsys, *args)
    code1, out1, _ = run_main(capsys, *args, "--nccl-version", "2.19")
    assert code0 == 0 and code1 == 0
    t_default = float(out0.strip().splitlines()[-1].split(",")[3])
    t_given = float(out1.strip().splitlines()[-1].split(",")[3])
    m19, m0 = superpod(2, version="2.19"), superpod(2)
    assert t_given - t_default == pytest.approx(
        (_tree_ll_latency(m19.k, 8, 2) - _tree_ll_latency(m0.k, 8, 2)) / US, rel=1e-6)
    code, table, _ = run_main(capsys, *args[:-2], "--nccl-version", "2.19")
    assert code == 0 and "version=2.19" in table
