"""AMD Instinct fused attention (compute.yaml ``cdna3`` / ``cdna4`` ``flash_attention``): a
flash curve set from HipKittens' published MI355X measurements of AMD's own kernels (the CK
forward and the v3 assembly backward that Transformer Engine's CK backend runs), not from
the roofline, and not fitted on any training row. CDNA 3 takes CDNA 4's curve over (no
CDNA 3 measurement was found; an assumption the data file says)."""

from __future__ import annotations

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
