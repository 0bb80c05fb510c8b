"""Link latency what-ifs (``links.<type>.latency``, ``cluster.links.<type>.latency``) in
every collective, transfer and training step, against the alpha-beta arithmetic.

NCCL's hop latencies (data/nccl.yaml) were measured on the catalog's links, so a what-if
adds only the difference from the catalog latency (data/links.yaml: nvlink3 0.25 us,
pcie-gen4-x16 0.5 us, ib-hdr 0.3 us per hop), per link of the route, times the steps of
the algorithm's critical path as the model counts them:

* ring all_reduce: 2(n-1) steps, of which 2 x nodes cross servers (all, one GPU per node);
* ring all_gather / reduce_scatter: n-1 steps, nodes-1 crossing;
* tree: 2 ((ppn-1) steps inside a server + log2(nodes) between servers);
* direct (send_recv, all_to_all): one route.

Routes on the SuperPOD fabric: GPU-NVSwitch-GPU inside a DGX is 2 nvlink3 links; GPU to
GPU of another DGX is 2 PCIe + 2 ib-hdr (NIC-leaf-NIC, same scalable unit of 20 nodes) or
2 PCIe + 4 ib-hdr (through a spine) + 2 PCIe.
"""

from __future__ import annotations

import json
import math

import pytest

from simulator.constants import load_constants
from simulator.collectives.host import host_flow
from simulator.collectives.layouts import make_communicator
from simulator.collectives.model import CollectiveModel
from simulator.collectives.run import run_collective
from simulator.engine import replay
from simulator.study import load_study
from simulator.study.commands import evaluate
from simulator.topology.build import load_cluster
from simulator.trace import Op, RankClass, Trace
from test_cli import run_main

US = 1e-6
IB_CATALOG_S = 0.3 * US
NV_CATALOG_S = 0.25 * US
PCIE_CATALOG_S = 0.5 * US


def model(topology="dgx-a100", nodes=None, links=None, constants=None):
    k = constants or load_constants()
    return CollectiveModel(load_cluster(topology, nodes=nodes, links=links, constants=k), k)


def ib(latency: str) -> dict:
    return {"ib-hdr": {"latency": latency}}


def nv(latency: str) -> dict:
    return {"nvlink3": {"latency": latency}}


def simulated_s(m, op, size, ranks, algo, proto):
    return run_collective(m, op, size, ranks, algo, proto).time_s


def test_no_what_if_adds_exactly_nothing():
    m = model("dgx-a100-superpod", nodes=2)
    c = m.cluster
    assert not c.has_extra_latency and not c.extra_latency_s.any()
    assert (c.catalog_latency_s == c.latency_s).all()
    plan = m.plan("all_reduce", 8, list(range(16)), "ring", "LL")
    comm = make_communicator(c, list(range(16)))
    # bit for bit NCCL's latency: nothing added, not even 0.0 through a floor
    assert plan.latency_s == m.latency_s("all_reduce", "ring", "LL", comm, "nvlink", 8)


@pytest.mark.parametrize("nodes", [2, 4])
def test_ring_all_reduce_grows_by_inter_steps_x_hops_x_delta(nodes):
    # 8-byte ring LL all_reduce on all 8 x nodes GPUs, ib-hdr at 20 us per hop:
    # nInterSteps = 2 x nodes; each crossing is GPU-PCIe-NIC-leaf-NIC-PCIe-GPU, 2 ib-hdr hops:
    # extra = 2 nodes x 2 x (20 - 0.3) us = 157.6 us (2 nodes), 315.2 us (4 nodes)
    ranks = list(range(8 * nodes))
    base = model("dgx-a100-superpod", nodes)
    slow = model("dgx-a100-superpod", nodes, ib("20 us"))
    expected = 2 * nodes * 2 * (20 * US - IB_CATALOG_S)
    assert expected == pytest.approx({2: 157.6, 4: 315.2}[nodes] * US)
    p0 = base.plan("all_reduce", 8, ranks, "ring", "LL")
    p1 = slow.plan("all_reduce", 8, ranks, "ring", "LL")
    assert p1.latency_s - p0.latency_s == pytest.approx(expected, rel=1e-9)
    assert (simulated_s(slow, "all_reduce", 8, ranks, "ring", "LL")
            - simulated_s(base, "all_reduce", 8, ranks, "ring", "LL")) == pytest.approx(
                expected, rel=1e-9)


def test_ring_with_one_gpu_per_node_crosses_the_network_every_step():
    # ranks 0, 8, 16, 24: one GPU on each of 4 nodes; all 2(n-1) = 6 steps cross servers,
    # each over 2 ib-hdr hops: extra = 6 x 2 x (5 - 0.3) us = 56.4 us
    ranks = [0, 8, 16, 24]
    base = model("dgx-a100-superpod", 4)
    slow = model("dgx-a100-superpod", 4, ib("5 us"))
    d = (slow.plan("all_reduce", 8, ranks, "ring", "LL").latency_s
         - base.plan("all_reduce", 8, ranks, "ring", "LL").latency_s)
    assert d == pytest.approx(6 * 2 * (5 * US - IB_CATALOG_S), rel=1e-9)
    assert d == pytest.approx(56.4 * US, rel=1e-9)


def test_tree_all_reduce_grows_by_2_log2_nodes_x_hops_x_delta():
    # the issue's input: 8-byte all_reduce on 4 DGX with ib-hdr at 1000 us per hop (the
    # shipped topology gave the same time as without it). The tuner picks tree/LL and keeps
    # it; extra = 2 x log2(4) x 2 hops x 999.7 us = 7997.6 us, all of it latency (8 bytes
    # take the same transfer time on either fabric)
    ranks = list(range(32))
    base = model("dgx-a100-superpod", 4)
    slow = model("dgx-a100-superpod", 4, ib("1000 us"))
    p0, p1 = base.plan("all_reduce", 8, ranks), slow.plan("all_reduce", 8, ranks)
    assert (p0.algo, p0.proto) == (p1.algo, p1.proto) == ("tree", "LL")
    assert p1.latency_s - p0.latency_s == pytest.approx(2 * 2 * 2 * 999.7 * US, rel=1e-9)
    assert p1.predicted_s - p0.predicted_s == pytest.approx(2 * 2 * 2 * 999.7 * US, rel=1e-9)


def test_all_gather_and_reduce_scatter_grow_by_nodes_minus_1_crossings():
    # ring all_gather on 4 DGX: nodes - 1 = 3 steps cross servers, 2 ib-hdr hops each:
    # extra = 3 x 2 x (20 - 0.3) us = 118.2 us
    ranks = list(range(32))
    base = model("dgx-a100-superpod", 4)
    slow = model("dgx-a100-superpod", 4, ib("20 us"))
    for op in ("all_gather", "reduce_scatter"):
        d = (slow.plan(op, 1024, ranks, "ring", "LL").latency_s
             - base.plan(op, 1024, ranks, "ring", "LL").latency_s)
        assert d == pytest.approx(118.2 * US, rel=1e-9), op


def test_nvlink_what_if_on_one_dgx():
    # 8 GPUs of one DGX A100, nvlink3 at 2 us per hop; GPU-NVSwitch-GPU = 2 hops:
    # ring all_reduce 2(8-1) = 14 steps: 14 x 2 x (2 - 0.25) us = 49 us;
    # tree: 2 x (ppn - 1) = 14 steps inside the server: also 49 us;
    # ring all_gather 7 steps: 24.5 us; send_recv one route: 2 x 1.75 = 3.5 us
    ranks = list(range(8))
    base, slow = model(), model(links=nv("2 us"))
    delta = 2 * (2 * US - NV_CATALOG_S)
    for op, algo, steps in (("all_reduce", "ring", 14), ("all_reduce", "tree", 14),
                            ("all_gather", "ring", 7)):
        d = (slow.plan(op, 8, ranks, algo, "LL").latency_s
             - base.plan(op, 8, ranks, algo, "LL").latency_s)
        assert d == pytest.approx(steps * delta, rel=1e-9), (op, algo)
    d = slow.plan("send_recv", 8, [0, 1]).latency_s - base.plan("send_recv", 8, [0, 1]).latency_s
    assert d == pytest.approx(delta, rel=1e-9) and d == pytest.approx(3.5 * US, rel=1e-9)


def test_send_recv_and_all_to_all_cross_one_route():
    # ib-hdr at 10 us (9.7 us over the catalog). send_recv GPU 0 of node 0 -> GPU 0 of
    # node 1: one rail, NIC-leaf-NIC, 2 hops: 19.4 us. all_to_all on both nodes: the slowest
    # pair is GPU i -> GPU j != i of the other node, rail i to rail j through a spine,
    # 4 hops: 38.8 us.
    base = model("dgx-a100-superpod", 2)
    slow = model("dgx-a100-superpod", 2, ib("10 us"))
    for op, ranks, hops in (("send_recv", [0, 8], 2), ("all_to_all", list(range(16)), 4)):
        d = slow.plan(op, 64, ranks).latency_s - base.plan(op, 64, ranks).latency_s
        assert d == pytest.approx(hops * 9.7 * US, rel=1e-9), op


def test_engine_send_recv_pays_the_extra_on_each_message():
    # rank 0 sends 8 bytes to rank 8 (another DGX), then rank 8 sends them back: two
    # one-way transfers, each 2 ib-hdr hops: the round trip grows by 2 x 2 x 9.7 us = 38.8 us
    def ping_pong(world):
        send = lambda i, peer: Op(i, "p2p", "send", f"s{i}", size_bytes=8, peer=peer)  # noqa: E731
        recv = lambda i, peer: Op(i, "p2p", "recv", f"r{i}", size_bytes=8, peer=peer)  # noqa: E731
        idle = tuple(r for r in range(world) if r not in (0, 8))
        return Trace(world, [RankClass("a", (0,), [send(0, 8), recv(1, 8)]),
                             RankClass("b", (8,), [recv(0, 0), send(1, 0)]),
                             RankClass("idle", idle, [])], {})

    class NoCompute:
        def op_time_s(self, *args):
            return 0.0

    times = [replay(ping_pong(16), m, NoCompute()).iteration_time_s
             for m in (model("dgx-a100-superpod", 2), model("dgx-a100-superpod", 2, ib("10 us")))]
    assert times[1] - times[0] == pytest.approx(38.8 * US, rel=1e-9)


def test_star_and_host_copies_take_their_route_latency():
    # Copies are not NCCL: their latency is the route's own (already the links' sum), so a
    # what-if moves them by hops x delta. Star reduce on one DGX with nvlink3 at 2 us:
    # launch + the longest route, GPU-NVSwitch-GPU: 2 x (2 - 0.25) us = 3.5 us more.
    base, slow = model(), model(links=nv("2 us"))
    d = (slow.plan("reduce", 1024, list(range(8)), "star").latency_s
         - base.plan("reduce", 1024, list(range(8)), "star").latency_s)
    assert d == pytest.approx(3.5 * US, rel=1e-9)
    # GPU 0 to its host CPU: GPU-PCIe switch-CPU, 2 pcie-gen4 hops at 3 us: 2 x 2.5 us
    base, slow = model(), model(links={"pcie-gen4-x16": {"latency": "3 us"}})
    d = (host_flow(slow.cluster, 0, 0, 1024, True).latency_s
         - host_flow(base.cluster, 0, 0, 1024, True).latency_s)
    assert d == pytest.approx(5.0 * US, rel=1e-9)


def test_faster_links_take_off_hop_latency_but_never_the_base(ideal_constants):
    k = ideal_constants                       # protocol latency factors 1
    ranks = list(range(8))
    # nvlink3 at 0 us on one DGX, ring LL all_reduce: 14 steps x 2 hops x -0.25 us = -7 us,
    # more than NCCL's hop latencies there (14 x 0.47 us = 6.58 us): the latency stops at
    # launch + baseLat[ring][LL] = 4.359 + 3.6 us = 7.959 us (not 14.539 - 7 = 7.539 us)
    nccl = model(constants=k).plan("all_reduce", 8, ranks, "ring", "LL").latency_s
    assert nccl == pytest.approx((4.359 + 3.6 + 14 * 0.47) * US)
    fast = model(links=nv("0 us"), constants=k).plan("all_reduce", 8, ranks, "ring", "LL")
    assert fast.latency_s == pytest.approx((4.359 + 3.6) * US, rel=1e-12)
    # ib-hdr at 0 us on 2 DGX: 4 crossings x 2 hops x -0.3 us = -2.4 us, above the floor
    ranks = list(range(16))
    d = (model("dgx-a100-superpod", 2, ib("0 us"), k).plan("all_reduce", 8, ranks, "ring",
                                                          "LL").latency_s
         - model("dgx-a100-superpod", 2, constants=k).plan("all_reduce", 8, ranks, "ring",
                                                           "LL").latency_s)
    assert d == pytest.approx(-2.4 * US, rel=1e-9)


def test_the_tuner_cannot_see_link_latency():
    # NCCL's IB and socket transports report no latency to the tuner (props->latency = 0),
    # so the choice is the same however slow the links are; only the time moves.
    ranks = list(range(32))
    base = model("dgx-a100-superpod", 4)
    slow = model("dgx-a100-superpod", 4, ib("1000 us"))
    for size in (8, 1 << 16, 1 << 22, 1 << 28):
        p0, p1 = base.plan("all_reduce", size, ranks), slow.plan("all_reduce", size, ranks)
        assert (p0.algo, p0.proto) == (p1.algo, p1.proto), size
        assert p1.predicted_s > p0.predicted_s


# ------------------------------------------------------------------ scenario and training
DDP = ["resnet50-ddp-8gpu", "--format", "json"]


def test_scenario_latency_what_if_moves_a_ddp_step_by_one_exposed_all_reduce(capsys):
    # ResNet-50 DDP on one DGX: every gradient bucket but the last overlaps the backward
    # pass, so the step grows by the extra of one all_reduce on 8 GPUs of one server. Ring
    # and tree both take 14 steps inside the server (2(n-1); 2(ppn-1)), over 2 nvlink3 hops:
    # 14 x 2 x (5 - 0.25) us = 133 us, on the step and on the exposed communication.
    _, out0, _ = run_main(capsys, "run", *DDP)
    code, out1, err = run_main(capsys, "run", *DDP, "--set",
                               "cluster.links={nvlink3: {latency: 5 us}}")
    assert code == 0, err
    m0, m1 = json.loads(out0), json.loads(out1)
    assert m1["iteration_time_s"] - m0["iteration_time_s"] == pytest.approx(133 * US, rel=1e-6)
    assert m1["exposed_comm_s"] - m0["exposed_comm_s"] == pytest.approx(133 * US, rel=1e-6)


def test_the_issue_run_what_if_changes_the_step(capsys):
    # quickstart (FSDP, one DGX) with nvlink3 at 1000 us gave exactly the default step
    small = ["--format", "json", "--set", "training.seq_len=1024",
             "--set", "training.micro_batch=1"]
    _, out0, _ = run_main(capsys, "run", *small)
    _, out1, _ = run_main(capsys, "run", *small, "--set",
                          "cluster.links={nvlink3: {latency: 1000 us}}")
    assert json.loads(out1)["iteration_time_s"] > json.loads(out0)["iteration_time_s"] + 1e-3


@pytest.mark.parametrize("value", ["1e999 s", "1e999 us"])
def test_a_non_finite_latency_is_one_line(capsys, value):
    code, _, err = run_main(capsys, "run", "--set",
                            f"cluster.links={{nvlink3: {{latency: {value}}}}}")
    err = err.strip()
    assert code == 2 and "\n" not in err and err.startswith("clustersim: error: ")
    assert "quickstart.yaml" in err          # the scenario the --set applies to
    assert err.endswith(f"cluster.links.nvlink3.latency: must be finite, got '{value}'")


# ------------------------------------------------------------------------ the study
def _hops(nodes: int) -> int:
    # ib-hdr hops between two DGX: one scalable unit (20 nodes): NIC-leaf-NIC; beyond it
    # some tree edges go NIC-leaf-spine-leaf-NIC
    return 2 if nodes <= 20 else 4


def _study_grid():
    study = load_study("link-latency")
    grid = study.spec.axes.grid
    latencies, nodes = grid["cluster.links.ib-hdr.latency"], grid["cluster.nodes"]
    assert latencies == ["0.3 us", "1 us", "5 us", "20 us"] and nodes == [16, 32, 64, 128]
    return study, latencies, nodes


def test_link_latency_study_moves_small_all_reduce_by_the_formula():
    # 8-byte all_reduce on every GPU at each point of the study; the tuner picks tree/LL
    # everywhere: extra = 2 x log2(nodes) x hops x (L - 0.3 us), e.g. at 128 nodes and
    # 20 us: 2 x 7 x 4 x 19.7 us = 1103.2 us (81.3 us -> 1184.5 us: docs/studies.md)
    _, latencies, node_counts = _study_grid()
    k = load_constants()
    for nodes in node_counts:
        ranks = list(range(8 * nodes))
        base = model("dgx-a100-superpod", nodes, constants=k).plan("all_reduce", 8, ranks)
        assert (base.algo, base.proto) == ("tree", "LL")
        for lat in latencies[1:]:
            plan = model("dgx-a100-superpod", nodes, ib(lat), k).plan("all_reduce", 8, ranks)
            delta = float(lat.split()[0]) * US - IB_CATALOG_S
            expected = 2 * math.log2(nodes) * _hops(nodes) * delta
            assert plan.predicted_s - base.predicted_s == pytest.approx(expected, rel=1e-9)
    assert 2 * 7 * 4 * 19.7 * US == pytest.approx(1103.2 * US)


@pytest.mark.parametrize("nodes", [16, 32])
def test_link_latency_study_step_grows_by_one_exposed_tree_all_reduce(nodes):
    # Two points of the shipped study (ResNet-50 DDP, micro-batch 32): the last bucket's
    # all_reduce (tree) is exposed after the backward pass, the others overlap it, so
    # the step grows by 2 log2(nodes) x hops x (20 - 0.3) us:
    # 16 nodes: 2 x 4 x 2 x 19.7 us = 315.2 us; 32 nodes: 2 x 5 x 4 x 19.7 us = 788 us
    study, _, _ = _study_grid()
    points = {(p["params"]["cluster.links.ib-hdr.latency"], p["params"]["cluster.nodes"]): p
              for p in study.points}
    (r0,), (r1,) = evaluate(points["0.3 us", nodes]), evaluate(points["20 us", nodes])
    expected = 2 * math.log2(nodes) * _hops(nodes) * (20 * US - IB_CATALOG_S)
    assert expected == pytest.approx({16: 315.2, 32: 788.0}[nodes] * US)
    assert r1["iteration_time_s"] - r0["iteration_time_s"] == pytest.approx(expected, rel=1e-6)
    assert r1["exposed_comm_s"] - r0["exposed_comm_s"] == pytest.approx(expected, rel=1e-6)
