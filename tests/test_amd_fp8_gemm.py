"""CDNA 3 kernels from Azure's published ND MI300X v5 measurements (compute.yaml ``cdna3``):
its FP8 GEMMs on a curve of their own (hipBLASLt FP8 GEMMs) and its memory-bound kernels at
the measured BabelStream rate. Source: Azure/AI-benchmarking-guide
``Azure_Results/ND_MI300X_v5_results.md`` (as held in yosoyjay/AI-benchmarking-guide@a8263ef;
the earlier version in samuel-bohman/AI-benchmarking-guide@3de0c29). Kernel measurements,
not training rows: nothing here is fitted on a validation row."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.compute import ComputeModel
from simulator.compute.gemm_shape import shape_efficiency
from simulator.compute.model import load_compute_calibration
from simulator.energy.power import capped_gpu
from simulator.errors import ConfigError
from simulator.hardware import gpu_spec

# (m, n, k): measured TFLOP/s, hipblaslt-bench FP8 on the ND MI300X v5 (a8263ef)
AZURE_FP8 = {
    (1024, 1024, 1024): 278.2, (2048, 2048, 2048): 726.9, (4096, 4096, 4096): 1085.4,
    (8192, 8192, 8192): 1222.9, (16384, 16384, 16384): 1081.4,
    (32768, 32768, 32768): 1142.4, (1024, 2145, 1024): 396.2,
    (6144, 12288, 12288): 1148.7, (802816, 192, 768): 647.4,
}
TRIAD_TB_S, DATASHEET_TB_S = 4.10, 5.3      # BabelStream Triad, MI300X data sheet


def _mi300x():
    return ComputeModel(capped_gpu(gpu_spec("MI300X"), None), strategy="megatron")


def _tflops(model, precision, shape):
    flops = 2.0 * shape[0] * shape[1] * shape[2]
    seconds = model.op_time_s("matmul", flops, 0.0, precision, shape=shape) \
        - model.kernel_launch_s
    return flops / seconds / 1e12


def test_the_fp8_eff_max_is_the_best_measured_shape_through_the_shape_model():
    """eff_max = 1,222.9 / (2,614.9 FP8 peak x the MI300X board's 0.8516 x the shape
    model's efficiency at 8192^3 on 304 CUs)."""
    family = load_compute_calibration().families["cdna3"]
    shape_eff = shape_efficiency(8192, 8192, 8192, 304, family.gemm)
    assert shape_eff == pytest.approx(0.9981, abs=5e-5)
    curve = family.op_classes["matmul"].compute
    assert curve["fp8"].eff_max == pytest.approx(1222.9 / (2614.9 * 0.8516 * shape_eff),
                                                 abs=5e-5)
    assert _tflops(_mi300x(), "fp8", (8192, 8192, 8192)) == pytest.approx(1222.9, abs=0.2)


@pytest.mark.parametrize("shape, measured", sorted(AZURE_FP8.items()))
def test_the_model_against_azures_mi300x_fp8_gemms(shape, measured):
    """Validation of the shape model at FP8 (one shape set eff_max): the large shapes run
    0-13% fast; the small and skinny ones (launch-bound or one tile wide) far faster than
    measured, which the shape model without a fixed time cannot show."""
    error = _tflops(_mi300x(), "fp8", shape) / measured - 1
    large = min(shape) >= 4096
    assert (-0.001 <= error < 0.14) if large else error > 0.15


def test_bf16_gemms_keep_their_own_curve():
    shape_eff = shape_efficiency(8192, 8192, 8192, 304,
                                 load_compute_calibration().families["cdna3"].gemm)
    assert _tflops(_mi300x(), "bf16", (8192, 8192, 8192)) == pytest.approx(
        1307.4 * 0.8516 * 0.58 * shape_eff, rel=1e-4)


def test_cdna3_memory_bound_kernels_stream_at_the_measured_triad_rate():
    m = _mi300x()
    nbytes = 1e9
    seconds = m.op_time_s("elementwise", 0.0, nbytes, "bf16") - m.kernel_launch_s
    assert TRIAD_TB_S / DATASHEET_TB_S == pytest.approx(0.7736, abs=5e-5)
    assert seconds == pytest.approx(nbytes / (DATASHEET_TB_S * 1e12 * 0.7736), rel=1e-9)
    families = load_compute_calibration().families
    for op_class, entry in families["cdna3"].op_classes.items():
        assert entry.memory_efficiency == 0.7736, op_class
    # no CDNA 4 measurement: its kernels keep the data sheet's bandwidth
    assert {e.memory_efficiency for e in families["cdna4"].op_classes.values()} == {1.0}


def test_an_fp8_curve_outside_a_matmul_class_is_refused_naming_the_field(tmp_path):
    data = yaml.safe_load((Path(__file__).resolve().parents[1]
                           / "simulator/data/compute.yaml").read_text())
    data["op_classes"]["attention"]["compute"]["fp8"] = {
        "eff_max": 0.5, "half_time": "0 us", "source": "test"}
    path = tmp_path / "compute.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="unknown precision") as info:
        load_compute_calibration(path)
    assert info.value.field == "op_classes.attention.compute.fp8"
