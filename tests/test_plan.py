"""`clustersim plan`: the candidate space, the analytical estimate against its formulas, the
search (prune, replay, rank, Pareto, why) and the command's outputs."""

from __future__ import annotations

import dataclasses

import json

import pytest

from simulator.constants import load_constants
from simulator.collectives.model import CollectiveModel
from simulator.compute import ComputeModel
from simulator.hardware import gpu_spec
from simulator.models import load_model
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.schedules import bubble_fraction
from simulator.planner import Candidate, Estimator, Limits, candidates, search
from simulator.planner.estimate import group_ranks
from simulator.planner.explain import mark_pareto
from simulator.planner.search import family, pick
from simulator.planner.strategy import strategy_of
from simulator.scenario import load_scenario
from simulator.strategies import World, parse_strategy
from simulator.topology.build import scenario_cluster
from test_cli import run_main

SMALL = ["training.seq_len=512"]
LLAMA7 = load_model("llama-2-7b")


# ------------------------------------------------------------------------------ space
def test_every_candidate_runs_and_fills_the_global_batch():
    cands = list(candidates(LLAMA7, 8, 16, 512, Limits(max_cp=2), model_parallel=True))
    assert cands
    for c in cands:
        p = c.plan
        assert p.size == 8
        p.check(LLAMA7, 8, seq_len=512)                     # raises if the model refuses
        assert c.micro_batch * c.micro_batches * p.dp == 16
        assert p.vp == 1 or c.micro_batches % p.pp == 0      # whole interleaved rounds
    tps = {c.plan.tp for c in cands}
    assert tps == {1, 2, 4, 8} and {c.plan.pp for c in cands} == {1, 2, 4, 8}
    assert {c.plan.cp for c in cands} == {1, 2}
    # FSDP under PP is fsdp (torchtitan's, as torch.distributed.pipelining runs it)
    assert {c.plan.dp_mode for c in cands} == {"fsdp", "ddp", "zero1"}
    assert len(set(cands)) == len(cands)


def test_without_the_generator_only_data_parallel_plans():
    cands = list(candidates(LLAMA7, 8, 16, 512, model_parallel=False))
    assert cands and all(c.plan.tp == c.plan.pp == c.plan.cp == 1 for c in cands)


def test_group_ranks_match_the_plan_groups():
    plan = ParallelPlan(pp=2, dp_replicate=2, dp_shard=2, cp=1, tp=4)
    for dims in ("tp", "dp_shard", "dp_replicate", "pp", ("dp_shard", "cp")):
        first = min(g for g in plan.groups(dims))
        assert group_ranks(plan, dims) == first


def test_context_parallel_candidates_shard_over_cp_as_torchtitan_does():
    plans = {c.plan for c in candidates(LLAMA7, 8, 16, 512, Limits(max_cp=2, max_pp=1,
                                                                    max_tp=1),
                                        model_parallel=True)}
    with_cp = {(p.dp_replicate, p.dp_shard, p.dp_mode) for p in plans if p.cp == 2}
    # 4 data-parallel ranks x cp 2: FSDP, HSDP 2x2, HSDP 4x1 over the cp ranks, zero1; no DDP
    assert with_cp == {(1, 4, "fsdp"), (2, 2, "fsdp"), (4, 1, "fsdp"), (1, 4, "zero1")}
    without = {(p.dp_replicate, p.dp_shard, p.dp_mode) for p in plans if p.cp == 1}
    assert (8, 1, "ddp") in without


def test_candidates_become_strategies_that_translate_back():
    for c in candidates(LLAMA7, 8, 16, 512, Limits(max_pp=2, max_tp=2), model_parallel=True):
        s = strategy_of(c, LLAMA7.layers)
        cfg = parse_strategy({**s, "micro_batch": c.micro_batch,
                              "grad_accum": c.micro_batches})
        back = cfg.plan(World(8, 8).world_size) if s["name"] == "megatron" else \
            cfg.plan(8, LLAMA7.layers)
        p = c.plan
        assert (back.tp, back.pp, back.vp, back.dp_replicate, back.dp_shard, back.dp_mode) \
            == (p.tp, p.pp, p.vp, p.dp_replicate, p.dp_shard, p.dp_mode)


# --------------------------------------------------------------------------- estimate
def priced(compute, ops, precision="bf16"):
    """GPU seconds of ``ops`` (OpCosts) as the replay prices the trace ops written from them:
    by shape, precision and launch (simulator.compute.pricing)."""
    from simulator.compute.pricing import cost_time_s
    return sum(cost_time_s(compute, o, precision) for o in ops)


@pytest.fixture(scope="module")
def estimator():
    scn = load_scenario("quickstart", SMALL)
    cluster = scenario_cluster(scn)
    gpu = gpu_spec(cluster.G.graph["gpu"])
    return Estimator(LLAMA7, 512, "bf16", True, CollectiveModel(cluster, load_constants()),
                     ComputeModel(gpu))


def test_bubble_is_the_schedule_formula(estimator):
    plan = ParallelPlan(pp=4, dp_shard=2, dp_mode="zero2")
    m = 8
    e = estimator.estimate(Candidate(plan, 1, m, "none"))
    f = (4 - 1) / (m + 4 - 1)                    # 1F1B: (p - 1) / (m + p - 1)
    assert bubble_fraction("1f1b", 4, m) == pytest.approx(f)
    assert e.bubble_s == pytest.approx(e.compute_s * f / (1 - f))
    inter = ParallelPlan(pp=4, dp_shard=2, vp=2, schedule="interleaved_1f1b", dp_mode="zero2")
    ei = estimator.estimate(Candidate(inter, 1, m, "none"))
    fi = (4 - 1) / (2 * m + 4 - 1)               # interleaved: (p - 1) / (v m + p - 1)
    assert ei.bubble_s == pytest.approx(ei.compute_s * fi / (1 - fi))
    flat = estimator.estimate(Candidate(ParallelPlan(dp_shard=8), 1, 2, "none"))
    assert flat.bubble_s == flat.tp_comm_s == flat.pp_comm_s == 0


def test_tp_traffic_is_four_collectives_per_block_and_micro_batch(estimator):
    # SP: an all-gather and a reduce-scatter of b s h bytes per pair, 2 pairs forward and
    # 2 backward per block; full recompute repeats the forward pair.
    plan = ParallelPlan(tp=4, dp_shard=2, sequence_parallel=True)
    m, mb = 2, 1
    size = mb * 512 * LLAMA7.hidden * 2
    ranks = (0, 1, 2, 3)
    one = (estimator._time("all_gather", size, ranks)
           + estimator._time("reduce_scatter", size, ranks)) / 2
    e = estimator.estimate(Candidate(plan, mb, m, "none"))
    assert e.tp_comm_s == pytest.approx(m * LLAMA7.layers * 4 * one)
    full = estimator.estimate(Candidate(plan, mb, m, "full"))
    assert full.tp_comm_s == pytest.approx(m * LLAMA7.layers * 6 * one)
    assert full.compute_s > e.compute_s                  # the forward runs twice


def test_cp_ring_traffic_is_the_ring_formula(estimator):
    # cp - 1 K/V exchanges forward behind 1/cp of the attention each; backward, as TE's
    # loop sends them, cp exchanges behind 1/cp of the attention's backward each: K/V,
    # K/V with dK/dV (cp - 2 times), dK/dV home; each the all-gather the replay stands it
    # for (simulator/strategies/parallel/context.py)
    from simulator.strategies.parallel.context import ring_step_size_bytes
    plan, m, mb, cp = ParallelPlan(cp=4, dp_shard=2), 2, 1, 4
    attn = estimator._layer_s(mb, 1, False, cp, "none").attn
    attn_f, attn_b = attn.forward, attn.backward
    kv = 2 * mb * (512 // cp) * LLAMA7.kv_heads * LLAMA7.head_dim * 2
    one, two = (estimator._time("all_gather", ring_step_size_bytes(n * kv, cp), (0, 1, 2, 3))
                for n in (1, 2))
    per_block = ((cp - 1) * max(0.0, one - attn_f / cp)
                 + 2 * max(0.0, one - attn_b / cp) + (cp - 2) * max(0.0, two - attn_b / cp))
    e = estimator.estimate(Candidate(plan, mb, m, "none"))
    assert e.cp_comm_s == pytest.approx(m * LLAMA7.layers * per_block)
    gather = ParallelPlan(cp=4, dp_shard=2, cp_mode="allgather")
    g = estimator.estimate(Candidate(gather, mb, m, "none"))
    assert g.cp_comm_s == pytest.approx(m * LLAMA7.layers * (
        estimator._time("all_gather", kv * cp, (0, 1, 2, 3))
        + estimator._time("reduce_scatter", kv * cp, (0, 1, 2, 3)))) and g.cp_comm_s > 0


@pytest.mark.parametrize("ac,passes", [("none", 2), ("selective", 3)])
def test_cp_a2a_traffic_is_eight_all_to_alls_the_simulation_issues(estimator, ac, passes):
    # Q, K, V, O forward and dO, dQ, dK, dV backward (the forward four again when the
    # attention is recomputed), none hidden; each all-to-all's nccl-tests size is the rank's
    # b (s / cp) tokens x width x 2 bytes: Q and O 32 heads of 128, K and V 32 KV heads
    plan, m, mb, cp = ParallelPlan(cp=2, dp_shard=4, cp_mode="a2a"), 2, 1, 2
    q = mb * (512 // cp) * LLAMA7.heads * LLAMA7.head_dim * 2
    kv = mb * (512 // cp) * LLAMA7.kv_heads * LLAMA7.head_dim * 2
    a2a = lambda size: estimator._time("all_to_all", size, (0, 1))      # noqa: E731
    e = estimator.estimate(Candidate(plan, mb, m, ac))
    assert e.cp_comm_s == pytest.approx(m * LLAMA7.layers * passes * (2 * a2a(q) + 2 * a2a(kv)))
    assert e.cp_comm_s > 0
    # one path, one price: the same all-to-alls as the trace generator issues for a block
    from simulator.strategies.frameworks.megatron import MegatronConfig
    from simulator.strategies.parallel.generate import build_parallel
    cfg = MegatronConfig(micro_batch=mb, grad_accum=m, context_parallel_size=cp,
                         cp_comm_type="a2a", use_torch_fsdp2=True,
                         recompute_granularity=None if ac == "none" else ac)
    trace = build_parallel(LLAMA7, plan, cfg, World(8, 8), seq_len=512, flash=True)
    sizes = [op.size_bytes for op in trace.classes[0].ops if op.comm.startswith("cp.")
             and op.layer == "block.0" and op.attrs.get("micro_step") == 0]
    assert {op.collective for op in trace.classes[0].ops if op.comm.startswith("cp.")} \
        == {"all_to_all"}
    assert sorted(sizes) == sorted([q, kv, kv, q] * passes)
    assert e.cp_comm_s == pytest.approx(m * LLAMA7.layers * sum(map(a2a, sizes)))


def test_alpha_beta_reproduces_the_collective_model(estimator):
    ranks = (0, 1, 2, 3, 4, 5, 6, 7)
    for size in (1 << 20, 1 << 28):                      # the two probe sizes: exact
        want = estimator.collectives.plan("all_gather", size, list(ranks)).predicted_s
        assert estimator._time("all_gather", size, ranks) == pytest.approx(want)


def test_the_collective_fits_kept_are_bounded(estimator, monkeypatch):
    """Estimator._fit keeps at most FITS_KEPT (op, group) fits (it kept every one); one
    asked again after it was dropped is fitted again, to the same numbers."""
    from simulator.planner import estimate
    monkeypatch.setattr(estimate, "FITS_KEPT", 3)
    est = Estimator(estimator.model, 512, "bf16", True, estimator.collectives,
                    estimator.compute)
    groups = [(0, 1), (0, 2), (0, 1, 2, 3), (0, 4), tuple(range(8))]
    first = [est._fit("all_reduce", g) for g in groups]
    assert est._fit.cache_info().currsize == 3 and est._fit.cache_info().maxsize == 3
    assert est._fit("all_reduce", groups[0]) == first[0]      # dropped, fitted again
    assert est._fit.cache_info().misses == len(groups) + 1


def test_each_candidate_is_priced_at_its_replays_stack(estimator):
    """A distributed-optimizer candidate replays under Megatron (strategy_of), whose kernels
    cost less to launch than torchtitan's eager ones: the estimate times each candidate's
    kernels with the compute model of the stack it replays under."""
    gpu = estimator.compute.gpu
    stacks = {name: ComputeModel(gpu, strategy=name) for name in ("torchtitan", "megatron")}
    est = Estimator(LLAMA7, 512, "bf16", True, estimator.collectives, stacks["torchtitan"],
                    stacks=stacks, stack_of=lambda c: strategy_of(c, LLAMA7.layers)["name"])
    zero1 = Candidate(ParallelPlan(dp_shard=8, dp_mode="zero1"), 1, 1, "none")
    fsdp = Candidate(ParallelPlan(dp_shard=8, dp_mode="fsdp"), 1, 1, "none")
    from simulator.models import layer_costs
    layers = layer_costs(LLAMA7, 1, 512, "bf16", True)
    from simulator.strategies.parallel.memory import stage_params
    copies = 2 * est._copy_s(2 * stage_params(LLAMA7, fsdp.plan, 0) * 2)   # FSDP2's copy-outs
    for c, name, extra in ((zero1, "megatron", 0.0), (fsdp, "torchtitan", copies)):
        want = (LLAMA7.layers * priced(stacks[name], (*layers[1].forward, *layers[1].backward))
                + priced(stacks[name], (*layers[0].forward, *layers[0].backward))
                + priced(stacks[name], (*layers[-1].forward, *layers[-1].backward)) + extra)
        assert est.estimate(c).compute_s == pytest.approx(want)
    assert est.estimate(zero1).compute_s < est.estimate(fsdp).compute_s


def test_fsdp2_candidates_pay_their_copy_kernels(estimator):
    """FSDP2 (simulator/strategies/fsdp_copies.py), as the replay runs it: per micro-batch a
    copy-out of each of the two gathers on the compute stream (2 x the gathered bytes each),
    and a chunk_cat before the reduce-scatter (the gradients read and written at 2 bytes)
    on the reduce-scatter's stream; Megatron-FSDP's buffers (fsdp_copies none) none."""
    from simulator.strategies.parallel.memory import stage_params
    est = Estimator(LLAMA7, 512, "bf16", True, estimator.collectives, estimator.compute)
    plan = ParallelPlan(dp_shard=8, dp_mode="fsdp")
    nbytes = stage_params(LLAMA7, plan, 0) * 2
    (part,) = est._dp_parts(Candidate(plan, 1, 1, "none"))
    assert part.copy_out == pytest.approx(2 * est._copy_s(2 * nbytes))
    ranks = tuple(range(8))
    traffic = 2 * est._time("all_gather", nbytes, ranks) + est._time("reduce_scatter", nbytes,
                                                                      ranks)
    params = stage_params(LLAMA7, plan, 0)
    assert part.per_micro == pytest.approx(traffic + est._copy_s(params * (2 + 2)))
    (plain,) = est._dp_parts(Candidate(dataclasses.replace(plan, fsdp_copies="none"), 1, 1,
                                       "none"))
    assert plain.copy_out == 0.0 and plain.per_micro == pytest.approx(traffic)
    with_copies = est.estimate(Candidate(plan, 2, 3, "none"))
    without = est.estimate(Candidate(dataclasses.replace(plan, fsdp_copies="none"), 2, 3, "none"))
    assert with_copies.compute_s - without.compute_s == pytest.approx(3 * part.copy_out)


def test_megatron_candidates_accumulate_into_main_grad(estimator):
    """A Megatron candidate's weight gradients read and write fp32 main_grad, as its replay
    (gradient-accumulation fusion, the default) prices them: the estimate times the layers
    with accumulated_wgrad under the stack that names a main_grad, and only there. At 64
    tokens a micro-batch the weight-gradient GEMMs are bound by those bytes (at 512 by
    their FLOPs: then both price the same)."""
    from simulator.models import layer_costs
    from simulator.models.ops import MainGrad, accumulated_wgrad
    gpu = estimator.compute.gpu
    stacks = {name: ComputeModel(gpu, strategy=name) for name in ("torchtitan", "megatron")}
    main = MainGrad(bytes=4, fused=True)
    seq = 64
    est = Estimator(LLAMA7, seq, "bf16", True, estimator.collectives, stacks["torchtitan"],
                    stacks=stacks, stack_of=lambda c: strategy_of(c, LLAMA7.layers)["name"],
                    main_grads={"megatron": main})
    zero1 = Candidate(ParallelPlan(dp_shard=8, dp_mode="zero1"), 1, 1, "none")
    layers = [accumulated_wgrad(x, main, 2) for x in layer_costs(LLAMA7, 1, seq, "bf16", True)]
    want = sum(k * priced(stacks["megatron"], (*layers[i].forward, *layers[i].backward))
               for i, k in ((1, LLAMA7.layers), (0, 1), (-1, 1)))
    assert est.estimate(zero1).compute_s == pytest.approx(want)
    plain = Estimator(LLAMA7, seq, "bf16", True, estimator.collectives, stacks["torchtitan"],
                      stacks=stacks, stack_of=lambda c: strategy_of(c, LLAMA7.layers)["name"])
    assert plain.estimate(zero1).compute_s < est.estimate(zero1).compute_s


def test_memory_is_the_memory_model(estimator):
    from simulator.strategies.parallel.memory import peak_rank_memory
    plan = ParallelPlan(tp=2, dp_shard=4, sequence_parallel=True)
    e = estimator.estimate(Candidate(plan, 2, 1, "full"))
    want = peak_rank_memory(LLAMA7, plan, seq_len=512, micro_batch=2, micro_batches=1,
                            precision="bf16", ac="full", flash=True, grad_dtype="bf16")
    assert e.memory_bytes == want.total_bytes


# ---------------------------------------------------------------------------- search
class _M:
    def __init__(self, t, gib, oom=False):
        self.iteration_time_s, self.peak_memory_gib, self.oom = t, gib, oom


class _R:
    def __init__(self, t, gib, oom=False):
        self.metrics, self.cost, self.pareto = _M(t, gib, oom), None, False

    @property
    def step_s(self):
        return self.metrics.iteration_time_s


def test_pareto_front_of_time_and_memory():
    rows = [_R(1.0, 60), _R(1.2, 40), _R(1.3, 50), _R(0.9, 90, oom=True), _R(1.5, 30)]
    mark_pareto(rows)
    # (1.3, 50) is beaten by (1.2, 40) on both; an OOM row is never on the front
    assert [r.pareto for r in rows] == [True, True, False, False, True]


def test_pick_replays_one_plan_of_each_kind():
    cands = list(candidates(LLAMA7, 8, 16, 512, Limits(max_pp=2, max_tp=2),
                            model_parallel=True))

    class Row:
        def __init__(self, c, s):
            self.candidate, self.estimate = c, type("E", (), {"step_s": s})()
    rows = [Row(c, float(i % 7)) for i, c in enumerate(cands)]
    chosen = pick(rows, 4)
    assert len(chosen) == 4 and len({family(r.candidate) for r in chosen}) == 4
    assert [r.estimate.step_s for r in chosen] == sorted(r.estimate.step_s for r in chosen)


@pytest.fixture(scope="module")
def small_search():
    from simulator.compare.cost import Price
    scn = load_scenario("quickstart", SMALL)
    return search(scn, 16, replay=2, limits=Limits(max_pp=2, max_tp=2, max_micro_batch=2),
                  price=Price(2.0, "test", "test"))


def test_search_replays_the_best_estimates_and_ranks_them(small_search):
    s = small_search
    c = s.counts
    assert c["refused by their framework"] == 0          # bf16: every framework runs it
    assert c["candidates"] == (c["not replayable here"] + c["refused by their framework"]
                               + c["over memory"] + c["fit"])
    assert c["replayed"] == len(s.rows) == 2
    ok = [r for r in s.rows if r.metrics is not None and not r.metrics.oom]
    assert [r.step_s for r in ok] == sorted(r.step_s for r in ok)
    assert any(r.pareto for r in ok) and all(r.why for r in s.rows)
    assert s.events == sum(int(r.metrics.events) for r in s.rows if r.metrics)
    for r in ok:                                     # priced from the replayed step time
        assert r.cost.per_iteration_usd == pytest.approx(
            2.0 * 8 * r.metrics.iteration_time_s / 3600)


# ------------------------------------------------------------------------------- CLI
def test_plan_command_outputs(capsys, tmp_path):
    args = ["plan", "--set", SMALL[0], "--global-batch", "16", "--replay", "1",
            "--max-tp", "2", "--max-pp", "1", "--max-micro-batch", "2"]
    code, out, err = run_main(capsys, *args, "--format", "json", "--out", str(tmp_path / "o"),
                              "-q")
    assert code == 0, err
    assert err == ""                                     # --quiet: no progress
    d = json.loads(out)
    assert d["gpus"] == 8 and d["global_batch"] == 16 and len(d["rows"]) == 1
    # the distributed-optimizer plan, its kernels priced at Megatron's stack as its replay
    # runs them (0.221 s estimated, 0.291 s replayed; FSDP's 0.370 s, 0.512 s)
    assert d["rows"][0]["rank"] == 1 and d["rows"][0]["strategy"]["name"] == "megatron"
    names = {p.name for p in (tmp_path / "o").iterdir()}
    assert {"plan.csv", "plan.json", "report.html"} <= names
    page = (tmp_path / "o" / "report.html").read_text()
    assert "The fastest plan that fits: " in page and "How far to trust it" in page
    code, out, err = run_main(capsys, *args, "--format", "csv")
    assert code == 0 and out.splitlines()[0].startswith("rank,plan,step_s,estimated_s")
    assert "replaying 1/1" in err


def test_plan_refuses_a_model_that_is_not_a_transformer(capsys):
    code, _, err = run_main(capsys, "plan", "resnet50-ddp-8gpu", "-q")
    assert code == 2 and "not a transformer" in err


def test_plan_refuses_megatrons_fp8_activation_store_in_one_line(capsys):
    """training.fp8_activation_input is Megatron-Core's alone; plan replays FSDP candidates
    under torchtitan, which could not honour it."""
    code, _, err = run_main(capsys, "plan", "quickstart", "--set", "strategy={name: megatron}",
                            "--set", "training.fp8_activation_input=true", "-q")
    assert code == 2 and "training.fp8_activation_input" in err
    assert len(err.strip().splitlines()) == 1


def test_plan_reads_as_a_sentence_with_its_batch_and_trust(capsys):
    """Issue 47: the headline in words, the global batch and where it came from (4M tokens
    a step by default, not the scenario's micro-batch x GPUs), how far to trust it."""
    code, out, err = run_main(capsys, "plan", "--set", SMALL[0], "--replay", "1",
                              "--max-tp", "2", "--max-pp", "1", "--max-micro-batch", "2", "-q")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1].startswith("# The fastest plan that fits: ") and "(tp" in lines[1]
    assert lines[2] == (f"# global batch: {4 * 2**20 // 512:,} samples x 512 tokens = 4.19M "
                        f"tokens a step (the default of 4M tokens a step; --global-batch N "
                        f"sets it)")
    # the fastest is the distributed-optimizer plan, replayed under Megatron
    assert any(x.startswith("# how far to trust it: nearest validated: Megatron")
               for x in lines)
    assert not any(x.strip() in ("...", "# ...") for x in lines)


def test_a_plan_in_words():
    from simulator.planner.space import Candidate
    from simulator.strategies.parallel.plan import ParallelPlan
    c = Candidate(ParallelPlan(tp=8, pp=4, dp_replicate=1, dp_shard=8, schedule="1f1b"),
                  micro_batch=1, micro_batches=16, ac="full")
    assert c.words() == ("tensor parallel 8 inside each server, pipeline 4 (1f1b), "
                         "data parallel 8 (FSDP), micro-batch 1 x 16 a step, "
                         "full activation checkpointing")


def test_fsdp_under_a_pipeline_is_estimated_once_a_step(estimator):
    """torchtitan's FSDP under PP gathers a block once a step and reduce-scatters it after
    the last micro-batch: the estimate's gather, reduce-scatter and chunk_cat are the
    step's end traffic, and its copy-out one a step spread over the micro-batches."""
    from simulator.planner.estimate import group_ranks, stage_weights
    from simulator.strategies.fsdp_copies import copy_in_bytes, copy_out_bytes
    plan = ParallelPlan(pp=4, dp_shard=2)
    m, e = 8, estimator.e
    (part,) = estimator._dp_parts(Candidate(plan, 1, m, "none"))
    stage = stage_weights(LLAMA7, plan, 0, estimator.kept).trainable * e
    shard = group_ranks(plan, ("dp_shard", "cp"))
    ag = estimator._time("all_gather", stage, shard)
    rs = estimator._time("reduce_scatter", stage, shard)
    cat = estimator._copy_s(copy_in_bytes(stage / e, e, e))
    assert part.per_micro == 0
    assert part.tail == pytest.approx(ag + rs + cat)       # one gather, one reduce a step
    assert part.copy_out == pytest.approx(estimator._copy_s(copy_out_bytes(stage)) / m)


def test_fsdp_under_a_pipeline_holds_the_stage_gathered_in_the_memory_estimate():
    """The estimate's FSDP under PP holds what the replay holds: the stage's parameters
    gathered and its gradients unsharded (e + g bytes each) until the one reduce-scatter,
    on top of the layer's working bytes, where FSDP without PP holds one unit."""
    from simulator.strategies.parallel import activation_memory as am
    from simulator.strategies.parallel.memory import rank_memory, stage_params
    plan = ParallelPlan(pp=2, dp_shard=4)
    kw = dict(seq_len=512, micro_batch=1, micro_batches=4, ac="none", flash=True,
              grad_dtype="bf16")
    mem = rank_memory(LLAMA7, plan, stage=0, **kw)
    layer = am.layer_working_bytes(LLAMA7, batch=1, seq_len=512, e=2, ac="none", flash=True,
                                   tp=1, sp=False, cp=1)
    assert mem.working_bytes == layer + stage_params(LLAMA7, plan, 0) * (2 + 2)
    flat = rank_memory(LLAMA7, ParallelPlan(dp_shard=4), stage=0, **kw)
    assert flat.working_bytes < mem.working_bytes


def test_virtual_stages_are_every_count_that_splits_the_layers():
    """GPT-3's 96 layers on PP8 (12 a pipeline rank) interleave in 2, 3, 4 or 6 virtual
    stages (MLPerf's GPT-3 runs 6), not 5; --max-vp bounds them."""
    gpt3 = load_model("gpt3-175b")
    limits = Limits(max_tp=8, max_pp=8, max_cp=1, max_vp=6, max_micro_batch=1)
    vps = {c.plan.vp for c in candidates(gpt3, 512, 512, 2048, limits)
           if c.plan.pp == 8 and c.plan.tp == 8}
    assert vps == {1, 2, 3, 4, 6}
    assert {c.plan.vp for c in candidates(gpt3, 512, 512, 2048,
                                          dataclasses.replace(limits, max_vp=4))
            if c.plan.pp == 8} == {1, 2, 3, 4}
