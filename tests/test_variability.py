"""Rank-to-rank variability: the max of N draws sampled directly, per rank class, seeded."""

import math
from statistics import NormalDist

import pytest

from simulator.collectives.run import simulate_plans
from simulator.engine import JobConfig, replay
from simulator.engine.variability import (Variability, draw_max, group_key, max_of_normals,
                                          resolve_sigmas, shipped_sigmas,
                                          synchronised_ranks)
from simulator.errors import ConfigError
from simulator.scenario import load_scenario
from simulator.trace import Communicator, Op, RankClass, Trace
from conftest import make_model, star_graph

PHI = NormalDist().cdf


class TeraflopGPU:
    def op_time_s(self, op_class, flops, bytes_accessed, precision):
        return flops / 1e12


@pytest.mark.parametrize("n", [1, 2, 8, 256, 65536, 10**7])
@pytest.mark.parametrize("u", [0.01, 0.5, 0.99])
def test_max_of_n_is_the_inverse_cdf_of_phi_to_the_n(u, n):
    # P(max of n <= x) = Phi(x)^n, so Phi(M)^n must give u back.
    m = max_of_normals(u, n)
    assert PHI(m) ** n == pytest.approx(u, rel=1e-6)


def test_the_max_grows_with_n_for_one_uniform():
    draws = [max_of_normals(0.5, n) for n in (2, 8, 64, 512, 4096, 65536)]
    assert draws == sorted(draws) and draws[0] > 0.0
    # the median of the max of n: Phi^-1(0.5 ** (1/n)); n = 2: Phi^-1(0.7071) = 0.5449
    assert draws[0] == pytest.approx(NormalDist().inv_cdf(0.5 ** 0.5), rel=1e-9)


def test_mean_of_sampled_maxima_is_the_extreme_value_mean():
    # E[max of 2 standard normals] = 1 / sqrt(pi); averaged over a grid of uniforms
    k = 20000
    mean = sum(max_of_normals((i + 0.5) / k, 2) for i in range(k)) / k
    assert mean == pytest.approx(1.0 / math.sqrt(math.pi), rel=2e-3)


def test_draws_are_deterministic_for_a_seed_and_differ_across_seeds_and_keys():
    assert draw_max(0, "class:all", 128) == draw_max(0, "class:all", 128)
    assert draw_max(0, "class:all", 128) != draw_max(1, "class:all", 128)
    assert draw_max(0, "class:all", 128) != draw_max(0, "class:other", 128)


def test_shipped_sigma_is_the_prism_figure_over_the_expected_max_of_65536():
    # ln(1.09) / E[M_65536], E[M_65536] = 4.2911 (quadrature of the inverse CDF)
    k = 20000
    e_max = sum(max_of_normals((i + 0.5) / k, 65536) for i in range(k)) / k
    assert e_max == pytest.approx(4.2911, abs=2e-3)
    assert shipped_sigmas()["compute"] == pytest.approx(math.log(1.09) / e_max, abs=1e-4)
    assert shipped_sigmas()["collective"] == 0.0


def test_settings_resolve_and_bad_ones_name_the_field():
    assert resolve_sigmas("none") is None
    assert resolve_sigmas("default") == shipped_sigmas()
    assert resolve_sigmas({"matmul": 0.05})["matmul"] == 0.05
    with pytest.raises(ConfigError, match="simulation.variability"):
        resolve_sigmas("ideal")
    with pytest.raises(ConfigError, match=r"simulation\.variability\.compute"):
        resolve_sigmas({"compute": -0.1})
    for bad in ({"compute": True}, {"compute": float("nan")}, 0.02, ["compute"]):
        with pytest.raises(ConfigError, match="simulation.variability"):
            resolve_sigmas(bad)


def _program(n_ops=1):
    ops = [Op(i, "compute", "compute", f"c{i}", flops=1e12, op_class="matmul",
              deps=(i - 1,) if i else ()) for i in range(n_ops)]
    ops.append(Op(n_ops, "comm", "collective", "ar", collective="all_reduce",
                  size_bytes=1 << 20, comm="world", deps=(n_ops - 1,)))
    return ops


def test_synchronised_ranks_are_the_groups_a_class_takes_part_in():
    comm = {"world": Communicator("world", ((0, 1, 2, 3),)),
            "pairs": Communicator("pairs", ((0, 1), (2, 3)))}
    pair_only = [Op(0, "comm", "collective", "p", collective="all_reduce", size_bytes=8,
                    comm="pairs")]
    trace = Trace(4, [RankClass("a", (0,), _program()), RankClass("b", (1,), _program()),
                      RankClass("c", (2, 3), _program())], comm)
    assert synchronised_ranks(trace) == {"a": 4, "b": 4, "c": 4}
    # x's ranks meet only in the pair (0, 1); y takes part in no collective
    lone = Trace(4, [RankClass("x", (0, 1), pair_only), RankClass("y", (2, 3), [])], comm)
    assert synchronised_ranks(lone) == {"x": 2, "y": 1}


@pytest.fixture
def model(ideal_constants):
    return make_model(star_graph(4), ideal_constants)


def test_compute_runs_at_the_slowest_of_the_synchronised_ranks(model):
    comm = {"world": Communicator("world", ((0, 1, 2, 3),))}
    trace = Trace(4, [RankClass("all", (0, 1, 2, 3), _program(2))], comm)
    ideal = replay(trace, model, TeraflopGPU())
    sigmas = {"compute": 0.05, "collective": 0.0}
    tl = replay(trace, model, TeraflopGPU(), JobConfig(variability=sigmas, seed=3))
    factor = math.exp(0.05 * draw_max(3, group_key((0, 1, 2, 3)), 4))
    c = {r.name: r for r in tl.records}
    assert c["c1"].end_s == pytest.approx(2.0 * factor)
    plan = model.plan("all_reduce", 1 << 20, [0, 1, 2, 3])
    (alone,), _ = simulate_plans(model.cluster, [plan], "flow")
    assert c["ar"].end_s == pytest.approx(2.0 * factor + alone)
    assert ideal.iteration_time_s == pytest.approx(2.0 + alone)


def test_classes_cut_from_one_group_share_its_draw(model):
    # one class of 4 ranks, or 4 classes of one rank (an imported trace), or a class split
    # in two: the same 4 GPUs, the same slowest one, the same step
    comm = {"world": Communicator("world", ((0, 1, 2, 3),))}
    sigmas = {"compute": 0.05}
    times = []
    for split in (((0, 1, 2, 3),), ((0,), (1,), (2,), (3,)), ((0, 1), (2, 3))):
        trace = Trace(4, [RankClass(f"c{i}", r, _program(2)) for i, r in enumerate(split)],
                      comm)
        times.append(replay(trace, model, TeraflopGPU(),
                            JobConfig(variability=sigmas, seed=5)).iteration_time_s)
    assert times[0] == times[1] == times[2]
    assert group_key((0, 1, 2, 3)) != group_key((0, 1, 2, 4))


def test_collective_variability_stretches_the_transfer(model):
    comm = {"world": Communicator("world", ((0, 1, 2, 3),))}
    trace = Trace(4, [RankClass("all", (0, 1, 2, 3), _program())], comm)
    sigmas = {"compute": 0.0, "collective": 0.1}
    tl = replay(trace, model, TeraflopGPU(), JobConfig(variability=sigmas, seed=0))
    plan = model.plan("all_reduce", 1 << 20, [0, 1, 2, 3])
    (alone,), _ = simulate_plans(model.cluster, [plan], "flow")
    factor = math.exp(0.1 * draw_max(0, "comm:world", 4))
    assert {r.name: r for r in tl.records}["ar"].end_s == pytest.approx(1.0 + alone * factor)


def test_a_lone_rank_waits_for_no_one(model):
    trace = Trace(1, [RankClass("one", (0,), [Op(0, "compute", "compute", "c", flops=1e12,
                                                 op_class="matmul")])], {})
    tl = replay(trace, model, TeraflopGPU(), JobConfig(variability={"compute": 0.5}))
    assert tl.iteration_time_s == 1.0
    assert Variability({"compute": 0.5}, 0, {"one": (0,)}).compute_factor("one", "matmul") == 1.0


def test_scenario_default_is_on_and_none_is_the_ideal_machine():
    on = load_scenario("quickstart", [])
    off = load_scenario("quickstart", ["simulation.variability=none"])
    assert on.simulation.variability == "default"
    assert resolve_sigmas(off.simulation.variability) is None
    with pytest.raises(ConfigError, match="simulation.variability"):
        load_scenario("quickstart", ["simulation.variability=sometimes"])
