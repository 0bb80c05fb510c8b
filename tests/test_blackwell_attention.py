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


# SimuMax's kernel measurements on the DGX B200 of its runs (MooreThreads/SimuMax@4dcaae51
# configs/system/b200_bf16_ceperm.json, sdp_fwd / sdp_bwd accurate_efficient_factor, head
# 128, causal, batch 1): its FLOP convention counts the whole score square (forward
# 4 h d s^2, backward 10 h d s^2) over 2,250 TFLOP/s
SIMUMAX_131K = {16: (0.9888200685075171, 0.8266642928922248),     # heads: (fwd, bwd)
                8: (1.0027912176882745, 0.8264219110874139)}
SIMUMAX_32K = {16: (1.1653818418442836, 0.8717068455153332),
               8: (1.201756785556635, 0.9548560173212152)}


def _simumax_causal(s: int, fwd: float, bwd: float) -> float:
    """Forward + backward as a fraction of peak in causal FLOPs (3.5x the forward's)."""
    h, d, peak = 8, 128, 2250e12                      # (cancels: any h, d)
    t = 4 * h * d * s * s / (fwd * peak) + 10 * h * d * s * s / (bwd * peak)
    return 3.5 * 4 * h * d * causal_pairs(s) / t / peak


def test_long_sequences_fall_to_the_measured_rates():
    # 32,768 tokens (16,384.5 keys a query): the GB200 benchmark's own point, which the
    # saturating line misses by +9.4%
    eff_32k = _llama_efficiency()[-1]
    assert eff_32k == pytest.approx(0.5271, abs=5e-5)
    assert FLASH.curve(16384.5, 128) > 1.09 * eff_32k
    assert FLASH.efficiency(16384, 128) == pytest.approx(eff_32k, abs=5e-5)
    # 131,072 tokens: SimuMax's B200 kernels, the mean of its two head counts
    eff_131k = sum(_simumax_causal(131072, f, b) for f, b in SIMUMAX_131K.values()) / 2
    assert eff_131k == pytest.approx(0.4344, abs=5e-5)
    assert FLASH.efficiency(65536, 128) == pytest.approx(eff_131k, abs=5e-5)
    # the same file at 32,768 tokens runs 4-11% below the cuDNN point the model takes
    for f, b in SIMUMAX_32K.values():
        assert 0.89 * eff_32k < _simumax_causal(32768, f, b) < 0.97 * eff_32k


def test_the_long_sequence_factor_between_and_beyond_the_points():
    f1 = FLASH.efficiency(16384, 128) / FLASH.curve(16384, 128)
    f2 = FLASH.efficiency(65536, 128) / FLASH.curve(65536, 128)
    # 1 up to 8,192 keys (where cuDNN's efficiency peaks), every head dimension
    for keys in (126, 2048, 8192):
        for head in (64, 96, 128):
            assert FLASH.efficiency(keys, head) == FLASH.curve(keys, head)
    # linear in log(keys): 32,768 is halfway from 16,384 to 65,536, 11,585 halfway to 16,384
    assert FLASH.long_factor(32768) == pytest.approx((f1 + f2) / 2)
    assert FLASH.long_factor(8192 * 2 ** 0.5) == pytest.approx((1 + f1) / 2)
    # held beyond the last point, and the same factor at head 64
    assert FLASH.long_factor(262144) == pytest.approx(f2)
    assert FLASH.efficiency(65536, 64) == pytest.approx(FLASH.curve(65536, 64) * f2)
    # Hopper has no long-sequence measurement: its curve keeps rising
    hopper = load_compute_calibration().families["hopper"].flash
    assert hopper.long_keys == () and hopper.long_factor(65536) == 1.0


def test_a_bad_long_keys_entry_names_its_field():
    import copy
    import yaml
    from importlib import resources

    from simulator.compute import ComputeCalibration
    from simulator.errors import ConfigError
    data = yaml.safe_load((resources.files("simulator") / "data" / "compute.yaml").read_text())
    for change, field in (
            (lambda e: e["efficiency"].update({4096: 0.5}), "efficiency"),
            (lambda e: e["efficiency"].update({32768: 1.5}), "efficiency.32768"),
            (lambda e: e.update({"from": -1}), "from"),
            (lambda e: e.pop("source"), None),
            (lambda e: e.update({"heads": 8}), None)):
        bad = copy.deepcopy(data)
        change(bad["families"]["blackwell"]["flash_attention"]["long_keys"])
        with pytest.raises(ConfigError) as info:
            ComputeCalibration.from_dict(bad)
        where = "families.blackwell.flash_attention.long_keys"
        assert info.value.field == (f"{where}.{field}" if field else where)
