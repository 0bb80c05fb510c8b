"""Collectives against closed-form oracles, NCCL's rules, and contention."""

import pytest

from simulator.collectives.layouts import dtree_parent
from simulator.collectives.model import bus_factor
from simulator.collectives.run import run_collective, simulate_plans
from conftest import GB, make_model, star_graph

S = 1 << 30  # 1 GiB


def bw_time(model, op, ranks, size=S, algo="ring", proto="Simple", fidelity="flow"):
    """Simulated time minus the model's latency: the bandwidth part alone."""
    plan = model.plan(op, size, ranks, algo, proto)
    (end,), _ = simulate_plans(model.cluster, [plan], fidelity)
    return end - plan.latency_s


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_reduce_matches_2_n_minus_1_over_n_S_over_B(ideal_constants, n):
    # Uncontended ring on one switch: t = 2(n-1)/n * S / B (DESIGN.md oracle).
    model = make_model(star_graph(n), ideal_constants)
    t = bw_time(model, "all_reduce", list(range(n)))
    assert t == pytest.approx(2 * (n - 1) / n * S / (10 * GB), rel=1e-9)


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_ring_all_gather_and_reduce_scatter_move_n_minus_1_over_n_S(ideal_constants, op):
    model = make_model(star_graph(4), ideal_constants)
    assert bw_time(model, op, [0, 1, 2, 3]) == pytest.approx(3 / 4 * S / (10 * GB), rel=1e-9)


@pytest.mark.parametrize("op", ["broadcast", "reduce"])
def test_pipelined_chain_moves_S_once(ideal_constants, op):
    model = make_model(star_graph(4), ideal_constants)
    assert bw_time(model, op, [0, 1, 2, 3]) == pytest.approx(S / (10 * GB), rel=1e-9)


def test_all_to_all_sends_n_minus_1_over_n_S_through_each_nic(ideal_constants):
    model = make_model(star_graph(4), ideal_constants)
    t = bw_time(model, "all_to_all", [0, 1, 2, 3], algo="direct")
    assert t == pytest.approx(3 / 4 * S / (10 * GB), rel=1e-9)


def test_send_recv_is_S_over_B(ideal_constants):
    model = make_model(star_graph(2), ideal_constants)
    assert bw_time(model, "send_recv", [0, 1], algo="direct") == pytest.approx(S / (10 * GB))


def test_ring_latency_follows_nccl_step_count(ideal_constants):
    # NCCL: ring latency = base + (nsteps - nInter) * intra + nInter * inter, with
    # nsteps = 2(n-1) and nInter = 2 * nNodes for a multi-node all_reduce, capped at
    # nsteps (with one GPU per node all 2(n-1) = 6 steps cross the network).
    k = ideal_constants
    model = make_model(star_graph(4), k)
    plan = model.plan("all_reduce", 8, [0, 1, 2, 3], "ring", "LL")
    net = k.hop_latency_s["net"]["ring"]["LL"]
    expected = k.launch_overhead_s + k.base_latency_s["ring"]["LL"] + 6 * net
    assert plan.latency_s == pytest.approx(expected)


def test_two_collectives_on_an_oversubscribed_uplink_each_slow_by_the_shared_amount(
        ideal_constants):
    # Two leaves of two servers, each leaf with a 10 GB/s uplink: 2:1 oversubscribed.
    # A = ranks {0, 2} and B = ranks {1, 3} each cross the uplinks. Alone, each ring gets
    # the full 10 GB/s of the uplink; together they share it: 5 GB/s each, so the
    # bandwidth part of each takes exactly twice as long.
    model = make_model(star_graph(4, leaves=2, uplink_bw=10 * GB), ideal_constants)
    a = model.plan("all_reduce", S, [0, 2], "ring", "Simple")
    b = model.plan("all_reduce", S, [1, 3], "ring", "Simple")
    (alone,), _ = simulate_plans(model.cluster, [a], "flow")
    (t_a, t_b), _ = simulate_plans(model.cluster, [a, b], "flow")
    bw_alone = alone - a.latency_s
    assert t_a - a.latency_s == pytest.approx(2 * bw_alone, rel=1e-9)
    assert t_b - b.latency_s == pytest.approx(2 * bw_alone, rel=1e-9)
    # The congestion-unaware fidelity does not see the other collective.
    (t_a_an, _), _ = simulate_plans(model.cluster, [a, b], "analytical")
    assert t_a_an == pytest.approx(alone, rel=1e-9)


def test_collectives_in_disjoint_leaves_do_not_interfere(ideal_constants):
    model = make_model(star_graph(4, leaves=2, uplink_bw=10 * GB), ideal_constants)
    a = model.plan("all_reduce", S, [0, 1], "ring", "Simple")
    b = model.plan("all_reduce", S, [2, 3], "ring", "Simple")
    (alone,), _ = simulate_plans(model.cluster, [a], "flow")
    (t_a, t_b), _ = simulate_plans(model.cluster, [a, b], "flow")
    assert t_a == pytest.approx(alone) and t_b == pytest.approx(alone)


def test_tuner_picks_low_latency_protocol_small_and_simple_large(ideal_constants):
    model = make_model(star_graph(8), ideal_constants)
    ranks = list(range(8))
    assert model.plan("all_reduce", 64, ranks).proto == "LL"
    assert model.plan("all_reduce", 8 << 30, ranks).proto == "Simple"


def test_tuner_picks_the_fastest_predicted_pair(ideal_constants):
    model = make_model(star_graph(8), ideal_constants)
    ranks = list(range(8))
    for size in (1 << 10, 1 << 20, 1 << 26):
        best = model.plan("all_reduce", size, ranks)
        for algo in ("ring", "tree"):
            for proto in ("LL", "LL128", "Simple"):
                assert best.predicted_s <= model.plan("all_reduce", size, ranks, algo,
                                                      proto).predicted_s


def test_result_reports_busbw_as_nccl_tests_defines_it(ideal_constants):
    model = make_model(star_graph(4), ideal_constants)
    r = run_collective(model, "all_reduce", S, [0, 1, 2, 3])
    assert r.algbw_bytes_per_s == pytest.approx(S / r.time_s)
    assert r.busbw_bytes_per_s == pytest.approx(r.algbw_bytes_per_s * 2 * 3 / 4)
    assert bus_factor("all_gather", 4) == 0.75 and bus_factor("broadcast", 4) == 1.0


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13, 16])
def test_double_binary_tree_is_two_spanning_trees(n):
    for tree in (0, 1):
        parents = [dtree_parent(r, n, tree) for r in range(n)]
        assert parents.count(-1) == 1
        for r in range(n):        # every rank reaches the root without a cycle
            seen, x = set(), r
            while parents[x] != -1:
                assert x not in seen
                seen.add(x)
                x = parents[x]


def test_same_inputs_same_outputs_bit_for_bit(ideal_constants):
    results = []
    for _ in range(2):
        model = make_model(star_graph(4, leaves=2, uplink_bw=5 * GB), ideal_constants,
                           ecmp="hash", seed=3)
        results.append(run_collective(model, "all_reduce", 123456789, [0, 1, 2, 3]).time_s)
    assert results[0] == results[1]


def test_one_rank_costs_only_the_launch(ideal_constants):
    model = make_model(star_graph(2), ideal_constants)
    plan = model.plan("all_reduce", S, [1])
    assert plan.algo == "local" and plan.predicted_s == ideal_constants.launch_overhead_s


def test_a_local_plan_is_one_launch_on_no_link(ideal_constants):
    model = make_model(star_graph(2), ideal_constants)
    plan = model.local_plan("broadcast", 4096)
    launch = ideal_constants.launch_overhead_s
    assert (plan.op, plan.algo, plan.proto, plan.n_ranks, plan.size_bytes) == \
        ("broadcast", "local", "Simple", 1, 4096)
    assert plan.latency_s == plan.predicted_s == launch and plan.payload_bytes == 0.0
    assert len(plan.links) == len(plan.coef) == 0


def test_a_link_latency_what_if_adds_to_nccl_s_latency_down_to_its_floor():
    from simulator.constants import load_constants
    k = load_constants()
    model = make_model(star_graph(2), k)
    assert model.with_link_latency(7e-6, "ring", "LL", 0.0) == 7e-6      # no what-if
    for algo, base in (("tree", "tree"), ("direct", "ring")):
        floor = k.launch_overhead_s + k.protocol_latency_factor["LL"] * \
            k.base_latency_s[base]["LL"]
        assert model.with_link_latency(floor + 1e-5, algo, "LL", 2e-6) == floor + 1e-5 + 2e-6
        assert model.with_link_latency(floor + 1e-6, algo, "LL", -1.0) == floor


def test_wrong_algorithm_or_protocol_is_a_config_error(ideal_constants):
    from simulator.errors import ConfigError
    model = make_model(star_graph(4), ideal_constants)
    with pytest.raises(ConfigError, match="algo.*does not implement all_gather"):
        model.plan("all_gather", S, [0, 1, 2, 3], algo="tree")
    with pytest.raises(ConfigError, match="proto.*uses the Simple protocol"):
        model.plan("send_recv", S, [0, 1], proto="LL")


def test_point_to_point_switches_to_ll_at_nccls_threshold(ideal_constants):
    model = make_model(star_graph(2), ideal_constants)
    assert model.plan("send_recv", 16384, [0, 1]).proto == "LL"
    assert model.plan("send_recv", 16385, [0, 1]).proto == "Simple"


def test_one_gpu_per_node_pays_nccls_discount(ideal_constants):
    # NCCL (tuning.cc): with ppn < 2 the GPU sends and receives through one NIC and LL128's
    # factor drops from 0.92 to 0.7; the model applies the same ratio to every protocol.
    k = ideal_constants.replace(ppn1_bw_factor=0.7 / 0.92)
    model = make_model(star_graph(4), k)
    t = bw_time(model, "all_reduce", [0, 1, 2, 3])
    assert t == pytest.approx(2 * 3 / 4 * S / (10 * GB * 0.7 / 0.92), rel=1e-9)


def test_one_shot_collectives_solve_on_every_link_with_the_same_times(ideal_constants,
                                                                     monkeypatch):
    # simulate_plans starts its flows together and solves the set a few times: it asks
    # the flow fabric for the per-link solve (refining link classes would cost what the
    # solves cost); the classes' solve gives the same end times to the last bit.
    import simulator.collectives.run as run
    from simulator.network.reduced import ClassSolver

    model = make_model(star_graph(4, leaves=2, uplink_bw=10 * GB), ideal_constants)
    plans = [model.plan("all_reduce", S, [0, 2], "ring", "Simple"),
             model.plan("all_reduce", S, [1, 3], "ring", "Simple")]
    made = []
    real = run.make_fabric

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(run, "make_fabric", spy)
    ends, _ = simulate_plans(model.cluster, plans, "flow")
    assert not isinstance(made[0]._solver, ClassSolver)
    monkeypatch.setattr(run, "make_fabric",
                        lambda *a, **k: spy(*a, **{**k, "link_classes": True}))
    ends_classes, _ = simulate_plans(model.cluster, plans, "flow")
    assert isinstance(made[1]._solver, ClassSolver)
    assert ends_classes == ends


def test_a_long_communicator_is_made_once_per_rank_list():
    from simulator.cluster import Cluster
    from simulator.constants import load_constants
    from simulator.collectives.layouts import make_communicator
    from simulator.collectives.model import CollectiveModel
    from simulator.topology import rail_optimized

    G = rail_optimized(9, {"type": "dgx_a100", "gpu": "A100-SXM4-80GB", "nics": 8,
                           "nic": "ib-hdr"}, nodes_per_leaf=4, spines=4)
    model = CollectiveModel(Cluster(G), load_constants())
    ranks = list(range(71, -1, -1))
    comm = model._communicator(ranks)
    assert comm == make_communicator(model.cluster, ranks)
    assert model._communicator(list(ranks)) is comm
    assert model._communicator([0, 9]) is not model._communicator([0, 9])   # short: not kept
