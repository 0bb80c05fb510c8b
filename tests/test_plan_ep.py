"""`clustersim plan` searches expert parallelism for a mixture of experts: the space lists
ep, the estimate prices the EP all-to-alls at the trace's own sizes, and --max-ep bounds it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from simulator.collectives.model import CollectiveModel
from simulator.compute import ComputeModel
from simulator.constants import load_constants
from simulator.hardware import gpu_spec
from simulator.models import load_model
from simulator.planner import Candidate, Estimator, Limits, candidates
from simulator.planner.strategy import strategy_of
from simulator.scenario import load_scenario
from simulator.strategies import World
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.generate import build_parallel
from simulator.topology.build import scenario_cluster
from test_cli import run_main

MIXTRAL = load_model("mixtral-8x7b")
SMALL_MOE = dataclasses.replace(MIXTRAL, layers=4)
LIMITS = Limits(max_tp=2, max_pp=2, max_cp=1, max_micro_batch=1)


def test_the_space_lists_expert_parallelism_for_a_moe_model_only():
    moe = list(candidates(SMALL_MOE, 16, 32, 1024, LIMITS))
    # the divisors of 8 experts that divide the cp x dp ranks (tp x cp x dp / etp)
    assert {c.plan.ep for c in moe} == {1, 2, 4, 8}
    for c in moe:
        p = c.plan
        p.check(SMALL_MOE, 16, seq_len=1024)             # every one runs
        assert p.cp * p.dp % p.ep == 0 and 8 % p.ep == 0 and p.etp == 0
        assert (f" ep{p.ep} " in c.label()) == (p.ep > 1)
        assert (f"expert parallel {p.ep}" in c.words()) == (p.ep > 1)
    assert {c.plan.ep for c in candidates(SMALL_MOE, 16, 32, 1024,
                                          dataclasses.replace(LIMITS, max_ep=2))} == {1, 2}
    dense = list(candidates(load_model("llama-2-7b"), 16, 32, 1024, LIMITS))
    assert dense and {c.plan.ep for c in dense} == {1}


def test_an_ep_candidate_replays_with_its_expert_parallelism():
    c = Candidate(ParallelPlan(dp_shard=8, ep=4), 1, 2, "none")
    assert strategy_of(c, 4)["parallelism"]["expert_parallel_degree"] == 4
    z = Candidate(ParallelPlan(dp_shard=8, ep=4, dp_mode="zero1"), 1, 2, "none")
    assert strategy_of(z, 4)["expert_model_parallel_size"] == 4


@pytest.fixture(scope="module")
def estimator():
    scn = load_scenario("quickstart", ["training.seq_len=1024"])
    cluster = scenario_cluster(scn)
    return Estimator(SMALL_MOE, 1024, "bf16", True,
                     CollectiveModel(cluster, load_constants()),
                     ComputeModel(gpu_spec(cluster.G.graph["gpu"])))


def test_the_ep_term_is_the_all_to_all_dispatchers_collectives(estimator):
    plan = ParallelPlan(dp_shard=8, ep=4, dp_mode="zero1")
    m = 2
    group = (0, 1, 2, 3)                       # ep consecutive data-parallel ranks
    assert plan.groups("ep")[0] == group
    t, k, h, e, experts = 1024, 2, 4096, 2, 8   # tokens a rank routes, top-k, width, bf16
    tokens = t * k * h * e                     # each token all-to-all (even routing)
    probs = t * k * 4                          # the fp32 router probabilities
    counts = 4 * experts * 8                   # ep x E int64 tokens per expert
    one = estimator._time
    per_block = (4 * one("all_to_all", tokens, group)       # dispatch, combine, x2 backward
                 + 2 * one("all_to_all", probs, group)      # probabilities and gradient
                 + one("all_gather", counts, group))        # counts, forward
    est = estimator.estimate(Candidate(plan, 1, m, "none"))
    assert est.ep_comm_s == pytest.approx(m * SMALL_MOE.layers * per_block)
    assert est.ep_comm_s > 0 and est.parts()["exposed EP traffic"] == est.ep_comm_s
    full = estimator.estimate(Candidate(plan, 1, m, "full"))   # recompute: forward again
    again = 2 * one("all_to_all", tokens, group) + one("all_to_all", probs, group) \
        + one("all_gather", counts, group)
    assert full.ep_comm_s == pytest.approx(m * SMALL_MOE.layers * (per_block + again))
    flat = estimator.estimate(Candidate(ParallelPlan(dp_shard=8, dp_mode="zero1"), 1, m,
                                        "none"))
    assert flat.ep_comm_s == 0


def test_the_estimate_prices_the_traces_own_ep_collectives(estimator):
    # one path, one price: the EP collectives the replayed trace issues, each priced by
    # the same alpha-beta, add up to the estimate's EP term
    plan = ParallelPlan(dp_shard=8, ep=4, dp_mode="zero1")
    m = 2
    cfg = MegatronConfig(micro_batch=1, grad_accum=m, use_distributed_optimizer=True)
    trace = build_parallel(SMALL_MOE, plan, cfg, World(8, 8), seq_len=1024)
    ops = [op for op in trace.classes[0].ops
           if op.kind == "collective" and op.comm.split(".")[0] == "ep"]
    assert {op.collective for op in ops} == {"all_to_all", "all_gather"}
    priced = sum(estimator._time(op.collective, op.size_bytes, plan.groups("ep")[0])
                 for op in ops)
    est = estimator.estimate(Candidate(plan, 1, m, "none"))
    assert est.ep_comm_s == pytest.approx(priced)


def test_ep_shrinks_the_expert_memory(estimator):
    def memory(ep):
        plan = ParallelPlan(dp_replicate=8, dp_shard=1, dp_mode="ddp", ep=ep)
        return estimator.estimate(Candidate(plan, 1, 2, "none")).memory_bytes
    assert memory(8) < memory(2) < memory(1)      # 1, 4 and 8 experts' weights per rank


PLAN = ["plan", "mixtral-8x7b-ep8", "--set", "training.seq_len=1024", "--set",
        "cluster.nodes=2", "--global-batch", "64", "--max-tp", "1", "--max-pp", "1",
        "--max-cp", "1", "--max-micro-batch", "2", "--replay", "2", "--format", "json",
        "-q"]


def test_max_ep_one_is_the_search_without_expert_parallelism(capsys):
    code, out, err = run_main(capsys, *PLAN, "--max-ep", "1")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert rows and all("expert_parallel_degree" not in r["strategy"].get("parallelism", {})
                        and "expert_model_parallel_size" not in r["strategy"] for r in rows)
    code, out, err = run_main(capsys, *PLAN)
    assert code == 0, err
    d = json.loads(out)
    # Mixtral on 16 GPUs: the experts split 8 ways replay faster than any plan without
    assert d["rows"][0]["strategy"]["parallelism"]["expert_parallel_degree"] == 8
    assert d["rows"][0]["step_s"] < min(r["step_s"] for r in rows)
