"""NCCL's per-channel ceilings per GPU architecture (nccl.yaml ``per_channel_ceilings``):
the values of NVIDIA/nccl v2.28.9-1 src/graph/tuning.cc, ncclTunerConstantsDefaults, written
out here as the source prints them, and the collective model applying the row of the GPU's
own architecture (issue 41: the model had capped every GPU's ring LL128 at Ampere's)."""

import math

import pytest

from simulator.cluster import Cluster
from simulator.collectives.model import CollectiveModel, ceiling_row
from simulator.constants import load_constants
from simulator.errors import ConfigError
from simulator.hardware import gpu_names, gpu_spec
from simulator.topology.loader import load_topology, resolve_topology

K = load_constants()
G = 1e9

# tuning.cc v2.28.9-1, (N1, N2, N4) per row
TUNING_CC = {
    "ring_ll128": {"ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 36.7),
                   "blackwell": (2 * 36.7, 34.6, 2 * 36.7)},        # perChMaxRingLL128Bws
    "tree_ll128": {"ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 29.0),
                   "blackwell": (55.6, 31.67, 20.0)},               # perChMaxTreeLL128Bws
    "tree": {"ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0),
             "blackwell": (70.0, 42.8, 24.0)},                      # perChMaxTreeBws
    # llMaxBws: [arch][N1] on one node; across nodes the AMD CPU row {22.5, 19.0}
    "ll": {"ampere": (87.7, 22.5, 19.0), "hopper": (141.0, 22.5, 19.0),
           "blackwell": (2 * 141.0, 22.5, 19.0)},
}


def _model(name, nodes):
    g = load_topology(resolve_topology(name), nodes=nodes if nodes > 1 else None)
    return CollectiveModel(Cluster.from_graph(g, K), K)


@pytest.mark.parametrize("name", sorted(TUNING_CC))
def test_ceilings_are_tuning_cc_2_28(name):
    for arch, row in TUNING_CC[name].items():
        assert K.ceilings[name][arch] == pytest.approx(tuple(v * G for v in row), rel=1e-12)


def test_every_catalog_gpu_has_an_architecture_row():
    rows = K.ceilings["family_row"]
    for gpu in gpu_names():
        assert rows[gpu_spec(gpu).family] in ("ampere", "hopper", "blackwell"), gpu
    # RCCL indexes NCCL's tables by the HIP compute capability (gfx942 9.4, gfx950 9.5):
    # ">= 90" is Hopper's row
    assert rows["cdna3"] == rows["cdna4"] == "hopper"


def test_a_family_without_a_row_is_refused():
    from dataclasses import replace
    volta = replace(gpu_spec("A100-SXM4-80GB"), name="V100", family="volta")
    with pytest.raises(ConfigError, match="family 'volta'"):
        ceiling_row(K, volta)


@pytest.mark.parametrize("topology,nodes,arch", [
    ("dgx-a100", 1, "ampere"), ("dgx-h100", 1, "hopper"), ("aws-p5", 2, "hopper"),
    ("aws-p5", 4, "hopper"), ("dgx-b200-superpod", 2, "blackwell")])
def test_model_takes_its_gpus_row(topology, nodes, arch):
    m = _model(topology, nodes)
    ranks = list(range(8 * nodes))
    comm = m._communicator(ranks)
    i = 0 if nodes == 1 else 1 if nodes == 2 else 2
    ch = K.channels
    ring_ll128 = TUNING_CC["ring_ll128"][arch][i] * G * ch
    # all_gather: not a reducing op, so the A100's 235 GB/s cap does not enter
    assert m._max_rate("ring", "LL128", "all_gather", comm) == pytest.approx(ring_ll128)
    assert m._max_rate("ring", "LL", "all_gather", comm) == pytest.approx(
        TUNING_CC["ll"][arch][i] * G)
    tree = TUNING_CC["tree"][arch][i] * G * ch
    assert m._max_rate("tree", "Simple", "broadcast", comm) == pytest.approx(tree)
    assert m._max_rate("tree", "LL128", "broadcast", comm) == pytest.approx(
        min(tree, TUNING_CC["tree_ll128"][arch][i] * G * ch))
    assert m._max_rate("tree", "LL", "broadcast", comm) == pytest.approx(
        min(tree, TUNING_CC["ll"][arch][i] * G))
    # point-to-point (all_to_all, send/recv) runs NCCL's p2p path: no ring or tree ceiling
    assert m._max_rate("direct", "Simple", "all_to_all", comm) == math.inf


def test_blackwell_two_nodes_ring_ll128_is_34_6_not_twice_hopper():
    m = _model("dgx-b200-superpod", 2)
    comm = m._communicator(list(range(16)))
    assert m._max_rate("ring", "LL128", "all_reduce", comm) == pytest.approx(
        34.6 * G * K.channels)


def test_hopper_ring_ll128_is_no_longer_capped_at_amperes_per_op_ceiling():
    # AWS p5, 4 instances, 1 GiB all_reduce: aws-ofi-nccl's regions choose ring/LL128 (as the
    # run did, measured 280.3 GB/s). The old ceiling, 2.7-era ll128MaxBwPerCh[all_reduce]
    # 16.9 GB/s x 16 channels = 270.4 GB/s, held it at 251 GB/s; Hopper's 36.7 x 16 does
    # not bind, and the simulated bus bandwidth passes the old cap.
    m = _model("aws-p5", 4)
    size = 1 << 30
    plan = m.plan("all_reduce", size, list(range(32)))
    assert (plan.algo, plan.proto) == ("ring", "LL128")
    assert plan.max_rate == pytest.approx(36.7 * G * 16)
    busbw = size / plan.predicted_s * 2 * 31 / 32 / G
    assert busbw > 16.9 * 16


def _ring_ll128_errors(k):
    """busbw error of every held-out AWS p5 all_reduce row (4-32 instances) that aws-ofi-nccl's
    regions run as ring/LL128, simulated with constants ``k``."""
    from pathlib import Path

    from simulator.collectives.run import run_collective
    from simulator.validation.collectives.data_aws import aws_heldout_rows

    root = Path(__file__).resolve().parents[1] / "validation" / "collectives"
    rows = [r for r in aws_heldout_rows(root) if r["nodes"] >= 4]
    models, errors = {}, []
    for r in rows:
        nodes, size, n = r["nodes"], r["size_bytes"], r["ranks"]
        if nodes not in models:
            g = load_topology(resolve_topology("aws-p5"), nodes=nodes)
            models[nodes] = CollectiveModel(Cluster.from_graph(g, k), k)
        plan = models[nodes].plan("all_reduce", size, list(range(n)))
        if (plan.algo, plan.proto) != ("ring", "LL128"):
            continue
        res = run_collective(models[nodes], "all_reduce", size, list(range(n)),
                             algo="ring", proto="LL128")
        errors.append(size / res.time_s * 2 * (n - 1) / n / G / r["busbw_GBps"] - 1)
    return errors


def test_p5_ring_ll128_all_reduce_before_and_after_hoppers_ceiling():
    """docs/collective-model.md: the p5 all_reduce rows that run ring/LL128 were 9-27% slow
    under NCCL 2.7's Ampere ceiling for all_reduce (16.9 GB/s per channel), 0-22% slow under
    NCCL 2.28's Hopper row (36.7); nothing fitted."""
    old = {**K.ceilings, "ring_ll128": {**K.ceilings["ring_ll128"],
                                        "hopper": (16.9 * G,) * 3}}
    # with the EFA constants of that change (efficiency 0.8177, one 8.976 us step cost for
    # every protocol; refitted since, when NCCL's own protocol choice entered the model)
    then = K.replace(link_efficiency={**K.link_efficiency, "efa-v2": 0.8177},
                     net_message_us={"efa-v2": 8.976}, net_ll_message_us={"efa-v2": 8.976})
    for k, (lo, hi) in ((then.replace(ceilings=old), (9, 27)), (then, (0, 22))):
        err = _ring_ll128_errors(k)
        assert len(err) == 14 and max(err) <= 0
        assert (round(-max(err) * 100), round(-min(err) * 100)) == (lo, hi)
