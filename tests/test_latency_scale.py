"""The 8 B all_reduce across 2-32 servers: what grows and why (docs/collective-model.md,
"Latency across servers"). The tuner picks tree LL at every size and costs each doubling
of servers at NCCL's own 2 x hwLat[NET][Tree][LL] (5.0 us, every release table); the ring,
linear in the rank count, is never the lower one. The plan is timed with one ring-like
network step up and one down per level of the tree's real depth (hwLat[NET][Ring][LL],
2.7 us), so each doubling adds 5.4 us, not 10."""

import pytest

from simulator.cluster import Cluster
from simulator.constants import load_constants
from simulator.collectives.layouts import btree_parent, make_communicator
from simulator.collectives.model import CollectiveModel
from simulator.collectives.nccl_config import NcclConfig
from simulator.collectives.tree_latency import timing_correction_s, tree_depth
from simulator.topology import load_topology, resolve_topology

K = load_constants()
NODES = (2, 4, 8, 16, 32)


def _model(nodes, **nccl):
    G = load_topology(resolve_topology("dgx-a100-superpod"), nodes=nodes)
    return CollectiveModel(Cluster.from_graph(G, K), K, NcclConfig(**nccl))


@pytest.mark.parametrize("nccl", [{}, {"version": "2.19"}, {"version": "2.28"}])
def test_each_doubling_of_servers_adds_two_network_hops_of_the_tree(nccl):
    tuner, timed = [], []
    for nodes in NODES:
        m = _model(nodes, **nccl)
        ranks = list(range(m.cluster.n_gpus))
        plan = m.plan("all_reduce", 8, ranks)
        assert (plan.algo, plan.proto) == ("tree", "LL")
        comm = make_communicator(m.cluster, ranks)
        ring = m.latency_s("all_reduce", "ring", "LL", comm, "nvlink", 8)
        tree = m.latency_s("all_reduce", "tree", "LL", comm, "nvlink", 8)
        assert ring > tree                    # the tuner's choice is the lower one
        tuner.append(tree)
        timed.append(plan.latency_s)
    hop = m.k.hop_latency_s["net"]["tree"]["LL"]
    step = m.k.hop_latency_s["net"]["ring"]["LL"]
    assert (hop, step) == (pytest.approx(5.0e-6), pytest.approx(2.7e-6))
    for a, b in zip(tuner, tuner[1:]):
        assert b - a == pytest.approx(2 * hop)      # NCCL's tuner: +10 us per doubling
    for a, b in zip(timed, timed[1:]):
        assert b - a == pytest.approx(2 * step)     # timed: +5.4 us per doubling
    assert timed[0] == pytest.approx(tuner[0])      # 2 servers: the calibrated level only


def _depth_by_walk(n, parent):
    def up(r):
        return 0 if parent(r) < 0 else 1 + up(parent(r))
    return max(up(r) for r in range(n))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 12, 16, 33])
def test_tree_depth_is_ncclgetbtree_depth_ceil_log2(n):
    assert tree_depth(n) == _depth_by_walk(n, lambda r: btree_parent(r, n))
    assert tree_depth(n) == (n - 1).bit_length()            # ceil(log2 n)


def test_correction_arithmetic_and_protocols():
    k = K
    # 16 servers, LL: 2 x (4 - 1) x 2.7 us timed against 2 x (4 - 1) x 5.0 us tuned.
    assert timing_correction_s(k, "LL", 16) == pytest.approx(2 * 3 * (2.7e-6 - 5.0e-6))
    # 3 servers: the real tree is 2 levels deep, NCCL's tuner counts log2(3).
    assert timing_correction_s(k, "LL128", 3) == pytest.approx(
        2 * 1 * 4.0e-6 - 2 * (1.584962500721156 - 1) * 8.5e-6)
    assert timing_correction_s(k, "Simple", 16) == 0.0      # Simple: NCCL's tree term
    assert timing_correction_s(k, "LL", 2) == 0.0


def test_choice_is_the_tuners_not_the_timing():
    m = _model(16)
    ranks = list(range(m.cluster.n_gpus))
    for size in (8, 4096, 65536, 1 << 20, 1 << 24):
        plan = m.plan("all_reduce", size, ranks)
        comm = make_communicator(m.cluster, ranks)
        best = min(((a, p) for a in ("ring", "tree") for p in ("LL", "LL128", "Simple")),
                   key=lambda ap: m._plan_one("all_reduce", *ap, comm, size, 0, ranks)[1])
        assert (plan.algo, plan.proto) == best


# --------------------------------------------- the quoted times (collective-model, accuracy)
def _times_us(**nccl) -> list[float]:
    """The 8 B all_reduce at 2-32 servers as `clustersim collective` times it."""
    from simulator.collectives.run import run_collective
    out = []
    for nodes in NODES:
        m = _model(nodes, **nccl)
        ranks = list(range(m.cluster.n_gpus))
        plan = m.plan("all_reduce", 8, ranks)
        out.append(run_collective(m, "all_reduce", 8, ranks, plan.algo, plan.proto).time_s * 1e6)
    return out


def test_the_docs_quote_these_times():
    """docs/collective-model.md's table and versions, docs/accuracy.md's sequence; "before"
    (the tuner's term taken as the time) is the 2-server time + 10 us per doubling."""
    from pathlib import Path
    docs = Path(__file__).resolve().parents[1] / "docs"
    model = " ".join((docs / "collective-model.md").read_text().split())
    accuracy = " ".join((docs / "accuracy.md").read_text().split())
    after, v219, v228 = _times_us(), _times_us(version="2.19"), _times_us(version="2.28")
    assert [f"{t:.2f}" for t in v219] == [f"{t:.2f}" for t in v228]

    def seq(times):
        return " / ".join(f"{t:.2f}" for t in times)

    def before(times):
        return [times[0] + 10 * k for k in range(len(times))]
    for n, b, a in zip(NODES, before(after), after):
        assert f"| {n} | {b:.2f} | {a:.2f} |" in model, n
    assert f"NCCL 2.19/2.28 tables: {seq(v219)} us (before {seq(before(v219))})" in model
    assert (f"takes {after[0]:.2f} us at 2 servers by default and with `--nccl-version 2.7`, "
            f"{v219[0]:.2f} us with 2.19 or 2.28" in model)
    assert " / ".join(f"{t:.0f}" for t in before(after)) + " us at 2 / 4 / 8 / 16 / 32" in model
    assert (f"takes {seq(after)} us at 2 / 4 / 8 / 16 / 32 servers (before: "
            f"{seq(before(after))})" in accuracy)
