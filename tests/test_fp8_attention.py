"""FP8 attention (``training.fp8_attention``: Transformer Engine's FP8 DotProductAttention on
cuDNN, Megatron's ``fp8_dot_product_attention``, NeMo's ``FP8_DPA=1``): an attention kernel
runs on its family's 16-bit flash curve at the family's sourced FP8 / 16-bit rate
(compute.yaml ``fp8_attention``) times the 16-bit peak; the GEMMs are untouched. Every
strategy that runs a Transformer Engine recipe takes it (one compute model prices the
kernel whoever emits it); refused in one line where the GPU, the recipe or the attention
kernel cannot run it."""

from __future__ import annotations

import pytest

from simulator.compute import ComputeModel
from simulator.compute.model import load_compute_calibration
from simulator.errors import ConfigError
from simulator.hardware import gpu_spec
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict

# an attention kernel of Llama 2 70B on one TP1 rank: 8,192 queries x 64 heads, causal
# (4,096 keys a query), head dimension 128
SHAPE = (8192 * 64, 4096, 128)
FLOPS = 4.0 * 8192 * 4096 * 8192          # QK^T and AV over the causal half


def _speedup(family: str) -> float:
    return load_compute_calibration().families[family].fp8_attention


# cuDNN's SDPA training benchmark (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training),
# Llama 3.1's attention, causal, 4,096 tokens, forward + backward, BF16 ms / FP8 ms
MEASURED = {"hopper": (0.465 + 1.450) / (0.322 + 1.459),      # H200, cuDNN 9.19.1
            "blackwell": (0.391 + 1.198) / (0.305 + 1.167)}   # GB200, cuDNN 9.22.0


def test_the_rates_are_cudnns_benchmark():
    for family, ratio in MEASURED.items():
        assert _speedup(family) == pytest.approx(ratio, abs=5e-4)


@pytest.mark.parametrize("gpu, family", [("H100-SXM", "hopper"), ("H200-SXM", "hopper"),
                                         ("B200", "blackwell"), ("GB200", "blackwell")])
def test_an_attention_kernel_runs_at_the_familys_fp8_rate(gpu, family):
    bf16 = ComputeModel(gpu_spec(gpu), strategy="megatron")
    fp8 = ComputeModel(gpu_spec(gpu), strategy="megatron", fp8_attention=True)
    # the fixed part of a kernel: its launch (both families' flash curves have half_time 0)
    assert load_compute_calibration().families[family].flash.half_time_s == 0.0
    fixed = bf16.kernel_launch_s
    t16 = bf16.op_time_s("attention", FLOPS, 0.0, "bf16", shape=SHAPE) - fixed
    t8 = fp8.op_time_s("attention", FLOPS, 0.0, "bf16", shape=SHAPE) - fixed
    # compute-bound: the 16-bit time over the family's ratio
    assert t8 == pytest.approx(t16 / _speedup(family), rel=1e-12)
    # the GEMMs, norms and elementwise kernels are the 16-bit step's
    for op in ("matmul", "elementwise"):
        assert fp8.op_time_s(op, FLOPS, 1e9, "bf16") == bf16.op_time_s(op, FLOPS, 1e9, "bf16")


def test_an_fp8_attention_kernel_keeps_the_gpus_fitted_attention_factor():
    # H100's fitted attention factor (training_fit.yaml) is the cuDNN kernel's, at either width
    m = ComputeModel(gpu_spec("H100-SXM"), strategy="megatron")
    assert m.fit.factor("attention", "fp8") == m.fit.factor("attention", "bf16") != 1.0


@pytest.mark.parametrize("gpu, why", [
    ("A100-SXM4-80GB", "A100-SXM4-80GB has no FP8 tensor cores"),
    ("MI300X", "no FP8 attention rate is sourced for MI300X"),
])
def test_a_gpu_without_a_sourced_fp8_attention_rate_refuses_it(gpu, why):
    with pytest.raises(ConfigError, match=why) as info:
        ComputeModel(gpu_spec(gpu), fp8_attention=True)
    assert info.value.field == "training.fp8_attention"


def _scenario(strategy: dict, topology: str = "dgx-h100", **training) -> dict:
    return {"name": "fp8-attention", "model": "llama-3-8b", "cluster": {"topology": topology},
            "strategy": strategy, "simulation": {"variability": "none"},
            "training": {"seq_len": 4096, "micro_batch": 1, "precision": "fp8",
                         "fp8_recipe": "delayed", **training}}


def _compute_s(scn: dict) -> float:
    """The step's GPU compute time (its step time can be bound by the host's launches)."""
    metrics = run_setup(build_setup(scenario_from_dict(scn, "fp8-attention"))).metrics
    assert not metrics.oom
    return metrics.compute_s


@pytest.mark.parametrize("strategy", [
    {"name": "fsdp"},
    {"name": "megatron", "tensor_model_parallel_size": 2, "sequence_parallel": True,
     "use_distributed_optimizer": True},
    {"name": "deepspeed", "zero_optimization": {"stage": 1}},
])
def test_every_strategy_running_transformer_engine_takes_it(strategy):
    assert _compute_s(_scenario(strategy, fp8_attention=True)) < _compute_s(_scenario(strategy))


@pytest.mark.parametrize("training, why", [
    ({"precision": "bf16"}, "fp8_attention needs precision: fp8"),
    ({"fp8_recipe": "tensorwise"}, "torchao"),
    ({"attention": "eager"}, "not with eager attention"),
])
def test_a_setting_that_cannot_run_it_is_refused_in_one_line(training, why):
    with pytest.raises(ConfigError, match=why) as info:
        scenario_from_dict(_scenario({"name": "fsdp"}, fp8_attention=True, **training), "x")
    assert "\n" not in str(info.value)
    assert "training" in str(info.value.field)


def test_an_amd_scenario_refuses_it_naming_the_field():
    scn = _scenario({"name": "fsdp"}, topology="mi300x-8gpu", fp8_attention=True)
    with pytest.raises(ConfigError, match="no FP8 attention rate is sourced") as info:
        build_setup(scenario_from_dict(scn, "x"))
    assert info.value.field == "training.fp8_attention"


def test_a_written_trace_replays_with_fp8_attention():
    from simulator.trace_replay import replay_trace
    scn = scenario_from_dict(_scenario({"name": "fsdp"}, fp8_attention=True), "x")
    run = run_setup(build_setup(scn)).metrics
    whole = build_setup(scn, extrapolate_steps=False)
    assert whole.trace.meta["run"]["fp8_attention"] is True
    replayed = replay_trace(whole.trace, cluster=whole.cluster).metrics
    assert replayed.iteration_time_s == pytest.approx(run.iteration_time_s, rel=1e-3)


def test_the_llama2_70b_lora_step_gain_against_nvidias_end_to_end_measurement():
    """NVIDIA's cuDNN 9 post measured Llama 2 70B LoRA on 8 H200 (NeMo + TE) at 1.11x its
    baseline with cuDNN attention in BF16 and 1.15x in FP8: a step 1.15 / 1.11 = 1.036x
    faster. The same setup (MLPerf v4.1's h200_ngc24.09_nemo row, TP1 CP2) simulated 1.126x
    with the post's 'up to' kernel ratio (1.5) and simulates 1.024x with cuDNN's measured
    one (1.075 at 4,096 tokens; 1.023x before the ring attention's backward exchanges hid
    behind its steps, 2026-12-07, and 1.024x before its rows kept the SwiGLU input in FP8,
    whose casts lengthen both steps). Recorded, not tuned: the constant is not fitted to
    this case."""
    from simulator.validation import finetune as f
    split = f.load_split()
    row = f.mlperf_rows()["h200_ngc24.09_nemo"]
    scn = f.scenario_of(row, split)
    bf16 = f._simulate(scn).iteration_time_s
    scn["training"]["fp8_attention"] = True
    gain = bf16 / f._simulate(scn).iteration_time_s
    assert 1.15 / 1.11 == pytest.approx(1.036, abs=5e-4)
    assert gain == pytest.approx(1.024, abs=5e-4)
