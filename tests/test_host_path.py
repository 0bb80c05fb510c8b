"""NCCL before PXN (2.12): a GPU whose NIC is off its PCIe switch reaches it through the CPU
(host-staged, GPUDirect RDMA off), at 9/12 of the links' rate through one CPU and 6/12
across the socket (NVIDIA/nccl#406; data/nccl.yaml host_path_fraction); 2.12+ borrows the
NVLink of the GPU next to the NIC (the default routes)."""

import numpy as np
import pytest
import yaml

from simulator.cluster import Cluster
from simulator.collectives import layouts
from simulator.constants import load_constants, read_data
from simulator.collectives.host_path import load_host_path, nic_part
from simulator.collectives.layouts import make_communicator
from simulator.collectives.model import CollectiveModel
from simulator.collectives.nccl_config import NcclConfig
from simulator.collectives.nics import home_nic
from simulator.topology import resolve_topology
from simulator.topology.loader import topology_from_dict

K = load_constants()
ACROSS = [2, 2, 2, 2, 3, 3, 3, 3]      # every NIC on cpu1's PCIe switches
SAME_CPU = [1, 1, 1, 1, 3, 3, 3, 3]    # pcie0's NICs moved to pcie1 (also under cpu0)


def cluster(nic_pcie=None, nodes=2):
    data = yaml.safe_load(open(resolve_topology("dgx-a100-superpod")))
    if nic_pcie:
        data.setdefault("params", {}).setdefault("node", {})["nic_pcie"] = nic_pcie
    return Cluster.from_graph(topology_from_dict(data, source="t", nodes=nodes), K)


def classes(c, route):
    return set(c.link_class[route.links])


def test_fractions_and_release_come_from_the_data_file():
    f = read_data("nccl.yaml")["host_path_fraction"]
    hp = load_host_path()
    assert (hp.through_cpu, hp.across_socket) == (f["through_cpu"], f["across_socket"])
    assert (hp.through_cpu, hp.across_socket) == (9 / 12, 6 / 12)    # nccl#406's 12 / 9 / 6
    assert not NcclConfig(version="2.11").has_pxn()
    assert NcclConfig(version="2.12").has_pxn() and NcclConfig().has_pxn()


@pytest.mark.parametrize("placement, fraction, crosses", [(ACROSS, 0.5, True),
                                                          (SAME_CPU, 0.75, False)])
def test_a_nic_off_the_switch_is_reached_through_the_cpu(placement, fraction, crosses):
    c = cluster(placement)
    gpu = c.gpus[0]
    nic = home_nic(c, gpu)
    pxn, _ = nic_part(c, gpu, nic, None)
    assert "nvlink" in classes(c, pxn)                    # 2.12+: over another GPU's NVLink
    route, wire = nic_part(c, gpu, nic, load_host_path())
    assert "nvlink" not in classes(c, route)
    assert ("cpu" in classes(c, route)) is crosses        # the socket link (xGMI) or not
    assert list(route.coef) == pytest.approx(list(wire / fraction))
    back, _ = nic_part(c, nic, gpu, load_host_path())     # the receive side, reversed
    assert sorted(back.coef) == pytest.approx(sorted(route.coef))


def test_a_nic_on_the_gpus_own_switch_is_unchanged():
    c = cluster()
    gpu = c.gpus[0]
    nic = home_nic(c, gpu)
    route, wire = nic_part(c, gpu, nic, load_host_path())
    same = c.route(gpu, nic)
    assert list(route.links) == list(same.links) and list(wire) == list(same.coef)


def _rate(m, ranks):
    p = m.plan("send_recv", 1 << 30, ranks)
    return p.payload_bytes / (p.predicted_s - p.latency_s)


def test_send_across_the_socket_runs_at_half_the_pcie_rate():
    # GPU 0 of server 0 -> GPU 0 of server 1, both with their NIC across the socket. With
    # PXN the bottleneck is the HDR port; without, the host path's PCIe links at 6/12.
    c = cluster(ACROSS)
    new, old = (CollectiveModel(c, K, NcclConfig(version=v)) for v in ("2.12", "2.11"))
    ranks = [0, 8]
    pcie = min(c.capacity_bytes_per_s[c.link_class == "pcie"])
    net = min(c.capacity_bytes_per_s[c.link_class == "net"])
    assert 0.5 * pcie < net
    assert _rate(old, ranks) / _rate(new, ranks) == pytest.approx(0.5 * pcie / net)


def test_default_placement_is_the_same_with_or_without_pxn():
    c = cluster()
    ranks = list(range(16))
    for op, size in (("all_reduce", 1 << 30), ("all_to_all", 1 << 24), ("all_reduce", 8)):
        a = CollectiveModel(c, K, NcclConfig(version="2.12")).plan(op, size, ranks)
        b = CollectiveModel(c, K, NcclConfig(version="2.11")).plan(op, size, ranks)
        assert a.predicted_s == pytest.approx(b.predicted_s, rel=1e-12)


def test_cross_socket_nics_slow_an_all_reduce_only_without_pxn():
    c = cluster(ACROSS)
    ranks = list(range(16))
    t = {v: CollectiveModel(c, K, NcclConfig(version=v)).plan("all_reduce", 1 << 30,
                                                               ranks).predicted_s
         for v in ("2.11", "2.12")}
    assert t["2.11"] > 2 * t["2.12"]


def test_the_host_path_is_taken_only_where_a_gpu_borrows_nvlink_to_its_nic():
    old = NcclConfig(version="2.11")
    assert CollectiveModel(cluster(ACROSS), K, old).host_path == load_host_path()
    assert CollectiveModel(cluster(), K, old).host_path is None      # default placement
    assert CollectiveModel(cluster(ACROSS), K, NcclConfig()).host_path is None   # PXN


@pytest.mark.parametrize("build", ["ring", "tree", "direct"])
def test_host_path_layouts_are_built_edge_by_edge(build):
    c = cluster(ACROSS, nodes=3)
    comm = make_communicator(c, list(range(c.n_gpus)))
    hp = load_host_path()
    edges = {"ring": lambda: layouts.ring_edges(c, comm, None, 1.0, hp),
             "tree": lambda: layouts.tree_edges(c, comm, 1.0, hp),
             "direct": lambda: layouts.direct_edges(c, comm, None, 1.0, hp)}[build]()
    links, coef = edges.arrays()
    wire = edges.wire_coef()
    assert (coef > wire + 1e-12).any()      # host-staged links take 1 / fraction per byte
    cpu = c.link_class[links] == "cpu"
    assert wire[cpu].sum() > 0              # and the bytes cross the socket link


def test_send_recv_pair_plans_take_the_host_path_too():
    # the pipeline's batched send/recv plans (collectives/pairs.py) read routes off server
    # blocks that know no host path: without PXN every pair is planned on its own
    c = cluster(ACROSS, nodes=4)
    pairs = [(r, r + 8) for r in range(8)] + [(8, 16), (16, 24)]   # shapes seen before
    old = CollectiveModel(c, K, NcclConfig(version="2.11"))
    got = old.plan_pairs(1 << 26, pairs)
    want = [CollectiveModel(c, K, NcclConfig(version="2.11")).plan("send_recv", 1 << 26,
                                                                   [a, b]) for a, b in pairs]
    assert [g.predicted_s for g in got] == [w.predicted_s for w in want]
    new = CollectiveModel(c, K, NcclConfig(version="2.12")).plan_pairs(1 << 26, pairs)
    assert got[0].predicted_s > new[0].predicted_s          # GPU 0's NIC is across the socket
    assert all(g.predicted_s >= n.predicted_s for g, n in zip(got, new))


def test_the_busbw_figures_docs_collective_model_quotes():
    """1 GiB all_reduce on 2 DGX A100 (16 ranks), busbw = 2 (n - 1) / n x bytes / time: every
    NIC under cpu1 with PXN (2.21) and without (2.11), and the default placement."""
    from pathlib import Path
    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "collective-model.md")
                    .read_text().split())
    ranks, size = list(range(16)), 1 << 30

    def busbw(c, version):
        t = CollectiveModel(c, K, NcclConfig(version=version)).plan("all_reduce", size,
                                                                     ranks).predicted_s
        return 2 * 15 / 16 * size / t / 1e9
    pxn, no_pxn = busbw(cluster(ACROSS), "2.21"), busbw(cluster(ACROSS), "2.11")
    default = busbw(cluster(), "2.21")
    assert (f"reaches {pxn:.0f} GB/s busbw with PXN (2.21) and {no_pxn:.1f} GB/s without (2.11), "
            f"against {default:.0f} GB/s on the default placement" in page)
