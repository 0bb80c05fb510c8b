"""NVFP4 training (training.precision: fp4): Transformer Engine's NVFP4BlockScaling recipe
(simulator/models/nvfp4.py) with its GEMMs at the FP4 rate (simulator/compute/model.py)."""

from __future__ import annotations

import pytest

from simulator.compute import ComputeModel
from simulator.compute.training_fit import family_of
from simulator.errors import ConfigError
from simulator.hardware import check_training_precision, gpu_spec
from simulator.models.fp8 import fp8_layer
from simulator.models.nvfp4 import (NVFP4_COPY_BYTES, RHT_QUANTIZE_BYTES,
                                    WEIGHT_QUANTIZE_BYTES, nvfp4_layer)
from simulator.models.ops import LayerCost, OpCost
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict

M, K, N = 8192, 4096, 14336          # tokens x in-features x out-features


def _block() -> LayerCost:
    """One Linear's three GEMMs in a block, as the transformer generator writes them
    (C[m, n] = A[m, k] B[k, n]): fprop x[M, K] w[K, N]; dgrad dY[M, N] w^T; wgrad x^T dY."""
    f = 2.0 * M * K * N
    fwd = (OpCost("up", "matmul", f, 2.0 * (M * K + K * N + M * N), weight="up",
                  m=M, n=N, k=K),)
    bwd = (OpCost("up.dgrad", "matmul", f, 2.0 * (M * N + K * N + M * K), weight="up",
                  m=M, n=K, k=N),
           OpCost("up.wgrad", "matmul", f, 2.0 * (M * K + M * N + K * N), weight="up",
                  m=K, n=N, k=M))
    return LayerCost("block.0", "block", K * N, fwd, bwd, activation_bytes=0,
                     output_bytes=0)


def test_the_nvfp4_bytes_per_element_written_out():
    # E2M1 value 4 bits + one E4M3 (1-byte) scale per 16 values
    assert NVFP4_COPY_BYTES == 0.5 + 1 / 16 == 0.5625
    # X and dY: amax read (2) + row-wise quantize (read 2, write 0.5625) + RHT column-wise
    # quantize (read 2, write 0.5625)
    assert RHT_QUANTIZE_BYTES == 2 + (2 + 0.5625) + (2 + 0.5625) == 7.125
    # W (16x16 2D blocks, no RHT): amax read (2) + one kernel reading 2, writing both layouts
    assert WEIGHT_QUANTIZE_BYTES == 2 + 2 + 2 * 0.5625 == 5.125


def test_nvfp4_layer_quantizes_each_tensor_once_and_reads_half_byte_operands():
    layer = nvfp4_layer(_block(), weight_reuse=4)
    fwd = {op.name: op for op in layer.forward}
    bwd = {op.name: op for op in layer.backward}
    assert [op.name for op in layer.forward] == ["nvfp4_quantize.up", "up"]
    assert fwd["nvfp4_quantize.up"].bytes_accessed == 7.125 * M * K + 5.125 * K * N / 4
    assert fwd["nvfp4_quantize.up"].op_class == "elementwise"
    assert fwd["up"].precision == "fp4" and fwd["up"].flops == 2.0 * M * K * N
    assert fwd["up"].bytes_accessed == 0.5625 * (M * K + K * N) + 2 * M * N
    assert bwd["up.wgrad"].bytes_accessed == 0.5625 * (K * M + M * N) + 2 * K * N
    # dgrad: dY [m, n] quantized (row-wise for dgrad, RHT column-wise for wgrad)
    assert bwd["nvfp4_quantize.up.dgrad"].bytes_accessed == 7.125 * M * N
    # wgrad: both operands' column-wise copies already made: no kernel
    assert not [n for n in bwd if n.startswith("nvfp4_quantize") and n.endswith("wgrad")]
    assert {op.precision for op in layer.backward if op.op_class == "matmul"} == {"fp4"}
    head = LayerCost("head", "head", K * N, _block().forward, (), 0, 0)
    assert nvfp4_layer(head) is head             # the LM head stays bf16


def test_fp4_gemm_time_on_gb200_is_flops_over_fp4_peak_and_the_bf16_curve():
    # B200 generation (B200, GB200): no measured FP4 GEMM rate, so the bf16 curve
    # (compute.yaml op_classes.matmul bf16: eff_max 0.80, half_time 8.70 us) at the
    # datasheet's FP4 dense peak (gpus.yaml GB200: 10,000 TFLOP/s), times the generation's
    # matmul factor (training_fit.yaml B200: 1.64), plus the 4 us launch
    model = ComputeModel(gpu_spec("GB200"), strategy="megatron")
    assert model.fit.fp4_gemm_speedup is None and model.fit.time_factor["matmul"] == 1.64
    flops = 2.0 * M * K * N
    compute = flops / (10_000e12 * 0.80) + 8.70e-6
    assert model.op_time_s("matmul", flops, 0.0, "fp4") == pytest.approx(
        compute * 1.64 + 4e-6, rel=1e-12)
    bf16 = flops / (2_500e12 * 0.80) + 8.70e-6
    assert model.op_time_s("matmul", flops, 0.0, "bf16") == pytest.approx(
        bf16 * 1.64 + 4e-6, rel=1e-12)


def test_fp4_gemm_time_on_b300_is_the_bf16_time_over_the_measured_nvfp4_ratio():
    # Blackwell Ultra: TE's B300 GEMM benchmark, per layer 12.835 ms BF16 / 3.754 ms NVFP4
    fit = family_of(gpu_spec("B300"))
    assert fit.fp4_gemm_speedup == round(12.835 / 3.754, 3) == 3.419
    flops = 2.0 * M * K * N
    bf16 = flops / (2_250e12 * 0.80) + 8.70e-6           # the B300's bf16 peak, the curve
    for gpu in ("B300", "GB300"):
        peak = gpu_spec(gpu).peak_flops["bf16"]
        bf16 = flops / (peak * 0.80) + 8.70e-6
        model = ComputeModel(gpu_spec(gpu), strategy="megatron")
        assert model.op_time_s("matmul", flops, 0.0, "fp4") == pytest.approx(
            bf16 / 3.419 * 1.205 + 4e-6, rel=1e-12)
        assert model.op_time_s("matmul", flops, 0.0, "fp8") == pytest.approx(
            bf16 / 1.7525 * 1.205 + 4e-6, rel=1e-12)


@pytest.mark.parametrize("gpu, words", [
    ("H100-SXM", "H100-SXM has no FP4 tensor cores"),
    ("A100-SXM4-80GB", "A100-SXM4-80GB has no FP4 tensor cores"),
    ("MI300X", "MI300X has no FP4 tensor cores"),
    ("MI355X", "MI355X's FP4 tensor cores run MXFP4 (CDNA 4); only NVFP4 training"),
])
def test_fp4_is_refused_in_one_line_without_nvfp4_tensor_cores(gpu, words):
    with pytest.raises(ConfigError) as info:
        check_training_precision(gpu_spec(gpu), "fp4")
    assert info.value.field == "training.precision"
    assert words in str(info.value) and "\n" not in str(info.value)
    for ok in ("B200", "GB200", "B300", "GB300"):
        check_training_precision(gpu_spec(ok), "fp4")


def _scenario(precision: str, strategy: str = "megatron", **training) -> dict:
    t = {"micro_batch": 4, "seq_len": 8192, "grad_accum": 2, "precision": precision,
         "flash_attention": True, **training}
    return {"name": "nvfp4", "model": "llama-3-8b", "training": t,
            "cluster": {"topology": "dgx-b300", "gpus": 1},
            "strategy": {"name": strategy, "optimizer": "adam"},
            "simulation": {"variability": "none"}}


def _setup(scenario: dict):
    return build_setup(scenario_from_dict(scenario, "nvfp4.yaml"), "nvfp4.yaml")


def test_fp4_outside_megatron_is_refused_in_one_line():
    with pytest.raises(ConfigError) as info:
        _setup(_scenario("fp4", strategy="fsdp"))
    assert str(info.value).startswith("nvfp4.yaml: training.precision: fp4 is Transformer "
                                      "Engine's NVFP4 recipe, which the megatron strategy")
    assert "\n" not in str(info.value)


def _kernel_s(setup) -> dict[str, float]:
    """Each compute op's time on the setup's GPU, by op name and micro-step."""
    ops = [op for c in setup.trace.classes for op in c.ops if op.kind == "compute"]
    out = {}
    for op in ops:
        shape = tuple(op.attrs[d] for d in "mnk") if "m" in op.attrs else None
        out[(op.name, op.layer, op.attrs.get("micro_step"))] = setup.compute.op_time_s(
            op.op_class, op.flops, op.bytes_accessed, op.attrs.get("precision", "bf16"),
            shape, op.attrs.get("launch", ""))
    return out


def test_an_nvfp4_step_is_faster_than_mxfp8_by_its_gemms_and_quantize_kernels():
    """One B300, one rank: the step is its kernels in a row, so NVFP4 saves the GEMMs'
    time at 3.419x instead of 1.7525x the bf16 rate, less its dearer quantize kernels."""
    mx, nv = _setup(_scenario("fp8", fp8_recipe="mxfp8")), _setup(_scenario("fp4"))
    mx_ops, nv_ops = _kernel_s(mx), _kernel_s(nv)
    gemm = {k: t for k, t in nv_ops.items() if k in mx_ops and "quantize" not in k[0]
            and mx_ops[k] != t}
    assert gemm and all(nv_ops[k] < mx_ops[k] for k in gemm)
    saved = sum(mx_ops.values()) - sum(nv_ops.values())
    gemm_saved = sum(mx_ops[k] - nv_ops[k] for k in gemm)
    cast = sum(t for k, t in nv_ops.items() if k[0].startswith("nvfp4_quantize")) - sum(
        t for k, t in mx_ops.items() if k[0].startswith("te_cast_transpose"))
    assert cast > 0 and saved == pytest.approx(gemm_saved - cast, rel=1e-9)
    step_mx = run_setup(mx).metrics.iteration_time_s
    step_nv = run_setup(nv).metrics.iteration_time_s
    assert step_mx - step_nv == pytest.approx(saved, rel=1e-6)
    assert step_nv < step_mx


def test_mxfp8_casts_are_unchanged_by_the_shared_gemm_rewrite():
    # fp8.low_precision_ops now takes the operand width: FP8's GEMM still reads 1-byte operands
    layer = fp8_layer(_block(), "mxfp8")
    up = next(op for op in layer.forward if op.name == "up")
    assert up.precision == "fp8" and up.bytes_accessed == (M * K + K * N) + 2 * M * N


def test_a_refit_keeps_the_sourced_fp4_speedup_beside_the_fp8_one():
    from simulator.compute.training_fit import FP4_SPEEDUP, FP8_SPEEDUP
    from simulator.validation.training import fit
    entry = {"gpus": ["B300"], "time_factor": {"matmul": {"value": 1.3, "source": "fit"}},
             "kernel_overhead_us": {"value": 1.0, "source": "fit"}}
    previous = {FP8_SPEEDUP: {"value": 1.7525, "source": "TE"},
                FP4_SPEEDUP: {"value": 3.419, "source": "TE"}}
    kept = fit._with_sourced(entry, previous)
    assert kept[FP4_SPEEDUP] == previous[FP4_SPEEDUP]
    assert list(kept) == ["gpus", "time_factor", FP8_SPEEDUP, FP4_SPEEDUP,
                          "kernel_overhead_us"]
