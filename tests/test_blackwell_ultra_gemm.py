"""Blackwell Ultra's GEMM rates (issues 40/41): B300 and GB300 take Transformer Engine's
B300 GEMM benchmark, BF16 and MXFP8 on the same shapes, as their matmul and FP8 matmul
factors (``training_fit.yaml`` family B300; not fitted on a training row). Source:
NVIDIA/TransformerEngine@ce616e1f docs/features/low_precision_training/gemm_profiling/
gemm_profiling.rst, "GEMM Benchmark (Model Config Mode) on NVIDIA B300 SXM6 AC", the
--pre-quantize table: per layer of hidden 4,096 / intermediate 16,384 at M = 15,872 tokens,
BF16 12.835 ms, MXFP8 7.324 ms for the layer's 12 GEMMs."""

from __future__ import annotations

import pytest

from simulator.compute.model import ComputeModel
from simulator.compute.training_fit import family_of
from simulator.hardware import gpu_spec

M, H, F = 15872, 4096, 16384
LAYER_FLOPS = 3 * 2 * M * (H * 3 * H + H * H + H * F + F * H)    # fwd, dgrad, wgrad
BF16_S, MXFP8_S = 12.835e-3, 7.324e-3
EFF_MAX = 0.80                                   # compute.yaml's top-level bf16 curve


def test_the_b300_factors_are_the_benchmarks_rates_against_the_roofline():
    fit = family_of(gpu_spec("B300"))
    bf16_eff = LAYER_FLOPS / BF16_S / 2250e12                 # 1,494 TFLOP/s: 0.664
    fp8_eff = LAYER_FLOPS / MXFP8_S / 4500e12                 # 2,618 TFLOP/s: 0.582
    assert fit.factor("matmul", "bf16") == pytest.approx(EFF_MAX / bf16_eff, abs=5e-4)
    assert fit.factor("matmul", "fp8") == pytest.approx(EFF_MAX / fp8_eff, abs=5e-4)
    # MXFP8 GEMMs run 1.75x BF16 there, not the datasheet's 2x
    assert BF16_S / MXFP8_S == pytest.approx(1.75, abs=0.01)


@pytest.mark.parametrize("precision,layer_s,peak", [("bf16", BF16_S, 2250e12),
                                                    ("fp8", MXFP8_S, 4500e12)])
def test_a_layers_gemms_on_a_b300_take_the_benchmarks_time(precision, layer_s, peak):
    model = ComputeModel(gpu_spec("B300"), strategy="megatron")
    shapes = [(M, 3 * H, H), (M, H, H), (M, F, H), (M, H, F)]           # m, n, k
    passes = [(m, n, k) for m, n, k in shapes] + [(m, k, n) for m, n, k in shapes] + \
             [(k, n, m) for m, n, k in shapes]
    width = 1 if precision == "fp8" else 2
    total = sum(model.op_time_s("matmul", 2 * m * n * k, width * (m * k + k * n) + 2 * m * n,
                                precision) for m, n, k in passes)
    # each of the 12 kernels: factor x (flops / (peak x 0.80) + half_time 8.7 us) + launch
    # 4 us; the factors make the first terms sum to the benchmark's layer time
    factor = model.fit.factor("matmul", precision)
    assert factor * LAYER_FLOPS / (peak * EFF_MAX) == pytest.approx(layer_s, rel=5e-4)
    assert total == pytest.approx(layer_s + 12 * (factor * 8.7e-6 + 4e-6), rel=1e-3)


@pytest.mark.parametrize("gpu", ["B200", "GB200"])
def test_b200_keeps_its_family_and_fp8_gemms_take_its_bf16_factor(gpu):
    # no FP8 GEMM measurement of B200's: its FP8 GEMMs stay at the bf16 factor (SimuMax's
    # measured BF16 GEMM rate, 0.80 / 0.4878: tests/test_validation_blackwell.py)
    fit = family_of(gpu_spec(gpu))
    assert fit.name == "B200" and fit.fp8_matmul is None
    assert fit.factor("matmul", "fp8") == fit.factor("matmul", "bf16") == 1.64


@pytest.mark.parametrize("strategy", ["megatron", "torchtitan", "fsdp", "ddp", "horovod"])
def test_an_fp8_gemm_on_gb300_costs_the_same_under_every_strategy(strategy):
    # one machine, one price: the FP8 matmul factor is the GPU's, not the stack's
    gpu = gpu_spec("GB300")
    args = ("matmul", 2 * 16384 * 4096 * 14336, 16384 * 4096 + 4096 * 14336, "fp8")
    assert ComputeModel(gpu, strategy=strategy).op_time_s(*args) == \
        ComputeModel(gpu, strategy="megatron").op_time_s(*args)


def test_compare_names_the_fp8_factor():
    text = ComputeModel(gpu_spec("GB300"), strategy="megatron").stack("bf16")
    assert text.startswith("B300 kernels as fitted: matmul x1.21, FP8 matmul x1.38")
