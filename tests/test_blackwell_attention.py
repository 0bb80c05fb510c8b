"""Blackwell fused attention (compute.yaml ``blackwell`` ``flash_attention``): the curve set
from cuDNN's own SDPA training benchmark on a GB200 (NVIDIA/cudnn-frontend@60e572b7
benchmark/sdpa_benchmark_training/results, cuDNN 9.22.0, BF16, non-deterministic
backward), not fitted on any training row. Before it, Blackwell's attention ran on the
top-level FLOPs-only curve (eff_max 0.60, an A100 FlashAttention-2 estimate) and a
windowed block's keys per query (GPT-OSS: about 126) changed nothing."""

from __future__ import annotations

import pytest
from test_amd_attention import _line_through     # least squares of 1/eff against 1/keys

from simulator.compute import ComputeModel
from simulator.compute.model import load_compute_calibration
from simulator.compute.training_fit import IDENTITY
from simulator.hardware import gpu_spec
from simulator.models.window import causal_pairs, window_pairs

GB200_BF16_PEAK = 2500e12
SEQ = (2048, 4096, 8192, 16384, 32768)
# llama3.1_20260424_100750.csv: batch 2, 64 query / 8 KV heads, head 128, causal (top_left)
LLAMA_FWD_MS = (0.125, 0.391, 1.397, 5.150, 21.692)
LLAMA_BWD_MS = (0.389, 1.198, 4.127, 16.554, 71.756)
# gpt_oss_20260424_100011.csv: batch 2, 128 heads, head 64, causal, 128-token window, 4,096
GPT_OSS_FWD_MS, GPT_OSS_BWD_MS = 0.210, 0.465


def _llama_efficiency():
    """Forward FLOPs 4 b h d P (P the causal pairs), forward + backward 3.5x of them."""
    out = []
    for s, f, b in zip(SEQ, LLAMA_FWD_MS, LLAMA_BWD_MS):
        fwd_flops = 4 * 2 * 64 * 128 * causal_pairs(s)
        out.append(3.5 * fwd_flops / ((f + b) * 1e-3) / GB200_BF16_PEAK)
    return out


FLASH = load_compute_calibration().families["blackwell"].flash


def test_head_128_is_the_line_through_the_five_llama_points():
    keys = [causal_pairs(s) / s for s in SEQ]         # (s + 1) / 2 keys per query
    eff = _llama_efficiency()
    # 0.514 ms at 2,048 tokens: 3.5 x 4 x 2 x 64 x 128 x 2,098,176 / 0.514e-3 / 2.5e15
    assert eff[0] == pytest.approx(3.5 * 4 * 2 * 64 * 128 * 2098176 / 0.514e-3 / 2.5e15)
    eff_max, keys_half = _line_through(keys, eff)
    assert FLASH.head_dims == (64, 128)
    assert FLASH.eff_max[1] == pytest.approx(eff_max, abs=5e-5)
    assert FLASH.keys_half == pytest.approx(keys_half, abs=0.5)
    for k, e in zip(keys, eff):
        assert FLASH.efficiency(k, 128) == pytest.approx(e, rel=0.10)


def test_head_64_passes_the_windowed_gpt_oss_point():
    s = 4096
    pairs = window_pairs(s, 128)
    assert pairs == 128 * 129 // 2 + (s - 128) * 128 == 516160
    fwd_flops = 4 * 2 * 128 * 64 * pairs
    # the benchmark's own forward TFLOP/s (161) counts the window's pairs, not s^2 / 2:
    # the kernel skips the tiles the band masks out
    assert fwd_flops / (GPT_OSS_FWD_MS * 1e-3) / 1e12 == pytest.approx(161, abs=0.5)
    eff = 3.5 * fwd_flops / ((GPT_OSS_FWD_MS + GPT_OSS_BWD_MS) * 1e-3) / GB200_BF16_PEAK
    assert eff == pytest.approx(0.0702, abs=5e-5)
    keys = pairs / s                                  # 126.02 keys per query
    assert FLASH.eff_max[0] == pytest.approx(eff * (keys + FLASH.keys_half) / keys, abs=5e-5)
    # windowed_block prices the kernel at round(pairs / s) = 126 keys
    assert FLASH.efficiency(round(keys), 64) == pytest.approx(eff, rel=0.001)


def test_a_gb200_windowed_attention_kernel_takes_the_benchmarks_time():
    """GPT-OSS's windowed block on a GB200 (4 sequences x 64 heads of 4,096 tokens, the
    benchmark's 2 x 128): forward + backward in about the measured 0.675 ms, where the
    top-level curve had priced it about 4x faster."""
    gb200 = gpu_spec("GB200")
    m = ComputeModel(gb200, fit=IDENTITY)
    s, pairs = 4096, window_pairs(4096, 128)
    fwd_flops = 4 * 4 * 64 * 64 * pairs
    shape = (4 * 64 * s, round(pairs / s), 64)
    fwd = m.op_time_s("attention", fwd_flops, 0.0, "bf16", shape=shape)
    bwd = m.op_time_s("attention", 2.5 * fwd_flops, 0.0, "bf16", shape=shape)
    launch = load_compute_calibration().kernel_launch_s
    rate = GB200_BF16_PEAK * gb200.power_capped_rate * FLASH.efficiency(126, 64)
    assert fwd == pytest.approx(fwd_flops / rate + launch)
    assert fwd + bwd == pytest.approx((GPT_OSS_FWD_MS + GPT_OSS_BWD_MS) * 1e-3, rel=0.03)
