"""`clustersim plan` on a fine-tuning (docs/finetuning.md, docs/plan.md): the analytical
memory model holds the frozen base as stored and state for the adapters only, the estimate
reduces only the adapters' gradients and drops the frozen GEMMs' weight gradients, and the
planner's memory agrees with the replay's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.collectives.model import CollectiveModel
from simulator.compute import ComputeModel
from simulator.constants import load_constants
from simulator.hardware import gpu_spec
from simulator.models import layer_costs, load_model
from simulator.models.finetune import Finetune
from simulator.planner import Candidate, Estimator, Limits, search
from simulator.scenario import load_scenario
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.memory import rank_memory
from simulator.topology.build import scenario_cluster
from test_cli import run_main

LLAMA7 = load_model("llama-2-7b")           # h 4096, 32 blocks, 32 heads (no GQA), ffn 11008
RANK = 16
LORA = Finetune(mode="lora", rank=RANK, alpha=32.0, targets=("o", "qkv"))
LORA7 = replace(LLAMA7, finetune=LORA)
SEQ = 512
# AMD's MLPerf recipe at bf16 (plan prices fp32/tf32/bf16/fp16 steps; an FP8 base is an FP8
# step's), small limits to stay well under 10 s
BF16 = ["training.precision=bf16", "training.finetune.base_precision=bf16"]
SMALL = ["--max-pp", "1", "--max-cp", "1", "--max-micro-batch", "1", "--replay", "1"]


def _adapter_params() -> int:
    """LoRA on the fused QKV (in h, out 3h: 32 query heads and 32 K/V heads of 128) and the
    output projection (in h, out h): A [k, r] + B [r, n] each, on every block."""
    h, r = 4096, RANK
    return 32 * (r * (h + 3 * h) + r * (h + h))


def _base_params() -> int:
    """Llama 2 7B: the untied token table and LM head (32,000 x 4096), 32 blocks of
    attention (4 h^2), SwiGLU MLP (3 h ffn) and two norms (2 h), and the final norm (h)."""
    h, ffn, v = 4096, 11008, 32000
    return 2 * v * h + 32 * (4 * h * h + 3 * h * ffn + 2 * h) + h


def test_the_formulas_count_the_model():
    assert _base_params() == sum(x.params for x in layer_costs(LLAMA7, 1, 1, "fp32"))
    assert _adapter_params() == sum(x.params for x in layer_costs(LORA7, 1, 1, "fp32"))


@pytest.mark.parametrize("mode", ["fsdp", "ddp"])
def test_lora_memory_is_frozen_base_over_shards_plus_adapter_state(mode):
    plan = ParallelPlan(dp_shard=8, dp_mode=mode)
    grads = "bf16" if mode == "fsdp" else "fp32"
    got = rank_memory(LORA7, plan, seq_len=SEQ, micro_batch=1, micro_batches=1,
                      precision="bf16", grad_dtype=grads)
    a, frozen = _adapter_params(), 2 * _base_params()        # the base in bf16, 2 bytes
    g = 2 if mode == "fsdp" else 4
    state = 4 + 8                                  # fp32 master + Adam's two fp32 moments
    if mode == "fsdp":                             # everything sharded over 8 ranks
        want = (-(-frozen // 8) + -(-2 * a // 8), -(-g * a // 8), -(-state * a // 8))
    else:                                          # everything whole on each rank
        want = (frozen + 2 * a, g * a, state * a)
    assert (got.params_bytes, got.grads_bytes, got.optimizer_bytes) == want
    full = rank_memory(LLAMA7, plan, seq_len=SEQ, micro_batch=1, micro_batches=1,
                       precision="bf16", grad_dtype=grads)
    assert got.state_bytes < full.state_bytes / 4


def test_lora_activations_change_as_the_layer_costs_do():
    """The saved bytes move by what the fine-tuning moves in the layer costs (adapters' own
    saves, the frozen GEMMs' inputs no longer kept), block by block and in the head."""
    kw = dict(seq_len=SEQ, micro_batch=2, micro_batches=1, precision="bf16", flash=True)
    plan = ParallelPlan(dp_shard=8)
    tuned, whole = rank_memory(LORA7, plan, **kw), rank_memory(LLAMA7, plan, **kw)
    lt = layer_costs(LORA7, 2, SEQ, "bf16", True)
    lw = layer_costs(LLAMA7, 2, SEQ, "bf16", True)
    delta = [t.activation_bytes - w.activation_bytes for t, w in zip(lt, lw)]
    assert tuned.activations_bytes - whole.activations_bytes == sum(delta)
    # full recompute keeps each block's input only, fine-tuned or not
    full = dict(kw, ac="full")
    assert (rank_memory(LORA7, plan, **full).layer_activations_bytes
            == rank_memory(LLAMA7, plan, **full).layer_activations_bytes)


@pytest.fixture(scope="module")
def estimators():
    scn = load_scenario("quickstart", ["training.seq_len=512"])
    cluster = scenario_cluster(scn)
    gpu = gpu_spec(cluster.G.graph["gpu"])
    comm = CollectiveModel(cluster, load_constants())
    return {name: Estimator(m, SEQ, "bf16", True, comm, ComputeModel(gpu))
            for name, m in (("lora", LORA7), ("full", LLAMA7))}


def _sizes(est: Estimator, c: Candidate, monkeypatch) -> dict[str, list[float]]:
    """The bytes of each collective the estimate times for ``c``."""
    seen: dict[str, list[float]] = {}
    real = est._time

    def spy(op, size, ranks):
        seen.setdefault(op, []).append(size)
        return real(op, size, ranks)
    monkeypatch.setattr(est, "_time", spy)
    est.estimate(c)
    return seen


def test_dp_traffic_is_the_adapters_gradients(estimators, monkeypatch):
    est = estimators["lora"]
    grads = 2 * _adapter_params()                  # bf16 gradients of the adapters only
    ddp = _sizes(est, Candidate(ParallelPlan(dp_shard=8, dp_mode="ddp"), 1, 1, "none"),
                 monkeypatch)
    # DDP autocasts on fp32 weights: fp32 gradients, as its replay all-reduces them
    # (tests/test_plan_estimate_replay.py)
    assert ddp["all_reduce"] == [2 * grads]
    fsdp = _sizes(est, Candidate(ParallelPlan(dp_shard=8), 1, 1, "none"), monkeypatch)
    assert fsdp["reduce_scatter"] == [grads]
    # FSDP still all-gathers the frozen base's shards (one gather timed, counted for the
    # forward and the backward)
    assert fsdp["all_gather"] == [grads + 2 * _base_params()]


def _gemm_flops(ops) -> float:
    """The base model's GEMM FLOPs (the adapters' apart)."""
    return sum(o.flops for o in ops if o.op_class == "matmul" and ".lora_" not in o.name)


def test_lora_backward_gemms_are_half_and_the_estimate_times_them(estimators):
    from simulator.compute.pricing import cost_time_s
    tuned = next(x for x in layer_costs(LORA7, 1, SEQ, "bf16", True) if x.name == "block.0")
    whole = next(x for x in layer_costs(LLAMA7, 1, SEQ, "bf16", True) if x.name == "block.0")
    # a frozen Linear computes the input gradient only: half of its backward GEMM FLOPs
    assert _gemm_flops(tuned.backward) == pytest.approx(_gemm_flops(whole.backward) / 2)
    assert _gemm_flops(tuned.forward) == _gemm_flops(whole.forward)
    c = Candidate(ParallelPlan(dp_shard=8), 1, 1, "none")
    for name, layers in (("lora", layer_costs(LORA7, 1, SEQ, "bf16", True)),
                         ("full", layer_costs(LLAMA7, 1, SEQ, "bf16", True))):
        est = estimators[name]
        block = layers[1]
        def priced(ops):            # as the replay prices the ops written from them
            return sum(cost_time_s(est.compute, o, "bf16") for o in ops)
        want = (32 * (priced(block.forward) + priced(block.backward))
                + sum(priced((*x.forward, *x.backward)) for x in (layers[0], layers[-1]))
                + sum(d.copy_out for d in est._dp_parts(c)))   # FSDP2's (tests/test_plan.py)
        assert est.estimate(c).compute_s == pytest.approx(want)
    # no weight-gradient GEMM of a frozen base weight is left to time
    assert not [o.name for o in tuned.backward
                if o.name.endswith(".wgrad") and ".lora_" not in o.name]


@pytest.mark.parametrize("sets", [[], BF16], ids=["fp8", "bf16"])
def test_planner_memory_agrees_with_the_replay(sets):
    """Within docs/plan.md's 10-25% between the analytical memory and the replay's."""
    scn = load_scenario("llama2-70b-lora-mi300x", sets)
    out = search(scn, 8, replay=1, limits=Limits(max_pp=1, max_cp=1, max_micro_batch=1))
    row = out.rows[0]
    est_gib = row.estimate.memory_bytes / 2**30
    assert row.metrics is not None and not row.metrics.oom
    assert abs(est_gib - row.metrics.peak_memory_gib) <= 0.25 * row.metrics.peak_memory_gib


def test_plan_command_on_the_amd_lora_recipe(capsys):
    """The shipped scenario as it is: an FP8 step on an FP8 base (its GEMMs timed at FP8,
    the rest at bf16: tests below)."""
    code, out, err = run_main(capsys, "plan", "llama2-70b-lora-mi300x", *SMALL, "-q")
    assert code == 0, err
    assert "The fastest plan that fits" in out


def test_an_fp8_step_times_its_gemms_at_fp8_and_keeps_bf16(estimators):
    """An FP8 candidate: the layer costs at fp8 (the recipe's casts, GEMMs marked fp8),
    every other kernel timed at bf16, activations and traffic at 2 bytes an element, the
    memory model at bf16 (an FP8 step keeps bf16 weights)."""
    bf16 = estimators["lora"]
    hopper = ComputeModel(gpu_spec("H100-SXM"))             # FP8 tensor cores
    fp8 = Estimator(LORA7, SEQ, "fp8", True, bf16.collectives, hopper, fp8_recipes={"": "delayed"})
    assert fp8.e == bf16.e == 2
    layers = layer_costs(LORA7, 1, SEQ, "fp8", True, fp8_recipe="delayed")
    block = layers[1]
    assert {o.precision for o in block.forward if o.op_class == "matmul"} == {"fp8", "bf16"}
    # as the replay prices the ops written from them: fp8 where marked, by shape
    from simulator.compute.pricing import cost_time_s
    want = sum(cost_time_s(fp8.compute, o, "bf16") for o in block.forward)
    assert fp8._layer_times(1, 1, False, 1, "none").block.gpu.forward == pytest.approx(want)
    c = Candidate(ParallelPlan(dp_shard=8), 1, 1, "none")
    assert fp8.estimate(c).memory_bytes == bf16.estimate(c).memory_bytes


def test_frozen_first_blocks_are_refused_in_one_line(capsys):
    code, _, err = run_main(capsys, "plan", "llama2-70b-lora-mi300x", "--set",
                            "training.finetune={mode: full, freeze_layers: 4}", *SMALL)
    assert code != 0
    assert "training.finetune.freeze_layers" in err and len(err.strip().splitlines()) == 1


def test_qlora_holds_the_block_gemm_weights_in_nf4():
    """QLoRA: each block's Linear weights (4 h^2 + 3 h ffn) at NF4's 4 + 8/64 + 32/(64 x 256)
    bits, its norms, the embedding and head at 2 bytes; the adapters as LoRA's."""
    qlora = replace(LLAMA7, finetune=replace(LORA, mode="qlora"))
    h, ffn = 4096, 11008
    linear = 4 * h * h + 3 * h * ffn
    nf4 = (4 + 8 / 64 + 32 / (64 * 256)) / 8
    frozen = 32 * round(linear * nf4) + 2 * (_base_params() - 32 * linear)
    got = rank_memory(qlora, ParallelPlan(dp_shard=8, dp_mode="ddp"), seq_len=SEQ,
                      micro_batch=1, micro_batches=1, precision="bf16")
    assert got.params_bytes == frozen + 2 * _adapter_params()
    assert got.grads_bytes == 4 * _adapter_params()
