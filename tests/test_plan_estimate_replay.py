"""plan's estimate prices a candidate as its replay does (issue 40: one path, one price):
each kernel by shape, precision and launch (simulator.compute.pricing), the scenario's
compile and elementwise code, CUDA graphs, the CPU's launches the GPU waits for
(simulator.strategies.host) and the rank-to-rank variability's slowest-of-N factor
(simulator.engine.variability), in its mean over seeds."""

from __future__ import annotations

import importlib
import math
import random
from statistics import NormalDist

import pytest

from simulator.collectives.model import CollectiveModel
from simulator.compute import ComputeModel
from simulator.compute.launch import graphed
from simulator.compute.pricing import cost_time_s
from simulator.constants import load_constants
from simulator.engine.job import kernel_time_s
from simulator.engine.variability import draw_max, expected_factor, shipped_sigmas
from simulator.hardware import gpu_spec
from simulator.models import layer_costs, load_model
from simulator.pipeline import build_setup
from simulator.planner import Candidate, Estimator, search
from simulator.planner.estimate import Span, launch_bound_s
from simulator.scenario import scenario_from_dict
from simulator.strategies.host import dispatch_table
from simulator.strategies.parallel import ParallelPlan
from simulator.topology.build import scenario_cluster

LLAMA7 = load_model("llama-2-7b")
SEQ = 512


def _scenario(**training):
    """GPT-3 1.3B on one DGX H100 at 2 x 512 tokens a GPU: short kernels, so the CPU's
    launches pace the step (Megatron's eager stack pays them; docs/plan.md)."""
    return scenario_from_dict({
        "name": "small", "model": "gpt3-1.3b",
        "training": {"micro_batch": 2, "seq_len": 512, "grad_accum": 1, "precision": "bf16",
                     "flash_attention": True, **training},
        "cluster": {"topology": "dgx-h100"},
        "strategy": {"name": "fsdp", "sharding": "FULL_SHARD"}})


@pytest.fixture(scope="module")
def estimator():
    cluster = scenario_cluster(_scenario())
    return Estimator(LLAMA7, SEQ, "bf16", True, CollectiveModel(cluster, load_constants()),
                     ComputeModel(gpu_spec(cluster.G.graph["gpu"])))


def _priced(compute, ops) -> float:
    return sum(cost_time_s(compute, o, "bf16") for o in ops)


def _host_stream(phases, m: int) -> float:
    """The replay's host stream step by step: the CPU launches each phase (its time added
    up, never waiting), the GPU runs it after the previous one, its last kernel no earlier
    than the CPU has launched it."""
    gpu_end = cpu = 0.0
    for _ in range(m):
        for span in phases:
            cpu += span.cpu
            gpu_end = max(gpu_end + span.gpu, cpu)
    return gpu_end


def test_launch_bound_is_the_host_streams_step_by_step_time():
    rng = random.Random(7)
    for _ in range(200):
        phases = [Span(rng.uniform(0, 2), rng.uniform(0, 2)) for _ in range(rng.randint(1, 4))]
        m = rng.randint(1, 9)
        assert launch_bound_s(phases, m) == pytest.approx(_host_stream(phases, m), rel=1e-12)
    # the GPU's own time where the CPU keeps ahead, the CPU's where it falls behind
    assert launch_bound_s([Span(3.0, 1.0), Span(5.0, 2.0)], 4) == 4 * 8.0
    assert launch_bound_s([Span(1.0, 3.0), Span(0.5, 2.0)], 4) == 4 * 5.0


def test_expected_factor_of_two_ranks_is_the_closed_form():
    # E[exp(s max(X, Y))] = 2 E[exp(s X) Phi(X)] = 2 exp(s^2 / 2) Phi(s / sqrt 2)
    for sigma in (0.0201, 0.3):
        want = 2 * math.exp(sigma ** 2 / 2) * NormalDist().cdf(sigma / math.sqrt(2))
        assert expected_factor(sigma, 2) == pytest.approx(want, rel=1e-6)
    assert expected_factor(0.0201, 1) == 1.0 == expected_factor(0.0, 64)   # as the replay


def test_expected_factor_is_the_mean_of_the_replays_draws():
    """The replay draws one slowest-of-N factor per seed (draw_max); the estimate takes
    their mean. 4,000 seeds: the standard error is about 1.3e-4 of the factor."""
    sigma, n = shipped_sigmas()["compute"], 128
    draws = [math.exp(sigma * draw_max(seed, "ranks:1", n)) for seed in range(4000)]
    assert sum(draws) / len(draws) == pytest.approx(expected_factor(sigma, n), rel=6e-4)


def test_the_cpu_launches_each_kernel_as_the_host_table_says(estimator):
    """Every kernel of a block, the embedding and the head costs host.yaml's eager time of
    its phase (the recompute's too); a strategy without host dispatch none."""
    t = estimator._layer_times(1, 1, False, 1, "full")
    block = next(x for x in layer_costs(LLAMA7, 1, SEQ, "bf16", True) if x.kind.endswith("block"))
    eager = dispatch_table()["eager"]
    assert t.block.cpu.forward == pytest.approx(len(block.forward) * eager["forward"])
    assert t.block.cpu.backward == pytest.approx(len(block.backward) * eager["backward"])
    assert t.block.cpu.recompute == pytest.approx(len(block.forward) * eager["recompute"])
    quiet = Estimator(LLAMA7, SEQ, "bf16", True, estimator.collectives, estimator.compute,
                      host_modes={"": "none"})
    none = quiet._layer_times(1, 1, False, 1, "full")
    assert none.block.cpu.total == none.embed.cpu.total == none.head.cpu.total == 0.0
    assert none.block.gpu == t.block.gpu            # the GPU's time is the same


def test_a_block_in_cuda_graphs_launches_nothing_and_pays_no_launch_gap(estimator):
    layers = layer_costs(LLAMA7, 1, SEQ, "bf16", True)
    graphs = Estimator(LLAMA7, SEQ, "bf16", True, estimator.collectives, estimator.compute,
                       graphs={"": []})
    t, eager = graphs._layer_times(1, 1, False, 1, "none"), estimator._layer_times(
        1, 1, False, 1, "none")
    assert t.block.cpu.total == 0.0 < eager.block.cpu.total
    assert t.block.gpu.forward == pytest.approx(_priced(estimator.compute,
                                                        graphed(layers[1]).forward))
    assert t.block.gpu.forward < eager.block.gpu.forward
    assert t.head.cpu == eager.head.cpu          # the head is not in the graph


def test_the_scenarios_compile_and_elementwise_code_are_priced(estimator):
    for compile, elementwise in ((True, "fused"), (False, "eager"), (True, "eager")):
        est = Estimator(LLAMA7, SEQ, "bf16", True, estimator.collectives, estimator.compute,
                        compile=compile, elementwise=elementwise)
        block = layer_costs(LLAMA7, 1, SEQ, "bf16", True, compile=compile,
                            elementwise=elementwise)[1]
        t = est._layer_times(1, 1, False, 1, "none")
        assert t.block.gpu.forward == pytest.approx(_priced(estimator.compute, block.forward))
        assert t.block.gpu.backward == pytest.approx(_priced(estimator.compute, block.backward))
        assert t.block.gpu != estimator._layer_times(1, 1, False, 1, "none").block.gpu


def test_variability_slows_each_kernel_by_its_mean_factor(estimator):
    sigma = 0.05
    slow = Estimator(LLAMA7, SEQ, "bf16", True, estimator.collectives, estimator.compute,
                     sigmas={"compute": sigma, "attention": 2 * sigma})
    c = Candidate(ParallelPlan(dp_shard=8, dp_mode="zero1"), 1, 1, "none")
    assert slow.tied(c) == 8
    t, ideal = slow._layer_times(1, 1, False, 1, "none", tied=8), \
        estimator._layer_times(1, 1, False, 1, "none")
    attention = ideal.attn.forward
    want = ((ideal.block.gpu.forward - attention) * expected_factor(sigma, 8)
            + attention * expected_factor(2 * sigma, 8))
    assert t.block.gpu.forward == pytest.approx(want)
    # a pipeline stage of one rank waits for no one: factor 1
    assert slow.tied(Candidate(ParallelPlan(pp=8, dp_mode="zero1"), 1, 8, "none")) == 1


@pytest.mark.parametrize("strategy", [
    {"name": "fsdp", "sharding": "FULL_SHARD"},
    {"name": "megatron", "cuda_graph_impl": "transformer_engine"}])   # carried: graphs
def test_a_replayed_candidates_kernels_are_the_estimates_compute(strategy):
    """One path, one price: the replay's kernels of a distributed-optimizer candidate
    (Megatron's stack, main_grad; forward, backward and its sharded optimizer step; from CUDA
    graphs where the scenario's Megatron settings say so) at their nominal prices add up to
    the estimate's compute; without variability the two use the same prices."""
    base = _scenario()
    scn = base.model_copy(update={"strategy": strategy, "simulation": base.simulation.model_copy(
        update={"variability": "none"})})
    out = search(scn, 16, replay=6, model_parallel=False)
    row = next(r for r in out.rows if r.candidate.plan.dp_mode == "zero1")
    training = scn.training.model_copy(update={"micro_batch": row.candidate.micro_batch,
                                               "grad_accum": row.candidate.micro_batches})
    setup = build_setup(scn.model_copy(update={"strategy": row.strategy,
                                               "training": training}))
    (cls,) = setup.trace.classes
    kernels = sum(kernel_time_s(setup.compute, op, "bf16") for op in cls.ops
                  if op.kind == "compute")           # forward, backward, the optimizer
    assert row.estimate.compute_s == pytest.approx(kernels, rel=1e-9)
    graphs = "cuda_graph_impl" in strategy
    assert any(op.attrs.get("launch") == "graph" for op in cls.ops) == graphs
    assert (row.estimate.host_s == 0.0) == graphs       # the blocks launch nothing


def test_a_host_bound_plan_is_estimated_near_its_replay():
    """GPT-3 1.3B at 2 x 512 tokens a GPU: the CPU's launches take longer than the kernels
    under Megatron's stack. The estimate without them was a quarter of the replay
    (0.022-0.027 s against 0.088-0.112 s). With them and the optimizer's step: at 64
    samples within 10%; at 16 (one micro-batch a pipeline) +2% to +19% while the bubble
    was priced on top of the CPU's launches, within 10% since each stage's CPU launches
    while the others' GPUs fill and drain the pipeline (one_f_one_b_s)."""
    for samples in (16, 64):
        out = search(_scenario(), samples, replay=6)
        rows = [r for r in out.rows if r.metrics is not None]
        assert len(rows) == 6
        assert any(r.estimate.host_s > 0 for r in rows)          # the CPU paces them
        for r in rows:
            assert r.estimate.step_s == pytest.approx(r.metrics.iteration_time_s, rel=0.10)


def test_a_cpu_paced_1f1b_step_is_the_schedule_walked_through():
    """one_f_one_b_s, written out: one stage is launch_bound_s; on an idle CPU the GPUs'
    (m + pp - 1)(F + B); two stages, one micro-batch, a CPU slower than the GPU: the first
    stage's forward at its CPU's pace, the second stage's forward and backward, whose
    launches its CPU made meanwhile (unless its backward's launches take longer), then the
    first stage's backward, launched long before."""
    from simulator.planner.estimate import Span, launch_bound_s, one_f_one_b_s
    f, b = Span(gpu=2.0, cpu=5.0), Span(gpu=3.0, cpu=4.0)
    for m in (1, 3, 7):
        assert one_f_one_b_s([(f, b)], m) == pytest.approx(launch_bound_s((f, b), m))
    idle = (Span(2.0, 0.0), Span(3.0, 0.0))
    for pp, m in ((2, 1), (4, 4), (4, 9)):
        assert one_f_one_b_s([idle] * pp, m) == pytest.approx((m + pp - 1) * (2.0 + 3.0))
    # Hf + max(Gf + Gb, Hb) + Gb: the second stage's backward ends at Hf + max(Gf + Gb, Hb)
    assert one_f_one_b_s([(f, b)] * 2, 1) == pytest.approx(5.0 + max(2.0 + 3.0, 4.0) + 3.0)
    slow = Span(gpu=3.0, cpu=9.0)      # its backward's launches outlast the GPU's work
    assert one_f_one_b_s([(f, slow)] * 2, 1) == pytest.approx(5.0 + 9.0 + 3.0)


@pytest.mark.parametrize("strategy", [
    {"name": "ddp"},                                                    # autocast: fp32
    {"name": "megatron", "use_distributed_optimizer": False, "tensor_model_parallel_size": 2}])
def test_ddp_reduces_the_gradients_its_replay_reduces(strategy, monkeypatch):
    """DDP's gradients are fp32 (PyTorch's under autocast, Megatron's main_grad): the
    estimate all-reduces the bytes the replay's buckets add up to (it took the weights'
    bf16 bytes, half of them)."""
    scn = _scenario().model_copy(update={"strategy": strategy})
    trace = build_setup(scn).trace
    replayed = sum(op.size_bytes for op in trace.classes[0].ops
                   if op.kind == "collective" and op.collective == "all_reduce"
                   and op.comm.split(".")[0] in ("dp", "world"))
    module = importlib.import_module("simulator.planner.search")     # the search's own
    made, real = [], module.Estimator
    monkeypatch.setattr(module, "Estimator", lambda *a, **kw: made.append(real(*a, **kw))
                        or made[-1])
    search(scn, 16, replay=1, model_parallel=strategy["name"] == "megatron")
    (est,) = made
    asked = []
    monkeypatch.setattr(est, "_time", lambda op, size, ranks: asked.append((op, size)) or 0.0)
    tp = strategy.get("tensor_model_parallel_size", 1)
    est._dp_parts(Candidate(ParallelPlan(tp=tp, dp_replicate=8 // tp, dp_shard=1,
                                         dp_mode="ddp", sequence_parallel=tp > 1), 2, 1, "none"))
    assert [size for op, size in asked if op == "all_reduce"] == [pytest.approx(replayed)]
