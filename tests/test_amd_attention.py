"""AMD Instinct fused attention (compute.yaml ``cdna3`` / ``cdna4`` ``flash_attention``): a
flash curve set from HipKittens' published MI355X measurements of AMD's own kernels (the CK
forward and the v3 assembly backward that Transformer Engine's CK backend runs), not from
the roofline, and not fitted on any training row. CDNA 3 takes CDNA 4's curve over (no
CDNA 3 measurement was found; an assumption the data file says)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.compute import ComputeModel
from simulator.compute.model import load_compute_calibration
from simulator.energy.power import capped_gpu
from simulator.hardware import gpu_spec

# HipKittens@f09e968, MI355X, BF16, causal MHA, batch 16, 16 heads, head 128 (TFLOP/s,
# causal FLOPs counted as half; the backward does 2.5x the forward's FLOPs)
SEQ = (1024, 2048, 4096, 8192, 16384)
CK_FORWARD = (494.69, 610.53, 754.87, 843.54, 902.62)       # analysis/attn/fwd/plot.py
V3_BACKWARD = (388.75, 673.15, 876.78, 1034.06, 1108.68)   # mi355x_mha_bkwd_causal.json
MI355X_BF16_PEAK = 2516.6


def _measured_efficiency():
    """Forward + backward as one rate, 3.5 / (1/fwd + 2.5/bwd), over the 16-bit peak."""
    return [3.5 / (1 / f + 2.5 / b) / MI355X_BF16_PEAK for f, b in zip(CK_FORWARD, V3_BACKWARD)]


def _line_through(keys, eff):
    """Least squares of 1/eff = 1/eff_max + (keys_half/eff_max) / keys (two constants)."""
    xs, ys = [1 / k for k in keys], [1 / e for e in eff]
    n, sx, sy = len(xs), sum(xs), sum(ys)
    sxx, sxy = sum(x * x for x in xs), sum(x * y for x, y in zip(xs, ys))
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    intercept = (sy - slope * sx) / n
    return 1 / intercept, slope / intercept


@pytest.mark.parametrize("family", ["cdna3", "cdna4"])
def test_the_curve_is_the_line_through_the_five_published_points(family):
    keys = [s / 2 for s in SEQ]                  # causal: a query sees half the keys
    eff = _measured_efficiency()
    eff_max, keys_half = _line_through(keys, eff)
    flash = load_compute_calibration().families[family].flash
    assert flash.eff_max == (pytest.approx(eff_max, abs=5e-5),)
    assert flash.head_dims == (128,)
    assert flash.keys_half == pytest.approx(keys_half, abs=0.5)
    for k, e in zip(keys, eff):                  # five points, two constants: within 5%
        assert flash.efficiency(k, 128) == pytest.approx(e, rel=0.05)


def test_the_published_points_are_far_below_the_roofline_the_model_had():
    """What the model ran before: CDNA attention at the 16-bit peak (efficiency 1)."""
    assert max(_measured_efficiency()) < 0.42


@pytest.mark.parametrize("gpu, rate", [("MI300X", 0.8516), ("MI325X", 1.0)])
def test_a_cdna3_attention_kernel_runs_on_the_curve_at_its_boards_clocks(gpu, rate):
    """Llama 2 70B's attention at 8,192 tokens: 64 heads of 128, causal (4,096 keys per
    query); the MI300X's 750 W board holds 0.8516 of full clocks (power.yaml)."""
    model = ComputeModel(capped_gpu(gpu_spec(gpu), None), strategy="megatron")
    flops = 4 * 8192 * 4096 * 128 * 64
    t = model.op_time_s("attention", flops, 0.0, "bf16", shape=(8192, 4096, 128))
    eff = 0.4832 * 4096 / (4096 + 969)
    peak = gpu_spec(gpu).peak_flops["bf16"] * rate
    assert t - model.kernel_launch_s == pytest.approx(flops / (peak * eff), rel=1e-3)


# HipKittens@f09e968 analysis/bf16_gemm/mi350x/mi355x_bf16_gemm.json ('tflops_pytorch') and
# analysis/fp8_gemm/mi350x/mi355x_fp8_gemm.json ('tflops_hipblaslt'), MI355X, TFLOP/s
MI355X_BF16_GEMM = {4096: 1138.5, 8192: 1521.3, 16384: 1559.8}
MI355X_FP8_GEMM = {8192: 3233.19, 16384: 3293.23}


def _gemm_tflops(gpu, size, precision):
    model = ComputeModel(gpu_spec(gpu), strategy="megatron")
    flops = 2.0 * size ** 3
    t = model.op_time_s("matmul", flops, 0.0, precision, shape=(size, size, size))
    return flops / (t - model.kernel_launch_s) / 1e12


def test_cdna4_bf16_gemms_run_at_the_best_published_mi355x_rate():
    assert max(MI355X_BF16_GEMM.values()) / MI355X_BF16_PEAK == pytest.approx(0.6198, abs=5e-5)
    assert _gemm_tflops("MI355X", 16384, "bf16") == pytest.approx(1559.8, rel=1e-3)
    assert _gemm_tflops("MI355X", 8192, "bf16") == pytest.approx(1559.8, rel=1e-3)  # 4 waves


def test_cdna4_fp8_gemms_against_the_published_hipblaslt_rate_as_docs_amd_says():
    """The 16-bit curve at the FP8 peak: 0.6198 x 5,033.2 = 3,120 TFLOP/s, 3.5% and 5.3%
    below the two published FP8 GEMMs (docs/amd.md quotes these)."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "amd.md").read_text()
    docs = docs.replace("\n", " ")
    rate = _gemm_tflops("MI355X", 16384, "fp8")
    assert rate == pytest.approx(0.6198 * 5033.2, rel=1e-3)
    below = [1 - _gemm_tflops("MI355X", s, "fp8") / m for s, m in MI355X_FP8_GEMM.items()]
    assert f"curve at the FP8 peak ({rate:,.0f} TFLOP/s), run {below[0]:.1%} and " \
           f"{below[1]:.1%} below" in docs
