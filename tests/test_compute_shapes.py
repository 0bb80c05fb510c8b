"""Compute per GPU family: GEMM shape model, flash attention, power cap, family overrides."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from simulator.compute import ComputeModel, load_compute_calibration
from simulator.compute.gemm_fit import gemm_rows
from simulator.compute.gemm_shape import GemmShape, shape_seconds
from simulator.compute.training_fit import IDENTITY
from simulator.errors import ConfigError
from simulator.hardware import gpu_spec
from simulator.models.costs import layer_costs
from simulator.models.spec import load_model
from simulator.strategies import FSDPConfig, World
from simulator.strategies.fsdp import fsdp

CAL = load_compute_calibration()
H200, A100 = gpu_spec("H200-SXM"), gpu_spec("A100-SXM4-80GB")
TRACES = Path(__file__).resolve().parents[1] / "validation/gpu/traces"
ONE_TILE = GemmShape(((128, 128),), k_overhead=0.0, unaligned_efficiency=0.5)


def test_waves_of_tiles_over_the_sms():
    # 132 SMs, 128x128 tiles: 1024 x 2048 is 8 x 16 = 128 tiles, one wave; 1024 x 2176 is
    # 8 x 17 = 136 tiles, two waves: 6% more work, twice the time (wave quantisation)
    rate = 132.0          # 1 FLOP/s per SM
    one = shape_seconds(1024, 2048, 4096, 132, rate, ONE_TILE)
    two = shape_seconds(1024, 2176, 4096, 132, rate, ONE_TILE)
    tile = 2 * 128 * 128 * 4096          # FLOPs of one tile at 1 FLOP/s
    assert one == pytest.approx(tile) and two == pytest.approx(2 * tile)


def test_split_k_fills_the_gpu_and_alignment_falls_back():
    # 256 x 256 output = 4 tiles on 132 SMs, K = 65536: split-K by 16 gives 64 partial
    # tiles, one wave of K / 16 each (the splits stop at 16)
    t = shape_seconds(256, 256, 65536, 132, 132.0, ONE_TILE)
    assert t == pytest.approx(2 * 128 * 128 * 65536 / 16)
    # an odd dimension rules out the aligned kernels: 1 / unaligned_efficiency as slow
    a = shape_seconds(1024, 2048, 4096, 132, 132.0, ONE_TILE)
    assert shape_seconds(1024, 2048, 4095, 132, 132.0, ONE_TILE) == pytest.approx(
        2 * a * 4095 / 4096)


def test_k_overhead_penalises_short_reductions():
    g = GemmShape(((128, 128),), k_overhead=128.0, unaligned_efficiency=1.0)
    t = shape_seconds(1024, 2048, 128, 132, 132.0, g)
    assert t == pytest.approx(2 * 128 * 128 * (128 + 128))      # half the rate at K = 128


def test_matmul_with_a_shape_uses_the_family_model():
    m = ComputeModel(H200, fit=IDENTITY)      # the kernel model, no stack fit
    fam = CAL.families["hopper"]
    curve = fam.op_classes["matmul"].compute["bf16"]
    mnk = (4096, 4096, 4096)
    flops, nbytes = 2.0 * 4096 ** 3, 2.0 * 3 * 4096 ** 2
    rate = H200.peak_flops["bf16"] * curve.eff_max
    want = curve.half_time_s + shape_seconds(*mnk, H200.sm_count, rate, fam.gemm)
    assert m.op_time_s("matmul", flops, nbytes, "bf16", shape=mnk) == pytest.approx(
        want + CAL.kernel_launch_s)
    # without a shape: the FLOPs-only curve of the family
    assert m.op_time_s("matmul", flops, nbytes, "bf16") == pytest.approx(
        curve.half_time_s + flops / rate + CAL.kernel_launch_s)
    # a tensor-parallel shard (n / 8) is less efficient per FLOP than the whole GEMM
    shard = m.op_time_s("matmul", flops / 8, nbytes / 8, "bf16", shape=(4096, 512, 4096))
    assert shard > m.op_time_s("matmul", flops, nbytes, "bf16", shape=mnk) / 8


def test_h100_no_longer_uses_the_a100_curves():
    h, a = ComputeModel(gpu_spec("H100-SXM")), ComputeModel(A100)
    assert h.family == CAL.families["hopper"] and a.family == CAL.families["ampere"]
    assert h._curve("matmul", "bf16") != a._curve("matmul", "bf16")
    assert h._curve("matmul", "bf16") == CAL.families["hopper"].op_classes["matmul"].compute["bf16"]
    # a GPU without a family keeps the top-level entries
    assert ComputeModel(gpu_spec("B200"))._curve("matmul", "bf16") == \
        CAL.op_classes["matmul"].compute["bf16"]


def test_power_cap_scales_the_tensor_core_rate_only():
    full, capped = gpu_spec("H100-SXM"), gpu_spec("H100-SXM-96GB-500W")
    assert capped.power_cap_w == 500 and capped.power_capped_rate == 0.92
    f, c = ComputeModel(full), ComputeModel(capped)
    # the clocks drop, the datasheet peak (MFU's denominator) does not
    assert c.peak_flops("matmul", "bf16") == f.peak_flops("matmul", "bf16")
    flops = 2.0 * 8192 ** 3
    # eff_max * f / (f + f_half), f_half = eff_max * rate * half_time: the capped rate is
    # 0.92 of the full one, and so is its f_half
    half = CAL.families["hopper"].op_classes["matmul"].compute["bf16"].half_time_s
    rate = f.peak_flops("matmul", "bf16") * f._curve("matmul", "bf16").eff_max
    assert c.efficiency("matmul", "bf16", flops) == pytest.approx(
        0.92 * f.efficiency("matmul", "bf16", flops)
        * (flops + rate * half) / (flops + 0.92 * rate * half), rel=1e-12)
    assert c.peak_flops("elementwise", "bf16") == f.peak_flops("elementwise", "bf16")


def test_flash_attention_efficiency_by_head_dim_and_keys():
    m, fl = ComputeModel(H200, fit=IDENTITY), CAL.families["hopper"].flash
    peak = H200.peak_flops["bf16"]
    # head 96 sits halfway between the listed 64 and 128
    e64, e128 = fl.eff_max[fl.head_dims.index(64)], fl.eff_max[fl.head_dims.index(128)]
    assert fl.efficiency(2048, 96) == pytest.approx((e64 + e128) / 2 * 2048 / (2048 + fl.keys_half))
    flops = 1e11
    t = m.op_time_s("attention", flops, 0.0, "bf16", shape=(32 * 4096, 2048, 128))
    assert t == pytest.approx(fl.half_time_s + flops / (peak * fl.efficiency(2048, 128))
                              + CAL.kernel_launch_s)
    # short sequences are slower per FLOP
    assert fl.efficiency(128, 128) < 0.7 * fl.efficiency(2048, 128)


def test_ops_carry_their_shape_into_the_trace():
    model = load_model("llama-2-7b")
    layers = layer_costs(model, 1, 1024, "bf16")
    trace = fsdp(layers[:2] + layers[-1:], FSDPConfig(), World(8, 8))
    ops = {(o.name, o.phase): o for o in trace.classes[0].ops if o.kind == "compute"}
    h, f = model.hidden, model.ffn_hidden
    assert {k: ops[("mlp_down", "forward")].attrs[k] for k in "mnk"} == {"m": 1024, "n": h,
                                                                        "k": f}
    wgrad = ops[("mlp_down.wgrad", "backward")].attrs             # dW[f, h] = X^T dY
    assert (wgrad["m"], wgrad["n"], wgrad["k"]) == (f, h, 1024)
    attn = ops[("attn_core", "forward")].attrs                    # causal: (s + 1) / 2 keys
    assert (attn["m"], attn["n"], attn["k"]) == (32 * 1024, 512, 128)
    assert "m" not in ops[("norm1", "forward")].attrs


def test_bad_family_entries_name_the_field():
    import copy
    import yaml
    from importlib import resources
    data = yaml.safe_load((resources.files("simulator") / "data" / "compute.yaml").read_text())
    bad = copy.deepcopy(data)
    bad["families"]["hopper"]["gemm_shape"]["tiles"] = [[128]]
    from simulator.compute import ComputeCalibration
    with pytest.raises(ConfigError) as info:
        ComputeCalibration.from_dict(bad)
    assert info.value.field == "families.hopper.gemm_shape.tiles"
    bad = copy.deepcopy(data)
    bad["families"]["hopper"]["flash_attention"]["eff_max"][64] = 1.5
    with pytest.raises(ConfigError) as info:
        ComputeCalibration.from_dict(bad)
    assert info.value.field == "families.hopper.flash_attention.eff_max.64"


@pytest.mark.skipif(not TRACES.is_dir(), reason="validation/gpu traces not present")
def test_shape_model_against_the_h200_profiles():
    """The shipped Hopper constants on the measured H200 GEMMs: aligned rows within 20%
    (validation/gpu/gemm_fit.md), and better than the FLOPs-only curve on the worst row of
    the calibration split (the unaligned vocabulary GEMMs)."""
    rows = gemm_rows(TRACES)
    m = ComputeModel(H200, fit=IDENTITY)
    fam = CAL.families["hopper"]
    err = []
    for r in rows.itertuples():
        sim = m.op_time_s("matmul", r.flops, 0.0, r.precision, shape=(r.m, r.n, r.k)) \
            - CAL.kernel_launch_s
        err.append((sim / r.duration_s - 1, r))
    aligned = [e for e, r in err if r.n % 8 == 0 and r.m % 8 == 0 and r.k % 8 == 0]
    assert len(aligned) >= 60 and max(abs(e) for e in aligned) < 0.30
    assert sorted(abs(e) for e in aligned)[len(aligned) // 2] < 0.10
    assert fam.gemm.unaligned_efficiency < 0.5
    assert math.isfinite(sum(e for e, _ in err))


def test_mixed_lengths_keep_an_aligned_mean_shape():
    from simulator.models.seqlen import mixed_layer_costs
    model = load_model("bert-large")
    mixed = mixed_layer_costs(model, 2, [(64, 0.25), (128, 0.75)], "fp16", False)
    qkv = next(op for op in mixed[1].forward if op.name == "qkv_proj")
    # m = tokens: 0.25 * 128 + 0.75 * 256 = 224, a multiple of gcd(128, 256) = 128 -> 256
    # (rounded to the common divisor, so the aligned kernels still apply)
    assert (qkv.m, qkv.n, qkv.k) == (256, 3 * 1024, 1024)
    assert qkv.flops == pytest.approx(2 * 224 * 1024 * 3 * 1024)
