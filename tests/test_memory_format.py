"""training.memory_format: a convolutional network in NCHW pays cuDNN's layout transposes and
its channel-parallel batch norm (simulator/models/layout.py), priced by compute.yaml's
channel_norm law; the framework's default layout when the scenario does not say."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from simulator.compute import ComputeModel
from simulator.compute.model import load_compute_calibration
from simulator.hardware import gpu_spec
from simulator.models import layer_costs, load_model
from simulator.models.layout import BACKWARD_PASSES, FORWARD_PASSES, TRANSPOSE_BYTES
from simulator.models.resnet import Conv
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario
from simulator.validation.gpu import nchw
from simulator.validation.paths import data_dir

BATCH = 4


def _resnet(memory_format: str):
    return replace(load_model("resnet-50"), memory_format=memory_format)


def _ops(layers):
    return [op for layer in layers for op in (*layer.forward, *layer.backward)]


def _convs():
    """ResNet-50's convolutions as resnet.py builds them: (layer, Conv)."""
    out = [("stem", Conv("conv1", 3, 64, 7, 2, 224))]
    c_in, size = 64, 56
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for i in range(blocks):
            stride = 2 if (i == 0 and stage > 0) else 1
            convs = [Conv("conv1", c_in, width, 1, 1, size),
                     Conv("conv2", width, width, 3, stride, size)]
            convs.append(Conv("conv3", width, 4 * width, 1, 1, convs[1].out_size))
            if stride != 1 or c_in != 4 * width:
                convs.append(Conv("downsample", c_in, 4 * width, 1, stride, size))
            out += [(f"layer{stage + 1}.{i}", c) for c in convs]
            c_in, size = 4 * width, (size + 2 - 3) // stride + 1
    return out


def test_nchw_transposes_every_convolution_but_the_large_stride_one_pointwise_ones():
    layers = {layer.name: layer for layer in layer_costs(_resnet("nchw"), BATCH, 0, "fp16")}
    moved = 0
    for name, conv in _convs():
        layer = layers[name]
        fwd = [op for op in layer.forward if op.name.startswith(f"{conv.name}.")
               and "_to_" in op.name]
        bwd = [op for op in layer.backward if op.name.startswith(f"{conv.name}.")
               and "_to_" in op.name]
        in_el = BATCH * conv.c_in * conv.size ** 2
        out_el = BATCH * conv.c_out * conv.out_size ** 2
        if conv.k == 1 and conv.stride == 1 and conv.out_size >= 28:
            assert fwd == [] and bwd == [], (name, conv)
            continue
        moved += 1
        # forward: the input to NHWC, the output back; 4 bytes an element read and written
        assert [(op.name.split(".", 1)[1], op.bytes_accessed) for op in fwd] == [
            ("x_to_nhwc", 2 * 4 * in_el), ("y_to_nchw", 2 * 4 * out_el)]
        if name == "stem":      # no gradient for the image: dy, then x for the weight gradient
            assert [op.bytes_accessed for op in bwd] == [2 * 4 * out_el, 2 * 4 * in_el]
        else:                   # dy, dx (data gradient); x, dy (weight gradient)
            assert [op.bytes_accessed for op in bwd] == [
                2 * 4 * out_el, 2 * 4 * in_el, 2 * 4 * in_el, 2 * 4 * out_el]
        assert all(op.op_class == "elementwise" and op.flops == 0 for op in fwd + bwd)
    # the stem, the 16 3x3, the 3 strided downsamples (stage 1's, stride 1 on 56 x 56, runs
    # in place) and the 1x1 of stages 3 and 4 (6 x 2 + 3 x 2) but stage 3's first conv1, on
    # the 28 x 28 map it takes in (v1.5 strides on the 3x3)
    assert moved == 1 + 16 + 3 + (12 - 1) + 6
    assert TRANSPOSE_BYTES == 4


def test_nhwc_and_plain_fp32_have_no_transposes_and_nchw_bn_carries_its_channels():
    nhwc = _ops(layer_costs(_resnet("nhwc"), BATCH, 0, "fp16"))
    fp32 = _ops(layer_costs(_resnet("nchw"), BATCH, 0, "fp32"))
    nchw = _ops(layer_costs(_resnet("nchw"), BATCH, 0, "fp16"))
    assert not any("_to_" in op.name for op in nhwc + fp32)
    assert all(op.shape is None for op in nhwc if op.op_class == "norm")
    bns = [op for op in nchw if op.op_class == "norm"]
    assert bns and all(op.shape is not None for op in bns)
    stem_bn = next(op for op in nchw if op.name == "bn1.bn")
    assert stem_bn.shape == (64, BATCH * 112 * 112, FORWARD_PASSES)
    stem_bwd = next(op for op in nchw if op.name == "bn1.bn.bwd")
    assert stem_bwd.shape == (64, BATCH * 112 * 112, BACKWARD_PASSES)
    # the same kernels otherwise: dropping the transposes and the shapes gives NHWC's ops
    plain = [replace(op, m=0, n=0, k=0) if op.op_class == "norm" else op
             for op in nchw if "_to_" not in op.name]
    assert plain == nhwc


@pytest.mark.parametrize("gpu", ["H200-SXM", "A100-SXM4-80GB"])
def test_the_channel_norm_law_is_the_formula_at_the_gpus_bandwidth(gpu):
    cal = load_compute_calibration()
    law = cal.channel_norm
    spec = gpu_spec(gpu)
    model = ComputeModel(spec, cal)           # a calibration given: no family fit
    scale = spec.hbm_bw_bytes_per_s / 4.8e12     # compute.yaml's reference: the H200's
    assert law.reference_bw == 4.8e12 and sorted(law.rates) == [3, 5]
    # the rates themselves are the calibration profile's fit (the next test refits them)
    for passes, (per_channel, device) in law.rates.items():
        for channels, each in ((64, 256 * 56 * 56), (2048, 256 * 7 * 7)):
            elements = channels * each
            expected = elements / (channels * per_channel * scale) + elements / (device * scale)
            got = model.op_time_s("norm", 1.0, 1.0, "fp16", shape=(channels, each, passes))
            assert got == pytest.approx(expected + cal.kernel_launch_s, rel=1e-12)


def test_the_law_is_what_the_calibration_profile_fits():
    cal = load_compute_calibration().channel_norm
    rows = nchw.rows(data_dir("gpu") / nchw.CALIBRATION)
    for direction, passes in (("forward", 3), ("backward", 5)):
        per, dev = nchw.fit([r for r in rows if r.direction == direction])
        assert per == pytest.approx(cal.rates[passes][0], rel=1e-3)
        assert dev == pytest.approx(cal.rates[passes][1], rel=1e-3)
    assert len(rows) == 2 * 53


def _setup(*sets, scenario="resnet50-ddp-1gpu"):
    return build_setup(load_scenario(scenario, list(sets)), scenario)


@pytest.mark.parametrize("scenario, sets, expected", [
    ("resnet50-ddp-1gpu", ["training.memory_format=nchw"], True),
    ("resnet50-ddp-1gpu", [], False),             # the scenario says nhwc
    # TensorFlow's layout optimizer (the Horovod scenario sets no layout): NHWC at fp16 and
    # bf16, NCHW in TF32 training (its fp32 backward convolutions)
    ("resnet50-horovod-8gpu", ["training.precision=fp16"], False),
    ("resnet50-horovod-8gpu", [], True),           # tf32
    ("resnet50-horovod-8gpu", ["training.precision=bf16"], False),
    ("resnet50-horovod-8gpu", ["training.precision=fp16", "training.memory_format=nchw"],
     True),
    ("resnet50-tf-mirrored-8gpu", [], False),      # fp16, nhwc said
])
def test_the_framework_default_layout_and_an_explicit_one(scenario, sets, expected):
    setup = _setup(*sets, scenario=scenario)
    names = [op.name for cls in setup.trace.classes for op in cls.ops]
    assert any("_to_nhwc" in n for n in names) == expected


def test_pytorch_defaults_to_nchw():
    data = load_scenario("resnet50-ddp-1gpu")
    assert data.training.memory_format == "nhwc"
    setup_default = build_setup(data.model_copy(update={"training": data.training.model_copy(
        update={"memory_format": None})}), "resnet50-ddp-1gpu")
    setup_nchw = _setup("training.memory_format=nchw")
    assert [op.name for op in setup_default.trace.classes[0].ops] == \
        [op.name for op in setup_nchw.trace.classes[0].ops]


def test_a_layout_on_a_transformer_is_refused_in_one_line():
    out = subprocess.run([sys.executable, "-m", "simulator", "run", "quickstart", "--set",
                          "training.memory_format=nhwc"], capture_output=True, text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "training.memory_format" in lines[0] \
        and "not a convolutional network" in lines[0] and "quickstart" in lines[0]
    bad = subprocess.run([sys.executable, "-m", "simulator", "run", "resnet50-ddp-1gpu",
                          "--set", "training.memory_format=chw"], capture_output=True, text=True)
    assert bad.returncode == 2 and "memory_format" in bad.stderr \
        and len(bad.stderr.strip().splitlines()) == 1


def test_nchw_fp16_on_the_h200_is_the_measured_step():
    """The held-out H200 AMP NCHW step (validation/gpu, run1_measurements.json: 87.9 ms),
    twice the channels-last one; within the GPU suite's 15% gate."""
    sets = ["cluster.topology=hgx-h200", "training.precision=fp16", "strategy.optimizer=sgd"]
    nchw_s = run_setup(_setup(*sets, "training.memory_format=nchw")).metrics.iteration_time_s
    nhwc_s = run_setup(_setup(*sets, "training.memory_format=nhwc")).metrics.iteration_time_s
    assert nchw_s == pytest.approx(0.0879, rel=0.15)
    assert 1.7 < nchw_s / nhwc_s < 2.5


def test_the_memory_format_study_answers_as_the_h200_measured(tmp_path, capsys):
    """The shipped study (scenarios/studies/cnn-memory-format.yaml): its H200 points' NCHW
    over channels-last step times against the measured ones (validation/gpu,
    run1/run2_measurements.json medians: AMP 87.9 / 44.7 ms, TF32 116.2 / 80.8 ms), and its
    report's answer: channels-last AMP is the fastest on both GPUs."""
    import csv
    from test_cli import run_main
    code, out, err = run_main(capsys, "study", "cnn-memory-format", "--out",
                              str(tmp_path / "s"), "--workers", "1")
    assert code == 0, err
    with open(tmp_path / "s" / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8 and all(r["status"] == "ok" for r in rows)
    step = {(r["cluster.topology"], r["training.precision"], r["training.memory_format"]):
            float(r["iteration_time_s"]) for r in rows}
    for precision, measured in (("fp16", 87.9 / 44.7), ("tf32", 116.2 / 80.8)):
        ratio = step["hgx-h200", precision, "nchw"] / step["hgx-h200", precision, "nhwc"]
        assert ratio == pytest.approx(measured, rel=0.15), precision
    assert "Precision fp16, activation layout nhwc gives the highest throughput" in out


def test_the_gpu_suite_counts_the_transposes_with_the_convolutions():
    """validate gpu sets simulated ops beside recorded kernels per class, the recorded ones
    classed by the operator that launched them: cuDNN's transposes run inside the
    convolution's, so the simulated ones count as conv too."""
    from simulator.models.layout import is_transpose
    from simulator.validation.gpu.validate import simulated_classes
    sets = ["training.micro_batch=8", "training.precision=fp16"]
    nchw = run_setup(_setup(*sets, "training.memory_format=nchw"))
    classes = simulated_classes(nchw)
    ops = {op.id: op for op in nchw.setup.trace.classes[0].ops}
    moved = sum(r.end_s - r.start_s for r in nchw.timeline.records
                if r.op_id in ops and is_transpose(ops[r.op_id].name))
    convs = sum(r.end_s - r.start_s for r in nchw.timeline.records
                if r.op_id in ops and ops[r.op_id].kind == "compute"
                and ops[r.op_id].op_class == "conv" and ops[r.op_id].phase != "optimizer")
    assert moved > 0 and classes["conv"] == pytest.approx(convs + moved, rel=1e-12)
