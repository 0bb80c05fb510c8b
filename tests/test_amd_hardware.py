"""AMD Instinct hardware: catalog entries, the Infinity Fabric full-mesh platform, link
classes named by what they are, RCCL's constants, mesh rings and the one-shot all_reduce."""

import itertools

import networkx as nx
import pytest

from simulator.cluster import Cluster
from simulator.collectives.layouts import make_communicator
from simulator.collectives.mesh import hamiltonian_decomposition, mesh_orders, mesh_paths
from simulator.collectives.model import CollectiveModel
from simulator.constants import load_constants
from simulator.errors import ConfigError
from simulator.hardware import SCALE_UP_CLASSES, gpu_spec, link_spec
from simulator.topology.servers import dgx_a100_node, oam_mesh_node

AMD = ("MI300X", "MI325X", "MI350X", "MI355X")
GiB = 1 << 30


def test_amd_catalog_matches_the_data_sheets():
    mi300x, mi355x = gpu_spec("MI300X"), gpu_spec("MI355X")
    # AMD data sheet figures (gpus.yaml sources)
    assert mi300x.peak_flops["bf16"] == pytest.approx(1307.4e12)
    assert mi300x.low_precision_flops["fp8"] == pytest.approx(2614.9e12)
    # marketed GB read as GiB, as the ROCm GPU specifications table lists them
    assert mi300x.hbm_bytes == 192 * GiB and mi300x.hbm_bw_bytes_per_s == pytest.approx(5.3e12)
    assert mi300x.tdp_w == 750 and gpu_spec("MI325X").hbm_bytes == 256 * GiB
    assert mi355x.peak_flops["bf16"] == pytest.approx(2516.6e12) and mi355x.tdp_w == 1400
    for name in AMD:
        spec = gpu_spec(name)
        assert spec.vendor == "amd" and spec.scale_up_class == "infinity_fabric"
        # dense matrix rates: CUs x clock x FLOPs per CU per clock (2048 on CDNA 3, 4096
        # FP16 on CDNA 4), FP8 twice FP16
        per_clock = 2048 if spec.family == "cdna3" else 4096
        assert spec.peak_flops["bf16"] == pytest.approx(
            spec.sm_count * spec.boost_clock_hz * per_clock, rel=1e-3)
        assert spec.low_precision_flops["fp8"] == pytest.approx(
            2 * spec.peak_flops["bf16"], rel=1e-3)
    for name in ("MI350X", "MI355X"):        # MXFP4 and MXFP6: 4x FP16 on CDNA 4
        spec = gpu_spec(name)
        assert spec.low_precision_flops["fp4"] == spec.low_precision_flops["fp6"] == \
            pytest.approx(4 * spec.peak_flops["bf16"], rel=1e-3)
        assert "tf32" not in spec.peak_flops
    assert "fp4" not in gpu_spec("MI300X").low_precision_flops
    assert gpu_spec("H100-SXM").vendor == "nvidia"


def test_infinity_fabric_links_per_direction():
    # 7 links of 128 GB/s bidirectional (MI300X), 153.6 (MI350 series)
    assert link_spec("infinity-fabric-3").bw_bytes_per_s == 64e9
    assert link_spec("infinity-fabric-4").bw_bytes_per_s == pytest.approx(153.6e9 / 2)
    assert "infinity_fabric" in SCALE_UP_CLASSES


def test_oam_mesh_is_a_full_mesh_without_a_switch():
    G = oam_mesh_node(gpu="MI300X")
    gpus = [n for n, k in G.nodes(data="kind") if k == "gpu"]
    mesh = [(u, v) for u, v, d in G.edges(data=True) if d["link_class"] == "infinity_fabric"]
    assert len(gpus) == 8 and len(mesh) == 8 * 7 // 2
    assert all(G.has_edge(a, b) for a, b in itertools.combinations(gpus, 2))
    assert not any(k == "nvswitch" for _, k in G.nodes(data="kind"))
    assert not any(d["link_class"] == "nvlink" for _, _, d in G.edges(data=True))
    assert sum(k == "nic" for _, k in G.nodes(data="kind")) == 8


def test_wrong_server_type_for_the_gpu_is_refused():
    with pytest.raises(ConfigError, match="gpu: .*Infinity Fabric as a full mesh.*oam_mesh"):
        dgx_a100_node(gpu="MI300X")
    with pytest.raises(ConfigError, match="gpu: .*no Infinity Fabric"):
        oam_mesh_node(gpu="H100-SXM")


@pytest.mark.parametrize("n", range(3, 9))
def test_mesh_rings_are_edge_disjoint_hamiltonian_cycles(n):
    cycles = hamiltonian_decomposition(n)
    assert len(cycles) == (n - 1) // 2
    edges = [frozenset(e) for c in cycles for e in zip(c, c[1:] + c[:1])]
    assert all(sorted(c) == list(range(n)) for c in cycles)
    assert len(edges) == len(set(edges)) == n * len(cycles)
    orders = mesh_orders(list(range(n)))
    directed = [(a, b) for o in orders for a, b in zip(o, o[1:] + o[:1])]
    assert len(directed) == len(set(directed)) == 2 * n * len(cycles)


def _model(topology_gpu="MI300X"):
    cluster = Cluster.from_graph(oam_mesh_node(gpu=topology_gpu))
    return CollectiveModel(cluster, load_constants())


def test_ring_on_the_mesh_uses_six_links_per_gpu():
    """8 GiB all_reduce, ring/Simple: 6 rings (3 Hamiltonian cycles both ways), each link
    one ring at 64 GB/s x 0.75 (calibration.yaml infinity_fabric): the flow's rate is
    6 x 48 GB/s of payload 2 (n-1)/n S."""
    m = _model()
    size = 8 * GiB
    plan = m.plan("all_reduce", size, list(range(8)), "ring", "Simple")
    assert plan.payload_bytes == pytest.approx(2 * 7 / 8 * size)
    rate = plan.payload_bytes / (plan.predicted_s - plan.latency_s)
    assert rate == pytest.approx(6 * 64e9 * 0.75, rel=1e-9)


def test_rccl_latency_constants():
    """RCCL's tuning.cc: ring LL base 20.5 us + 2 (n-1) hops of 2.3 us on xGMI, no
    NCCL-fitted protocol latency factor; plus the launch overhead."""
    m = _model()
    k = load_constants()
    plan = m.plan("all_reduce", 8, list(range(8)), "ring", "LL")
    assert plan.latency_s == pytest.approx(k.launch_overhead_s + (20.5 + 14 * 2.3) * 1e-6)


def test_one_shot_wins_small_sizes_on_the_mesh():
    """One-shot: launch + one 2.3 us hop, every link carries the whole buffer."""
    m = _model()
    k = load_constants()
    plan = m.plan("all_reduce", 64 << 10, list(range(8)))
    assert (plan.algo, plan.proto) == ("one_shot", "Simple")
    assert plan.latency_s == pytest.approx(k.launch_overhead_s + 2.3e-6)
    assert plan.predicted_s == pytest.approx(plan.latency_s + (64 << 10) / (64e9 * 0.75))
    assert m.plan("all_reduce", 8 * GiB, list(range(8))).algo == "ring"


def test_one_shot_is_not_offered_on_nvidia():
    m = CollectiveModel(Cluster.from_graph(dgx_a100_node(gpu="H100-SXM")), load_constants())
    assert m.plan("all_reduce", 8, list(range(8))).algo != "one_shot"
    with pytest.raises(ConfigError, match="algo: one_shot is RCCL's"):
        m.plan("all_reduce", 8, list(range(8)), "one_shot")


def test_an_nccl_release_is_refused_on_rccl():
    from simulator.collectives.nccl_config import NcclConfig
    cluster = Cluster.from_graph(oam_mesh_node())
    with pytest.raises(ConfigError, match="nccl.version: .*runs RCCL"):
        CollectiveModel(cluster, load_constants(), NcclConfig(version="2.19"))


def test_graph_helpers_see_the_mesh_as_one_hop():
    c = Cluster.from_graph(oam_mesh_node())
    route = c.route("n0.gpu0", "n0.gpu5")
    assert list(c.link_class[route.links]) == ["infinity_fabric"]
    assert nx.is_connected(c.G)


def test_channels_between_servers_cross_the_mesh_on_disjoint_links():
    """8 channels, one per NIC, each from its NIC's GPU j to the GPU beside it (j ^ 1)
    through all 8 GPUs: 8 x 7 = 56 directed links, every one used once."""
    gpus = [f"g{i}" for i in range(8)]
    ends = [(f"g{j}", f"g{j ^ 1}") for j in range(8)]
    paths = mesh_paths(ends, gpus)
    links = [(a, b) for p in paths for a, b in zip(p, p[1:])]
    assert [(p[0], p[-1]) for p in paths] == ends and all(sorted(p) == gpus for p in paths)
    assert len(links) == len(set(links)) == 56
    # more channels than the mesh has links for: spread, at most 3 on a link for 16
    links16 = [(a, b) for p in mesh_paths(ends + ends, gpus) for a, b in zip(p, p[1:])]
    assert max(links16.count(x) for x in set(links16)) <= 3


def test_two_platforms_all_reduce_is_bound_by_the_nics():
    """2 x 8 MI300X on 8 rails of 400G RoCE: with the channels on disjoint mesh links the
    ring's bottleneck is the NICs (8 x 50 GB/s x net efficiency), not the mesh."""
    from simulator.topology import load_topology, resolve_topology
    k = load_constants()
    c = Cluster.from_graph(load_topology(resolve_topology("mi300x-roce-cluster"), nodes=2))
    plan = CollectiveModel(c, k).plan("all_reduce", 16 * GiB, list(range(16)), "ring", "Simple")
    rate = plan.payload_bytes / (plan.predicted_s - plan.latency_s)
    assert rate == pytest.approx(8 * 50e9 * k.link_efficiency["net"], rel=1e-9)


def test_low_precisions_on_amd():
    """FP8 trains on CDNA 3 and 4; MXFP8 (block-scaled) only on CDNA 4; FP6/FP4 are in the
    catalog of the MI350 series but refused for training (FP4 is MXFP4 there, and only
    Blackwell's NVFP4 is modelled)."""
    from simulator.hardware import check_fp8_recipe, check_training_precision
    for name in AMD:
        check_training_precision(gpu_spec(name), "fp8")
    check_fp8_recipe(gpu_spec("MI355X"), "mxfp8")
    with pytest.raises(ConfigError, match="training.fp8_recipe: MI300X has no block-scaled"):
        check_fp8_recipe(gpu_spec("MI300X"), "mxfp8")
    with pytest.raises(ConfigError, match="training.precision: fp6 training is not modelled"):
        check_training_precision(gpu_spec("MI355X"), "fp6")
    with pytest.raises(ConfigError, match="training.precision: MI355X's FP4 tensor cores run "
                                          "MXFP4"):
        check_training_precision(gpu_spec("MI355X"), "fp4")
    with pytest.raises(ConfigError, match="training.precision: MI300X has no FP4"):
        check_training_precision(gpu_spec("MI300X"), "fp4")
