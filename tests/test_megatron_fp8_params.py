"""Megatron's FP8 parameters (``--fp8-param-gather``; NeMo's ``fp8_params``, MLPerf's
``FP8_PARAMS``): Transformer Engine holds each block's Linear weights in FP8
(``fp8_model_init``), so a rank keeps one byte a weight element instead of the
parameters' two, the distributed optimizer all-gathers the updated weights in FP8, and no
forward GEMM casts its weight; on Hopper each weight's transposed FP8 copy is made once a
step (Transformer Engine caches it until the optimizer updates the weight). Tested against
the byte formulas on GPT-2 small, TP2 x DP4 with the distributed optimizer."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.models.fp8 import TE_CAST_BYTES, TRANSPOSE_BYTES
from simulator.pipeline import build_setup
from simulator.scenario import scenario_from_dict
from simulator.strategies.frameworks.files import read_config

GPT2 = load_model("gpt2-small")
H, S, TP, GA = GPT2.hidden, 1024, 2, 2
BLOCK_WEIGHTS = 12 * H * H // TP        # qkv 3 h^2, proj h^2, fc 4 h^2, fc2 4 h^2, over TP


def _scenario(fp8_params: bool, precision: str = "fp8", topology: str = "dgx-h100",
              recipe: str = "delayed", **strategy):
    return scenario_from_dict({
        "name": "t", "model": "gpt2-small", "cluster": {"topology": topology},
        "simulation": {"variability": "none"},
        "training": {"micro_batch": 1, "seq_len": S, "grad_accum": GA, "precision": precision,
                     "fp8_recipe": recipe},
        "strategy": {"name": "megatron", "tensor_model_parallel_size": TP,
                     "sequence_parallel": True, "use_distributed_optimizer": True,
                     "fp8_param_gather": fp8_params, **strategy}})


def _class(fp8_params: bool):
    return build_setup(_scenario(fp8_params), extrapolate_steps=False).trace.classes[0]


def test_a_rank_holds_its_block_weights_at_one_byte():
    plain, fp8 = _class(False), _class(True)
    blocks = GPT2.layers
    assert plain.static_memory_bytes - fp8.static_memory_bytes == blocks * BLOCK_WEIGHTS


def test_the_distributed_optimizer_gathers_the_weights_in_fp8():
    def gathered(cls):
        return sum(op.size_bytes for op in cls.ops
                   if op.kind == "collective" and ".bucket" in op.name and "params" in op.name)
    plain, fp8 = gathered(_class(False)), gathered(_class(True))
    assert plain - fp8 == GPT2.layers * BLOCK_WEIGHTS       # bf16 2 bytes -> FP8 1 byte


def test_the_weight_is_not_cast_and_its_transpose_is_made_once_a_step():
    def kernel(cls, name):
        return [op.bytes_accessed for op in cls.ops if op.name == name]
    plain, fp8 = _class(False), _class(True)
    m, k, n = S, H, 3 * H // TP                   # qkv_proj: x [m, k] (SP: gathered), w [k, n]
    per = TE_CAST_BYTES["delayed"]
    # forward: the step's weight cast shared by its GA micro-batches, gone with FP8 weights
    assert kernel(plain, "te_cast_transpose.qkv_proj")[0] == pytest.approx(
        per * (m * k + k * n / GA))
    assert kernel(fp8, "te_cast_transpose.qkv_proj")[0] == pytest.approx(per * m * k)
    # backward (Hopper needs W^T in FP8): the transposed copy, 1 / GA of it a micro-batch
    assert kernel(plain, "fp8_transpose.qkv_proj.dgrad") == []
    assert kernel(fp8, "fp8_transpose.qkv_proj.dgrad")[0] == pytest.approx(
        TRANSPOSE_BYTES * k * n / GA)


@pytest.mark.parametrize("change, words", [
    ({"strategy": {"use_distributed_optimizer": False}}, "set use_distributed_optimizer"),
    ({"precision": "bf16"}, "training.precision is not fp8"),
    ({"precision": "fp4", "topology": "dgx-b200"}, "NVFP4 parameters are not modelled"),
])
def test_what_it_needs_is_asked_for_in_one_line(change, words):
    scn = (_scenario(True, **change["strategy"]) if "strategy" in change
           else _scenario(True, **change))
    with pytest.raises(ConfigError) as info:
        build_setup(scn)
    assert info.value.field == "strategy.fp8_param_gather"
    assert words in str(info.value) and "\n" not in str(info.value)


def test_mxfp8_parameters_gather_in_bf16_and_cost_as_without():
    """Megatron-Core all-gathers MXFP8 parameters in bf16 (into the gradient buffer) and
    casts them once a step, as the cached first-micro-batch casts do without the setting:
    the same kernels, collectives and memory (megatron.py ``fp8_weight_gathers``)."""
    def step(fp8_params):
        cls = build_setup(_scenario(fp8_params, topology="dgx-b200", recipe="mxfp8"),
                          extrapolate_steps=False).trace.classes[0]
        return cls.static_memory_bytes, [(op.name, op.bytes_accessed, op.size_bytes)
                                         for op in cls.ops]
    plain, fp8 = step(False), step(True)
    assert fp8 == plain
    assert any(name.startswith("te_cast") for name, _, _ in plain[1])


def test_the_argument_file_spelling(tmp_path):
    path = tmp_path / "run.args"
    path.write_text("--use-distributed-optimizer --fp8-param-gather\n")
    pieces = read_config(path)
    assert pieces.strategy["fp8_param_gather"] is True and "--fp8-param-gather" in pieces.used
