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


def _estimator(**kw):
    scn = load_scenario("quickstart", ["training.seq_len=1024"])
    cluster = scenario_cluster(scn)
    return Estimator(SMALL_MOE, 1024, "bf16", True,
                     CollectiveModel(cluster, load_constants()),
                     ComputeModel(gpu_spec(cluster.G.graph["gpu"])), **kw)


@pytest.fixture(scope="module")
def estimator():
    return _estimator()


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


ZIPF = {"distribution": "zipf", "zipf_s": 1.2, "seed": 3}


def _ep_ops(trace):
    return sorted((op.name, op.collective, op.size_bytes) for op in trace.classes[0].ops
                  if op.kind == "collective" and op.comm.split(".")[0] == "ep")


def test_the_estimate_prices_the_routing_the_replay_runs(estimator):
    """Uneven routing (the scenario's moe_load, carried into the estimate as the trace
    generator takes it: one Routing): the busiest EP rank's expert GEMMs and all-to-alls
    grow by its load, in the estimate as in the replayed trace."""
    from simulator.strategies.parallel.ep_cp import Routing
    from simulator.strategies.parallel.moe import ExpertLoad, ep_loads
    plan = ParallelPlan(dp_shard=8, ep=4, dp_mode="zero1")
    m = 2
    routed = _estimator(routings={"": Routing(ExpertLoad(**ZIPF))})
    cfg = MegatronConfig(micro_batch=1, grad_accum=m, use_distributed_optimizer=True,
                         moe_load=ZIPF)
    trace = build_parallel(SMALL_MOE, plan, cfg, World(8, 8), seq_len=1024)
    priced = sum(estimator._time(kind, size, plan.groups("ep")[0])
                 for _, kind, size in _ep_ops(trace))
    even, uneven = (e.estimate(Candidate(plan, 1, m, "none")) for e in (estimator, routed))
    assert uneven.ep_comm_s == pytest.approx(priced) and uneven.ep_comm_s > even.ep_comm_s
    load = ep_loads(SMALL_MOE, 1024, 4, ExpertLoad(**ZIPF))
    assert load.imbalance > 1.5 and uneven.compute_s > even.compute_s


def test_a_routed_candidates_kernels_are_priced_as_its_estimate_prices_them():
    """Mixtral with Zipf routing on 16 GPUs: each replayed candidate with expert
    parallelism carries the routing, and its kernels (the busiest EP rank's forward,
    backward and optimizer step, ideal machine) at their nominal prices are what its
    estimate prices: Megatron's add up to the estimate's compute exactly; torchtitan's
    FSDP2 copy-ins, which the estimate counts with the data-parallel traffic, leave the
    same difference as under even routing (before, the estimate priced even routing for
    all: 3.4x less expert work than a Megatron replay ran)."""
    from simulator.engine.job import kernel_time_s
    from simulator.pipeline import build_setup
    from simulator.planner.search import search

    def rows(sets):
        scn = load_scenario("mixtral-8x7b-ep8", ["training.seq_len=1024", "cluster.nodes=2",
                                                 "simulation.variability=none", *sets])
        out = search(scn, 64, replay=6, limits=Limits(max_tp=1, max_pp=1, max_cp=1,
                                                       max_micro_batch=2, max_ep=8))
        gaps = {}
        for row in out.rows:
            if row.candidate.plan.ep == 1:
                continue
            training = scn.training.model_copy(update={
                "micro_batch": row.candidate.micro_batch,
                "grad_accum": row.candidate.micro_batches})
            setup = build_setup(scn.model_copy(update={"strategy": row.strategy,
                                                       "training": training}))
            kernels = sum(kernel_time_s(setup.compute, op, "bf16")
                          for op in setup.trace.classes[0].ops if op.kind == "compute")
            gaps[row.candidate.label()] = (row.strategy, kernels - row.estimate.compute_s)
        return gaps
    uneven = rows(["strategy.moe_load={distribution: zipf, zipf_s: 1.2, seed: 3}"])
    even = rows([])
    assert {strategy["name"] for strategy, _ in uneven.values()} == {"megatron", "torchtitan"}
    for label, (strategy, gap) in uneven.items():
        assert strategy["moe_load"]["distribution"] == "zipf"
        if strategy["name"] == "megatron":
            assert gap == pytest.approx(0.0, abs=1e-9)
        elif label in even:
            assert gap == pytest.approx(even[label][1], rel=1e-6)
    assert any(s["name"] == "torchtitan" and label in even for label, (s, _) in uneven.items())

def test_the_routing_is_the_workloads_carried_into_every_frameworks_candidates():
    """A Megatron scenario's moe_load reaches the torchtitan candidates too (the data and
    the router route the tokens, not the framework), so an FSDP candidate with EP is not
    priced on even routing beside Megatron ones on the scenario's; Megatron's capacity
    factor stays Megatron's (torchtitan's MoE is dropless)."""
    from simulator.planner.strategy import carried, taken_by
    from simulator.strategies.frameworks.torchtitan import TorchtitanConfig
    carry = carried({"name": "megatron", "moe_load": ZIPF, "moe_expert_capacity_factor": 1.25,
                     "expert_model_parallel_size": 8})
    assert carry.workload == {"moe_load": ZIPF}
    assert taken_by(carry, "torchtitan") == {"moe_load": ZIPF}
    assert taken_by(carry, "megatron")["moe_expert_capacity_factor"] == 1.25
    fsdp_ep = Candidate(ParallelPlan(dp_shard=8, ep=4), 1, 2, "none")
    titan = strategy_of(fsdp_ep, 4, carry)
    assert titan["name"] == "torchtitan" and titan["moe_load"] == ZIPF
    # one routing, one price: the busiest EP rank's all-to-alls are the same bytes under
    # either framework's spelling of the same load
    mega = MegatronConfig(micro_batch=1, grad_accum=2, use_distributed_optimizer=True,
                          moe_load=ZIPF)
    plan = ParallelPlan(dp_shard=8, ep=4, dp_mode="zero1")
    sizes = {kind: size for _, kind, size in
             _ep_ops(build_parallel(SMALL_MOE, plan, mega, World(8, 8), seq_len=1024))}
    cfg = TorchtitanConfig(**{k: v for k, v in titan.items() if k != "name"},
                           micro_batch=1, grad_accum=2)
    tplan = cfg.plan(8, SMALL_MOE.layers)
    titan_sizes = {kind: size for _, kind, size in
                   _ep_ops(build_parallel(SMALL_MOE, tplan, cfg, World(8, 8), seq_len=1024))}
    assert titan_sizes["all_to_all"] == sizes["all_to_all"]


def test_the_estimate_prices_the_flex_dispatchers_collectives():
    """Megatron-Core's flex dispatcher, carried from the scenario: the estimate prices the
    collectives its trace issues, each token all-to-all as two side by side (across the
    NVLink domains on its rail, inside a domain on its ranks there), the slower exposed;
    the all-to-all dispatcher's sizes before 2026-12-08."""
    from simulator.strategies.parallel.moe import BESIDE
    scn = load_scenario("mixtral-8x7b-ep8", ["training.seq_len=1024", "cluster.nodes=2"])
    cluster = scenario_cluster(scn)
    est = Estimator(SMALL_MOE, 1024, "bf16", True, CollectiveModel(cluster, load_constants()),
                    ComputeModel(gpu_spec(cluster.G.graph["gpu"])), flex=frozenset({""}),
                    gpus_per_node=4)
    plan = ParallelPlan(dp_shard=16, ep=8, dp_mode="zero1")    # EP8 over two domains of 4
    m = 2
    cfg = MegatronConfig(micro_batch=1, grad_accum=m, use_distributed_optimizer=True,
                         moe_token_dispatcher_type="flex")
    trace = build_parallel(SMALL_MOE, plan, cfg, World(16, 4), seq_len=1024)
    comms = {op.comm.split(".")[0] for op in trace.classes[0].ops if op.kind == "collective"}
    assert {"ep", "ep_nvl", "ep_rail"} <= comms
    total = beside = 0.0
    for op in trace.classes[0].ops:
        if op.kind != "collective" or op.comm.split(".")[0] not in ("ep", "ep_nvl", "ep_rail"):
            continue
        group = trace.communicators[op.comm].groups[0]
        seconds = est._time(op.collective, op.size_bytes, tuple(group))
        if op.comm.startswith("ep_rail"):        # beside the token all-to-all after it
            beside = seconds
            continue
        total += max(seconds, beside)
        beside = 0.0
    flex = est.estimate(Candidate(plan, 1, m, "none"))
    assert flex.ep_comm_s == pytest.approx(total) and flex.ep_comm_s > 0
    assert BESIDE == {"rail_dispatch", "rail_combine"}
    plain = Estimator(SMALL_MOE, 1024, "bf16", True, CollectiveModel(cluster, load_constants()),
                      ComputeModel(gpu_spec(cluster.G.graph["gpu"])), gpus_per_node=4)
    assert plain.estimate(Candidate(plan, 1, m, "none")).ep_comm_s != flex.ep_comm_s


def test_the_memory_estimate_keeps_the_busiest_ranks_routed_copies():
    """The analytical memory (plan's estimate) keeps an MoE block's activations as the
    busiest EP rank does under the routing (its copies, ep_loads' slowest), as the replay
    does: Mixtral's EP8 plan at Zipf s = 0.6 (2.0x the even share on its busiest rank)
    against its replay's peak; even routing is top_k copies of each token, as before."""
    from simulator.models.moe import moe_activation_bytes
    from simulator.pipeline import build_setup, run_setup
    from simulator.strategies.parallel.activation_memory import moe_half_bytes
    from simulator.strategies.parallel.ep_cp import Routing
    from simulator.strategies.parallel.moe import ExpertLoad, ep_loads
    t = 4096
    even = moe_half_bytes(MIXTRAL, batch=1, seq_len=t, e=2)
    assert even == moe_activation_bytes(MIXTRAL, t, 2, t * MIXTRAL.top_k)
    zipf = ExpertLoad(distribution="zipf", zipf_s=0.6)
    busiest = ep_loads(MIXTRAL, t, 8, zipf).slowest
    assert busiest > 1.9 * t * MIXTRAL.top_k
    assert moe_half_bytes(MIXTRAL, batch=1, seq_len=t, e=2, copies=busiest) == \
        moe_activation_bytes(MIXTRAL, t, 2, busiest)
    scn = load_scenario("mixtral-8x7b-ep8",
                        ["strategy.moe_load={distribution: zipf, zipf_s: 0.6}"])
    cluster = scenario_cluster(scn)
    est = Estimator(MIXTRAL, t, "bf16", True, CollectiveModel(cluster, load_constants()),
                    ComputeModel(gpu_spec(cluster.G.graph["gpu"])),
                    routings={"": Routing(zipf)})
    plan = ParallelPlan(pp=4, vp=8, ep=8, dp_shard=16, dp_mode="zero1",
                        schedule="interleaved_1f1b")
    memory = est.estimate(Candidate(plan, 1, 8, "none")).memory_bytes
    replayed = run_setup(build_setup(scn)).metrics.peak_memory_gib * 2 ** 30
    assert memory == pytest.approx(replayed, rel=0.005)


def test_a_layout_the_flex_dispatcher_cannot_cut_is_counted_not_fatal(capsys):
    """Two GB200 NVL72 racks, the flex dispatcher: an EP group of 64 at a 72-GPU domain
    boundary spans one rack with some ranks and two with others, which is not modelled.
    The estimate refuses those candidates, counted and said in the header, and the search
    goes on (before, the first such candidate's refusal ended the whole search)."""
    strategy = ("strategy={name: megatron, expert_model_parallel_size: 8, "
                "use_distributed_optimizer: true, moe_token_dispatcher_type: flex}")
    code, out, err = run_main(capsys, "plan", "quickstart", "--set", "model=qwen3-30b-a3b",
                              "--set", "cluster={topology: gb200-nvl72, nodes: 2}",
                              "--set", strategy, "--set", "training.seq_len=4096",
                              "--set", "training.micro_batch=1", "--global-batch", "288",
                              "--max-tp", "1", "--max-pp", "1", "--max-cp", "1",
                              "--replay", "1", "--format", "json", "-q")
    assert code == 0, err
    d = json.loads(out)
    assert d["counts"]["not modelled"] > 0 and d["rows"]
    code, out, err = run_main(capsys, "plan", "quickstart", "--set", "model=qwen3-30b-a3b",
                              "--set", "cluster={topology: gb200-nvl72, nodes: 2}",
                              "--set", strategy, "--set", "training.seq_len=4096",
                              "--set", "training.micro_batch=1", "--global-batch", "288",
                              "--max-tp", "1", "--max-pp", "1", "--max-cp", "1",
                              "--replay", "1", "-q")
    assert code == 0, err
    assert "not modelled (the flex dispatcher's EP groups span" in out
