"""Blackwell Ultra's GEMM rates (issues 40/41): B300 and GB300 take Transformer Engine's
B300 GEMM benchmark, BF16 and MXFP8 on the same shapes, as their matmul factor and their
FP8:BF16 GEMM ratio (``training_fit.yaml`` family B300, ``fp8_gemm_speedup``, the spelling
Hopper's ratio has; not fitted on a training row). Source:
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


def test_the_b300_rates_are_the_benchmarks_against_the_roofline():
    fit = family_of(gpu_spec("B300"))
    bf16_eff = LAYER_FLOPS / BF16_S / 2250e12                 # 1,494 TFLOP/s: 0.664
    assert fit.factor("matmul", "bf16") == pytest.approx(EFF_MAX / bf16_eff, abs=5e-4)
    # FP8 GEMMs: the bf16 GEMM's time over the measured ratio, with the bf16 factor;
    # MXFP8 GEMMs run 1.75x BF16 there, not the datasheet's 2x
    assert fit.factor("matmul", "fp8") == fit.factor("matmul", "bf16")
    assert fit.fp8_gemm_speedup == pytest.approx(BF16_S / MXFP8_S, abs=1e-4)
    assert BF16_S / MXFP8_S == pytest.approx(1.75, abs=0.01)


def _layer_s(model, precision):
    shapes = [(M, 3 * H, H), (M, H, H), (M, F, H), (M, H, F)]           # m, n, k
    passes = [(m, n, k) for m, n, k in shapes] + [(m, k, n) for m, n, k in shapes] + \
             [(k, n, m) for m, n, k in shapes]
    width = 1 if precision == "fp8" else 2
    return sum(model.op_time_s("matmul", 2 * m * n * k, width * (m * k + k * n) + 2 * m * n,
                               precision) for m, n, k in passes)


def test_a_layers_gemms_on_a_b300_take_the_benchmarks_time():
    model = ComputeModel(gpu_spec("B300"), strategy="megatron")
    # each of the 12 kernels: factor x (flops / (peak x 0.80) + half_time 8.7 us) + launch
    # 4 us; the factor makes the first terms sum to the benchmark's BF16 layer time
    factor = model.fit.factor("matmul", "bf16")
    assert factor * LAYER_FLOPS / (2250e12 * EFF_MAX) == pytest.approx(BF16_S, rel=5e-4)
    assert _layer_s(model, "bf16") == pytest.approx(BF16_S + 12 * (factor * 8.7e-6 + 4e-6),
                                                    rel=1e-3)
    # in FP8 each kernel (launch apart) takes its bf16 time over the ratio: the layer's
    # GEMMs in the benchmark's MXFP8 time, the half-times divided alike
    speedup = model.fit.fp8_gemm_speedup
    assert _layer_s(model, "fp8") == pytest.approx(
        (BF16_S + 12 * factor * 8.7e-6) / speedup + 12 * 4e-6, rel=1e-3)
    assert BF16_S / speedup == pytest.approx(MXFP8_S, rel=1e-4)


@pytest.mark.parametrize("gpu", ["B200", "GB200"])
def test_b200_keeps_its_family_and_fp8_gemms_take_its_bf16_factor(gpu):
    # no FP8 GEMM measurement of B200's: its FP8 GEMMs stay at the bf16 factor (SimuMax's
    # measured BF16 GEMM rate, 0.80 / 0.4878: tests/test_validation_blackwell.py)
    fit = family_of(gpu_spec(gpu))
    assert fit.name == "B200" and fit.fp8_gemm_speedup is None
    assert fit.factor("matmul", "fp8") == fit.factor("matmul", "bf16") == 1.64


@pytest.mark.parametrize("strategy", ["megatron", "torchtitan", "fsdp", "ddp", "horovod"])
def test_an_fp8_gemm_on_gb300_costs_the_same_under_every_strategy(strategy):
    # one machine, one price: the FP8 GEMM rate is the GPU's, not the stack's
    gpu = gpu_spec("GB300")
    args = ("matmul", 2 * 16384 * 4096 * 14336, 16384 * 4096 + 4096 * 14336, "fp8")
    assert ComputeModel(gpu, strategy=strategy).op_time_s(*args) == \
        ComputeModel(gpu, strategy="megatron").op_time_s(*args)


def test_compare_names_the_fp8_factor():
    text = ComputeModel(gpu_spec("GB300"), strategy="megatron").stack("bf16")
    assert text.startswith("B300 kernels as fitted: matmul x1.21, FP8 GEMMs 1.75x the bf16 "
                           "rate")
