"""FP8 training: the blocks' Linear GEMMs at the FP8 rate with their casts; refused on A100."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.compute import ComputeModel
from simulator.compute.training_fit import IDENTITY
from simulator.errors import ConfigError
from simulator.hardware import check_training_precision, gpu_spec
from simulator.models.costs import layer_costs
from simulator.models.spec import load_model
from simulator.strategies import FSDPConfig, World
from simulator.strategies.fsdp import fsdp

T = 1024
MODEL = load_model("llama-2-7b")


def test_a100_refuses_fp8_in_one_line():
    with pytest.raises(ConfigError) as info:
        check_training_precision(gpu_spec("A100-SXM4-80GB"), "fp8")
    assert info.value.field == "training.precision"
    assert "no FP8 tensor cores" in str(info.value) and "\n" not in str(info.value)
    check_training_precision(gpu_spec("H100-SXM"), "fp8")          # modelled: no error
    check_training_precision(gpu_spec("B200"), "fp4")              # NVFP4: no error


def test_fp8_linears_with_their_casts():
    bf16 = layer_costs(MODEL, 1, T, "bf16")[1]
    fp8 = layer_costs(MODEL, 1, T, "fp8")[1]
    ops = {op.name: op for op in fp8.forward}
    h = MODEL.hidden
    qkv = ops["qkv_proj"]
    assert qkv.precision == "fp8" and qkv.flops == next(
        o.flops for o in bf16.forward if o.name == "qkv_proj")
    # 1-byte operands, bf16 output: x [T, h], w [h, 3h], y [T, 3h]
    assert qkv.bytes_accessed == T * h + h * 3 * h + 2 * T * 3 * h
    # cast of x and w: amax read 2 + cast read 2 + write 1 bytes per element
    assert ops["float8_cast.qkv_proj"].bytes_accessed == 5 * (T * h + h * 3 * h)
    assert ops["attn_core"].precision == "" and ops["norm1"].precision == ""
    bwd = {op.name: op for op in fp8.backward}
    # dgrad: cast dY [T, 3h] and transpose W; wgrad: transpose X (dY reused)
    assert bwd["float8_cast.qkv_proj.dgrad"].bytes_accessed == 5 * T * 3 * h
    assert bwd["float8_transpose.qkv_proj.dgrad"].bytes_accessed == 2 * 3 * h * h
    assert bwd["float8_transpose.qkv_proj.wgrad"].bytes_accessed == 2 * h * T
    head = layer_costs(MODEL, 1, T, "fp8")[-1]          # the LM head stays bf16
    assert all(op.precision == "" for op in head.forward)
    assert fp8.activation_bytes == bf16.activation_bytes


def test_fp8_gemm_runs_at_twice_the_bf16_peak():
    # the compute model itself (training_fit.yaml's bf16 factors off: they are fitted on
    # bf16 runs and do not apply to fp8)
    m = ComputeModel(gpu_spec("H100-SXM"), fit=IDENTITY)
    # the datasheet: 1,979 dense FP8 against 989 BF16 TFLOP/s
    assert m.peak_flops("matmul", "fp8") == pytest.approx(2 * m.peak_flops("matmul", "bf16"),
                                                          rel=1e-3)
    shape, flops = (8192, 8192, 8192), 2.0 * 8192 ** 3
    t16 = m.op_time_s("matmul", flops, 0.0, "bf16", shape=shape)
    t8 = m.op_time_s("matmul", flops, 0.0, "fp8", shape=shape)
    assert t8 == pytest.approx(t16 / 2, rel=0.03)      # fixed half_time and launch aside


def test_fp8_ops_carry_their_precision_into_the_trace():
    layers = layer_costs(MODEL, 1, T, "fp8")
    trace = fsdp(layers[:2] + layers[-1:], FSDPConfig(), World(8, 8))
    by = {o.name: o for o in trace.classes[0].ops if o.phase == "forward"}
    assert by["qkv_proj"].attrs["precision"] == "fp8"
    assert "precision" not in by["attn_core"].attrs


def _step(strategy: dict, precision: str, **training) -> tuple:
    """(step time, ops of the first class) of Llama 3 8B on one DGX H100 under
    ``strategy`` at ``precision``; the step fits in memory."""
    from simulator.pipeline import build_setup, run_setup
    from simulator.scenario import scenario_from_dict
    scn = scenario_from_dict({
        "name": "fp8", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100"},
        "strategy": strategy, "simulation": {"variability": "none"},
        "training": {"seq_len": 4096, "micro_batch": 1, "precision": precision, **training}})
    setup = build_setup(scn, extrapolate_steps=False)
    metrics = run_setup(setup).metrics
    assert not metrics.oom
    return metrics.iteration_time_s, setup.trace.classes[0].ops


@pytest.mark.parametrize("strategy, quoted", [
    # configurations that fit Llama 3 8B on 80 GB (an out-of-memory step's time is not a
    # price: its allocations wait on everything else running, the host's launches included);
    # docs/compute.md quotes the bf16 -> fp8 step-time ratio of the first five
    ({"name": "fsdp"}, "FSDP x{} (tensorwise)"),
    ({"name": "torchtitan"}, "torchtitan x{}"),                  # pure FSDP2, DP generator
    ({"name": "megatron", "use_distributed_optimizer": True}, "Megatron DDP x{}"),
    ({"name": "megatron", "tensor_model_parallel_size": 2, "sequence_parallel": True,
      "use_distributed_optimizer": True}, "Megatron TP2+SP x{}"),
    ({"name": "megatron", "use_torch_fsdp2": True}, "Megatron FSDP2 x{}"),
    ({"name": "megatron", "pipeline_model_parallel_size": 2, "use_distributed_optimizer": True},
     None),
    ({"name": "deepspeed", "zero_optimization": {"stage": 1}}, None),
])
def test_fp8_reaches_the_gemms_of_every_pytorch_framework(strategy, quoted):
    bf16, _ = _step(strategy, "bf16")
    fp8, ops = _step(strategy, "fp8")
    if quoted:
        docs = " ".join((Path(__file__).resolve().parents[1] / "docs" / "compute.md")
                        .read_text().split())
        assert quoted.format(f"{bf16 / fp8:.2f}") in docs
    gemms = [o for o in ops if o.op_class == "matmul" and o.name == "qkv_proj"]
    casts = [o for o in ops if o.name.startswith(("float8_cast", "te_cast_transpose"))]
    assert gemms and all(o.attrs["precision"] == "fp8" for o in gemms)
    assert casts                                    # the recipe's cast kernels
    assert fp8 < bf16                               # FP8 GEMMs at twice the rate, less casts


def test_the_fp8_recipe_reaches_a_parallel_plan():
    strategy = {"name": "megatron", "tensor_model_parallel_size": 2, "sequence_parallel": True,
                "use_distributed_optimizer": True}
    _, delayed = _step(strategy, "fp8")              # Megatron-LM's default recipe
    _, current = _step(strategy, "fp8", fp8_recipe="current")
    kinds = lambda ops: {o.name.split(".")[0] for o in ops    # noqa: E731
                         if o.name.startswith(("float8", "te_cast"))}
    assert kinds(delayed) == kinds(current) == {"te_cast_transpose"}
    cast = lambda ops: sum(o.bytes_accessed for o in ops     # noqa: E731
                           if o.name.startswith("te_cast_transpose"))
    assert cast(current) > cast(delayed)     # current scaling's amax pass reads each input


@pytest.mark.parametrize("scenario, why", [
    ("resnet50-ddp-8gpu", "resnet-50 has no transformer Linear layers"),
    ("resnet50-tf-mirrored-8gpu", "tf_mirrored runs no FP8 GEMMs"),
])
def test_fp8_where_nothing_runs_it_is_refused_in_one_line(scenario, why):
    from simulator.pipeline import build_setup
    from simulator.scenario import load_scenario
    scn = load_scenario(scenario, ["cluster.topology=dgx-h100", "training.precision=fp8"])
    with pytest.raises(ConfigError, match=why) as info:
        build_setup(scn)
    assert info.value.field == "training.precision"
