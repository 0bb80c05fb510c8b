"""Compute model: roofline oracles, efficiency curves, calibration loading, Kineto traces."""

import gzip
import json
import math
from pathlib import Path

import pytest
import yaml

from simulator.compute import ComputeModel, load_compute_calibration
from simulator.compute.training_fit import IDENTITY
from simulator.compute.kernels import (fit_from_traces, load_kineto_gemms,
                                       load_kineto_kernels, trace_summary)
from simulator.errors import ConfigError
from simulator.precision import PRECISIONS
from simulator.hardware import gpu_spec

A100 = gpu_spec("A100-SXM4-80GB")
H100 = gpu_spec("H100-SXM")
LAUNCH = 4e-6

_TRACE_DIRS = [Path(__file__).resolve().parents[1] / "shared/validation-data/traces/hta-a100",
               Path("/work/shared/validation-data/traces/hta-a100")]
TRACES = next((d for d in _TRACE_DIRS if d.is_dir()), None)
needs_traces = pytest.mark.skipif(TRACES is None, reason="shared HTA A100 traces not present")


def flat_calibration(eff_max=0.8, half_time="0 us", mem=0.85):
    """Every class and precision on the same curve: closed forms hold exactly."""
    curve = {"eff_max": eff_max, "half_time": half_time, "source": "test"}
    classes = {}
    for name, tc in (("matmul", True), ("attention", True), ("conv", True),
                     ("elementwise", False), ("norm", False)):
        precisions = PRECISIONS if tc else ("fp32",)
        classes[name] = {"tensor_cores": tc,
                         "memory_efficiency": {"value": mem, "source": "test"},
                         "compute": {p: dict(curve) for p in precisions}}
    return {"kernel_launch": {"value": "4 us", "source": "test"}, "op_classes": classes}


# -- roofline oracles --------------------------------------------------------------------
def test_big_matmul_is_compute_bound_and_matches_closed_form():
    m = ComputeModel(A100, flat_calibration(eff_max=0.8))
    flops, nbytes = 2 * 8192 ** 3, 3 * 8192 ** 2 * 2
    expected = flops / (312e12 * 0.8) + LAUNCH
    assert m.op_time_s("matmul", flops, nbytes, "bf16") == pytest.approx(expected, rel=1e-12)
    assert nbytes / (A100.hbm_bw_bytes_per_s * 0.85) < expected - LAUNCH


def test_big_matmul_shipped_calibration_uses_efficiency_curve():
    m = ComputeModel(A100, fit=IDENTITY)     # the roofline (training_fit.yaml's factors off)
    flops = 2 * 8192 ** 3
    eff = m.efficiency("matmul", "bf16", flops)
    assert 0.7 < eff <= 0.86
    assert m.op_time_s("matmul", flops, 1e6, "bf16") == pytest.approx(
        flops / (312e12 * eff) + m.kernel_launch_s, rel=1e-12)


def test_elementwise_is_memory_bound_and_matches_closed_form():
    m = ComputeModel(A100, flat_calibration(mem=0.85))
    nbytes, flops = 3 * 4 * 2 ** 28, 2 ** 28
    expected = nbytes / (2039e9 * 0.85) + LAUNCH
    assert m.op_time_s("elementwise", flops, nbytes, "fp32") == pytest.approx(expected, rel=1e-12)
    assert flops / (19.5e12 * 0.8) < expected - LAUNCH


def test_zero_work_costs_only_the_launch():
    m = ComputeModel(A100)
    assert m.op_time_s("matmul", 0, 0, "bf16") == pytest.approx(m.kernel_launch_s)
    assert m.op_time_s("elementwise", 0.0, 0.0, "fp32") == pytest.approx(4e-6)


# -- efficiency curves and precision -----------------------------------------------------
@pytest.mark.parametrize("op_class", ["matmul", "attention", "conv", "elementwise", "norm",
                                      "embedding", "loss", "optimizer"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_efficiency_increases_with_size_and_stays_below_eff_max(op_class, precision):
    m = ComputeModel(A100)
    effs = [m.efficiency(op_class, precision, 10.0 ** e) for e in range(4, 15)]
    assert all(b >= a for a, b in zip(effs, effs[1:]))
    cal = m.calibration.op_classes[op_class]
    eff_max = cal.compute[precision if cal.tensor_cores else "fp32"].eff_max
    assert 0 < effs[-1] <= eff_max <= 1
    assert m.efficiency(op_class, precision, 0) == 0.0


def test_tensor_core_classes_grow_with_size():
    m = ComputeModel(A100)
    assert m.efficiency("matmul", "bf16", 1e8) < 0.5 * m.efficiency("matmul", "bf16", 1e12)


def test_precision_changes_peak_312_156_19_5():
    m = ComputeModel(A100, flat_calibration(eff_max=0.7))
    flops = 1e13
    t = {p: m.op_time_s("matmul", flops, 0, p) - LAUNCH for p in PRECISIONS}
    assert t["bf16"] == pytest.approx(t["fp16"])
    assert t["tf32"] / t["bf16"] == pytest.approx(312 / 156)
    assert t["fp32"] / t["bf16"] == pytest.approx(312 / 19.5)


def test_memory_bound_classes_use_fp32_peak_whatever_the_precision():
    m = ComputeModel(A100, flat_calibration())
    assert m.peak_flops("elementwise", "bf16") == 19.5e12
    assert m.op_time_s("norm", 1e12, 0, "bf16") == m.op_time_s("norm", 1e12, 0, "fp32")
    assert m.peak_flops("matmul", "tf32") == 156e12


@pytest.mark.parametrize("op", [("matmul", 2 * 8192 ** 3, 4e8), ("elementwise", 1e8, 1e9),
                                ("attention", 1e11, 1e8), ("matmul", 1e8, 1e6)])
def test_h100_faster_than_a100(op):
    a, h = ComputeModel(A100), ComputeModel(H100)
    assert h.op_time_s(*op, "bf16") < a.op_time_s(*op, "bf16")


# -- bad inputs -------------------------------------------------------------------------
@pytest.mark.parametrize("flops, nbytes", [(-1, 0), (0, -5), (math.nan, 0), (0, math.inf),
                                           ("1e9", 0), (True, 0)])
def test_bad_amounts_raise_value_error(flops, nbytes):
    with pytest.raises(ValueError, match="flops|bytes_accessed"):
        ComputeModel(A100).op_time_s("matmul", flops, nbytes, "bf16")


def test_unknown_precision_and_op_class_are_config_errors_listing_valid_names():
    m = ComputeModel(A100)
    with pytest.raises(ConfigError, match="unknown precision 'int8'.*bf16"):
        m.op_time_s("matmul", 1, 1, "int8")
    with pytest.raises(ConfigError, match="unknown op_class 'softmax'.*matmul"):
        m.op_time_s("softmax", 1, 1, "bf16")


def test_scaled_multiplies_every_time_and_rejects_non_positive():
    m = ComputeModel(A100)
    slow = m.scaled(1.5)
    for args in [("matmul", 1e12, 1e6, "bf16"), ("elementwise", 0, 0, "fp32")]:
        assert slow.op_time_s(*args) == pytest.approx(1.5 * m.op_time_s(*args))
    assert slow.scaled(2).op_time_s("norm", 1e6, 1e8, "bf16") == pytest.approx(
        3 * m.op_time_s("norm", 1e6, 1e8, "bf16"))
    assert m.op_time_s("matmul", 1e12, 0, "bf16") == ComputeModel(A100).op_time_s(
        "matmul", 1e12, 0, "bf16")
    for bad in (0, -1, math.nan, math.inf):
        with pytest.raises(ValueError, match="factor"):
            m.scaled(bad)


# -- calibration file -------------------------------------------------------------------
def test_shipped_calibration_loads_with_sources():
    cal = load_compute_calibration()
    assert cal.kernel_launch_s == pytest.approx(4e-6)
    assert cal.launch_source
    for name, entry in cal.op_classes.items():
        assert entry.memory_source and 0 < entry.memory_efficiency <= 1
        assert all(c.source for c in entry.compute.values())
        assert set(entry.compute) == (set(PRECISIONS) if entry.tensor_cores else {"fp32"})


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["op_classes"]["matmul"]["compute"]["bf16"].update(eff_max=1.5),
     "op_classes.matmul.compute.bf16.eff_max"),
    (lambda d: d["op_classes"]["matmul"]["compute"]["bf16"].pop("source"),
     "op_classes.matmul.compute.bf16"),
    (lambda d: d["op_classes"]["norm"]["compute"]["fp32"].update(half_time=3),
     "op_classes.norm.compute.fp32.half_time"),
    (lambda d: d["op_classes"]["norm"]["compute"].update(bf16=d["op_classes"]["norm"]
                                                         ["compute"]["fp32"]),
     "op_classes.norm.compute.bf16"),
    (lambda d: d["op_classes"]["norm"]["memory_efficiency"].update(value=0),
     "op_classes.norm.memory_efficiency.value"),
    (lambda d: d["op_classes"].update(softmax={}), "op_classes.softmax"),
    (lambda d: d["kernel_launch"].update(value="4"), "kernel_launch.value"),
    (lambda d: d.update(extra=1), None),
])
def test_bad_calibration_file_names_file_and_field(tmp_path, edit, field):
    data = yaml.safe_load((Path(__file__).resolve().parents[1]
                           / "simulator/data/compute.yaml").read_text())
    edit(data)
    path = tmp_path / "compute.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:
        load_compute_calibration(path)
    assert info.value.source == str(path)
    assert info.value.field == field


def test_unreadable_calibration_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_compute_calibration(tmp_path / "missing.yaml")


# -- Kineto traces ----------------------------------------------------------------------
def _write_trace(path, gemms, peak=156e12, eff=0.5, t0_us=5.0):
    """Synthetic trace: aten::mm ops whose kernels take exactly t0 + flops/(peak*eff)."""
    events = []
    for i, (m, n, k) in enumerate(gemms):
        ts = 1000.0 * i
        dur = t0_us + 2 * m * n * k / (peak * eff) * 1e6
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "tid": 1, "ts": ts, "dur": 50,
             "args": {"Input Dims": [[m, k], [k, n]], "Input type": ["float", "float"]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1,
             "ts": ts + 10, "dur": 5, "args": {"correlation": i}},
            {"ph": "X", "cat": "kernel", "name": "cutlass_80_tensorop_s1688gemm_128x128",
             "tid": 7, "ts": ts + 20, "dur": dur, "args": {"correlation": i, "stream": 7}}]
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


def test_fit_recovers_a_known_curve(tmp_path):
    sizes = [(s, s, s) for s in (256, 384, 512, 768, 1024, 1536, 2048, 4096)] * 4
    trace = _write_trace(tmp_path / "t.json.gz", sizes, eff=0.55, t0_us=6.0)
    gemms = load_kineto_gemms(trace)
    assert len(gemms) == len(sizes) and set(gemms.precision) == {"tf32"}
    fit = fit_from_traces([trace], "tf32", peak_flops=156e12)
    assert fit.eff_max == pytest.approx(0.55, rel=1e-3)
    assert fit.half_time_s == pytest.approx(6e-6, rel=1e-2)


def test_fit_refuses_traces_without_shapes(tmp_path):
    trace = _write_trace(tmp_path / "t.json.gz", [(512, 512, 512)])
    with pytest.raises(ConfigError, match="cannot fit"):
        fit_from_traces([trace], "bf16")


@needs_traces
def test_loads_a_real_a100_trace():
    path = TRACES / "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
    df = load_kineto_kernels(path)
    assert list(df.columns[:3]) == ["name", "duration_s", "category"]
    assert (df.category == "conv").any() and (df.category == "gemm").any()
    assert (df.duration_s > 0).all() and df.duration_s.max() < 0.1
    summary = trace_summary(path)
    assert 0 < summary["queued_gap_p10_p50_p90_s"][1] < 10e-6


@needs_traces
def test_real_trace_gemm_fit_is_plausible():
    fit = fit_from_traces([TRACES / "trace_filter/sampled_rank-0.json.gz"], "tf32")
    assert 0.2 < fit.eff_max <= 1 and 0 <= fit.half_time_s < 50e-6


@needs_traces
def test_truncated_trace_fails_cleanly(tmp_path):
    raw = (TRACES / "trace_filter/sampled_rank-0.json.gz").read_bytes()
    bad = tmp_path / "truncated.json.gz"
    bad.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ConfigError, match="truncated") as info:
        load_kineto_kernels(bad)
    assert info.value.source == str(bad)


def test_corrupt_plain_json_and_missing_file_fail_cleanly(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"cat": "kernel"')
    with pytest.raises(ConfigError, match=str(bad)):
        load_kineto_kernels(bad)
    with pytest.raises(ConfigError, match="missing.json"):
        load_kineto_kernels(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text('{"foo": 1}')
    with pytest.raises(ConfigError, match="no traceEvents"):
        load_kineto_kernels(tmp_path / "x.json")
