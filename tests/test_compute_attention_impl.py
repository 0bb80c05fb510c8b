"""training.attention (sdpa / flash2 / flash3 / eager), the fitted factors' scope and the
FP8 rule, the FP8 table rows, and the host-dispatch mechanism (strategies/host.py)."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest

from simulator.compute import ComputeModel, load_compute_calibration
from simulator.compute.host_trace import launch_gaps
from simulator.compute.training_fit import IDENTITY, family_of
from simulator.errors import ConfigError
from simulator.hardware import gpu_spec
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import Training, scenario_from_dict
from simulator.strategies.host import dispatch_table
from test_cli import run_main

CAL = load_compute_calibration()
H100, A100 = gpu_spec("H100-SXM"), gpu_spec("A100-SXM4-80GB")
SHAPE, FLOPS = (32 * 4096, 2048, 128), 1e12


def _attention_s(curve, gpu, model: ComputeModel) -> float:
    """half_time + flops / (peak x eff(keys, head)) + launch, times the fitted factor."""
    peak = gpu.peak_flops["bf16"] * gpu.power_capped_rate
    kernel = curve.half_time_s + FLOPS / (peak * curve.efficiency(SHAPE[1], SHAPE[2]))
    return (kernel * model.fit.factor("attention", "bf16") + CAL.kernel_launch_s
            + model.fit.overhead_s("bf16"))


@pytest.mark.parametrize("impl", ["sdpa", "flash2", "flash3"])
def test_each_implementation_runs_on_its_own_curve(impl):
    hopper = CAL.families["hopper"]
    m = ComputeModel(H100, attention=impl)
    curve = hopper.kernels.get(impl, hopper.flash)
    assert m.op_time_s("attention", FLOPS, 0.0, "bf16", shape=SHAPE) == pytest.approx(
        _attention_s(curve, H100, m))


def test_flash3_is_faster_than_flash2_on_hopper_as_the_paper_reads():
    fa2, fa3 = (CAL.families["hopper"].kernels[k] for k in ("flash2", "flash3"))
    # arXiv:2407.08608, head 128, seq 16k causal: FA2 about 326, FA3 about 576 TFLOP/s
    # of 989 (forward + backward combined, compute.yaml)
    assert fa2.efficiency(8192, 128) == pytest.approx(326 / 989, rel=0.03)
    assert fa3.efficiency(8192, 128) == pytest.approx(576 / 989, rel=0.03)
    assert fa2.efficiency(256, 128) == pytest.approx(207 / 989, rel=0.03)


def test_flash2_on_ampere_is_the_family_curve_and_flash3_is_refused():
    m = ComputeModel(A100, attention="flash2")
    assert m.op_time_s("attention", FLOPS, 0.0, "bf16", shape=SHAPE) == pytest.approx(
        ComputeModel(A100).op_time_s("attention", FLOPS, 0.0, "bf16", shape=SHAPE))
    with pytest.raises(ConfigError, match="Hopper") as info:
        ComputeModel(A100, attention="flash3")
    assert info.value.field == "training.attention"


def test_cli_refuses_flash3_on_a100_in_one_line(capsys):
    code, out, err = run_main(capsys, "run", "--set", "training.attention=flash3",
                              "--set", "training.seq_len=1024")
    assert code == 2
    assert "training.attention" in err and "Hopper" in err
    assert len(err.strip().splitlines()) == 1


def test_attention_setting_and_the_flash_flag():
    assert Training().attention_impl == "sdpa"
    assert Training(flash_attention=False).attention_impl == "eager"
    eager = Training(attention="eager")
    assert eager.flash_attention is False and eager.attention_impl == "eager"
    assert Training(attention="flash2").attention_impl == "flash2"
    with pytest.raises(ValueError):
        Training(attention="flash2", flash_attention=False)
    with pytest.raises(ValueError):
        Training(attention="xformers")
    # unset: the scenario echo is the same as before the field existed
    assert "attention" not in Training().model_dump(mode="json")
    assert Training(attention="flash2").model_dump(mode="json")["attention"] == "flash2"


def test_the_gpus_factors_apply_to_every_strategy_the_stacks_to_the_eager_stack_only():
    fam = family_of(gpu_spec("H100-SXM"))
    assert fam.stack_strategies == ("fsdp", "torchtitan", "ddp", "deepspeed")
    for strategy in fam.stack_strategies:       # every framework on the eager stack
        assert ComputeModel(H100, strategy=strategy).fit is fam
    for strategy in ("megatron", "horovod"):    # Transformer Engine; TensorFlow's kernels
        fit = ComputeModel(H100, strategy=strategy).fit
        assert fit.time_factor["matmul"] == fam.time_factor["matmul"]
        assert fit.time_factor["attention"] == fam.time_factor["attention"]
        assert fit.time_factor["memory_bound"] == 1.0 and fit.kernel_overhead_s == 0.0
    assert ComputeModel(H100).fit is fam            # a bare kernel, no run: the family's


def test_fp8_gemms_take_the_bf16_matmul_factor():
    fam = family_of(gpu_spec("H100-SXM"))
    assert fam.factor("matmul", "fp8") == fam.time_factor["matmul"]
    assert fam.overhead_s("fp8") == fam.kernel_overhead_s
    # fp16 is bf16's kernels at the same rates: one price (tests/test_half_precision_price.py)
    assert fam.factor("matmul", "fp16") == fam.time_factor["matmul"]
    assert fam.factor("matmul", "tf32") == 1.0      # a precision the fit never saw
    assert fam.overhead_s("tf32") == 0.0


def test_fp8_rows_are_simulated_in_the_calibration_split_and_not_fitted():
    from simulator.validation.training.fit import calibration_rows
    from simulator.validation.training.tables import load_rows
    fp8 = [r for r in load_rows() if r.precision == "amp_fp8"]
    assert len(fp8) == 7
    assert all(r.split == "calibration" and r.not_modelled == "" for r in fp8)
    assert all(r.scenario["training"]["precision"] == "fp8" for r in fp8)
    fitted = {r.row_id for rows in calibration_rows().values() for r in rows}
    assert not fitted & {r.row_id for r in fp8}
    assert all(r.scenario["training"]["attention"] == "flash2" for r in load_rows()
               if r.table == "llm_foundry")


def _setup(host: str, micro_batch: int = 1, seq_len: int = 128, model: str = "mpt-125m"):
    scn = scenario_from_dict({
        "name": "host", "model": model,
        "training": {"micro_batch": micro_batch, "seq_len": seq_len},
        "cluster": {"topology": "dgx-h100", "gpus": 8},
        "strategy": {"name": "fsdp", "host_dispatch": host}}, "host")
    return build_setup(scn, "host")


def test_host_dispatch_is_one_delay_per_layer_and_phase_the_last_kernel_waits_for():
    setup = _setup("eager")
    ops = setup.trace.classes[0].ops
    by_id = {op.id: op for op in ops}
    host = [op for op in ops if op.stream == "host"]
    table = dispatch_table()["eager"]
    assert host and all(op.kind == "delay" for op in host)
    for h in host:
        kernels = [op for op in ops if op.stream == "compute" and op.kind == "compute"
                   and op.layer == h.layer and op.phase == h.attrs["dispatches"]
                   and op.attrs.get("micro_step") == h.attrs.get("micro_step")]
        assert h.phase == "host"
        assert h.duration_s == pytest.approx(len(kernels) * table[h.attrs["dispatches"]])
        waiting = [op for op in kernels if h.id in op.deps]
        assert waiting == [kernels[-1]]
        assert all(by_id[d].stream != "host" for op in kernels[:-1] for d in op.deps)
    assert not any(op.stream == "host" for op in _setup("none").trace.classes[0].ops)


def test_the_gpu_waits_for_the_host_when_kernels_are_short():
    # the kernels alone (no fitted per-kernel overhead): one 128-token sequence of a 125M
    # model runs faster on the GPU than the CPU launches it
    eager, none = (dataclasses.replace(s, compute=s.compute.with_fit(IDENTITY))
                   for s in (_setup("eager"), _setup("none")))
    host_s = sum(op.duration_s for op in eager.trace.classes[0].ops if op.stream == "host")
    t_eager = run_setup(eager).metrics.iteration_time_s
    t_none = run_setup(none).metrics.iteration_time_s
    assert t_none < host_s <= t_eager
    # a 1.3B model on 8 x 2048 tokens: the CPU runs ahead and the GPU never waits
    long_e, long_n = (dataclasses.replace(s, compute=s.compute.with_fit(IDENTITY))
                      for s in (_setup(h, 8, 2048, "mpt-1b") for h in ("eager", "none")))
    assert run_setup(long_e).metrics.iteration_time_s == pytest.approx(
        run_setup(long_n).metrics.iteration_time_s, rel=1e-3)


def test_launch_gaps_median_per_thread(tmp_path):
    events = [{"cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1, "ts": t}
              for t in (0.0, 10.0, 30.0, 40.0)]
    events += [{"cat": "cuda_runtime", "name": "cuLaunchKernelEx", "tid": 2, "ts": t}
               for t in (5.0, 105.0)]
    events.append({"cat": "cuda_runtime", "name": "cudaMemcpyAsync", "tid": 1, "ts": 50.0})
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    rows = launch_gaps(path)
    assert rows[0][:2] == (1, 4) and rows[0][2] == pytest.approx(10e-6)   # gaps 10, 20, 10
    assert rows[1][:2] == (2, 2) and rows[1][2] == pytest.approx(100e-6)


def test_delayed_scaling_casts_each_tensor_once_with_its_transpose():
    from simulator.models.costs import layer_costs
    from simulator.models.spec import load_model
    model, t = load_model("llama-2-7b"), 1024
    block = layer_costs(model, 1, t, "fp8", fp8_recipe="delayed")[1]
    eager = layer_costs(model, 1, t, "fp8")[1]
    h = model.hidden
    fwd = {op.name: op for op in block.forward}
    # x [T, h] and w [h, 3h]: read 2, write fp8 + its transpose = 4 bytes per element
    assert fwd["te_cast_transpose.qkv_proj"].bytes_accessed == 4 * (t * h + h * 3 * h)
    assert "float8_cast.qkv_proj" not in fwd
    bwd = {op.name: op for op in block.backward}
    assert bwd["te_cast_transpose.qkv_proj.dgrad"].bytes_accessed == 4 * t * 3 * h
    assert not [n for n in bwd if n.startswith("te_") and n.endswith(".wgrad")]
    casts = [op for op in block.backward if op.name.startswith("te_")]
    assert len(casts) == len([op for op in eager.backward if op.name.startswith("float8_")]) / 3
    assert Training(precision="fp8").fp8_recipe is None           # the framework's default:
    assert Training(precision="fp8").recipe_for("fsdp") == "tensorwise"       # torchao's
    assert Training(precision="fp8").recipe_for("megatron") == "delayed"      # Megatron-LM's
    assert "fp8_recipe" not in Training().model_dump(mode="json")
    assert Training(fp8_recipe="mxfp8").fp8_recipe == "mxfp8"     # Blackwell's block scaling
    with pytest.raises(ValueError):
        Training(fp8_recipe="nvfp4")
