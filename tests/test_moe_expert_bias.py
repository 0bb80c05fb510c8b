"""The second expert GEMM's bias of a model with linear biases (GPT-OSS), as Megatron-Core's
``TEGroupedMLP._apply_bias`` adds it after the grouped GEMM (Megatron-LM@d7288711,
megatron/core/transformer/moe/experts.py): per expert ``t + b * p`` in fp32, concatenated,
cast back (simulator/models/moe.py ``expert_bias_ops``). Every byte count is the formula's,
written out here."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.models import load_model
from simulator.models.moe import expert_bias_ops, moe_block_cost
from simulator.strategies.parallel.moe import EP_COLLECTIVES

BF16 = 2


def test_the_bias_passes_bytes_per_element():
    fwd, bwd = expert_bias_ops(received=1000, h=64, e=BF16)
    elements = 1000 * 64
    # forward: b*p writes 4; t + bp reads 2 + 4, writes 4; cat reads 4, writes 4;
    # .to reads 4, writes 2
    assert fwd.bytes_accessed == (4 + (2 + 4 + 4) + (4 + 4) + (4 + 2)) * elements
    assert fwd.bytes_accessed == 28 * elements
    assert fwd.flops == 2 * elements
    # backward: .to's grad reads 2, writes 4; the grad to t cast back reads 4, writes 2;
    # (g p).sum(0) and (g b).sum(-1): read 4, write 4, read 4 each
    assert bwd.bytes_accessed == ((2 + 4) + (4 + 2) + 2 * (4 + 4 + 4)) * elements
    assert bwd.bytes_accessed == 36 * elements
    assert bwd.flops == 4 * elements
    assert (fwd.op_class, bwd.op_class) == ("elementwise", "elementwise")


def _names(ops):
    return [op.name for op in ops]


def test_gpt_oss_adds_it_after_the_second_expert_gemm_on_the_received_copies():
    model = load_model("gpt-oss-120b")
    assert model.bias
    # 4,096 tokens a rank, top-4: evenly routed over EP8, each rank receives t k copies
    received = 4096 * model.top_k
    layer = moe_block_cost(model, 1, 4096, BF16, True, expert_tokens=received,
                           local_experts=16, sort_chunks=True)
    fwd, bwd = _names(layer.forward), _names(layer.backward)
    assert fwd[fwd.index("moe_expert_down") + 1] == "moe_expert_bias"
    assert fwd[fwd.index("moe_expert_bias") + 1] == "moe_unsort_chunks"
    # backward: the bias's gradient first in the experts' backward
    assert bwd[bwd.index("moe_unsort_chunks.bwd") + 1] == "moe_expert_bias.bwd"
    assert bwd[bwd.index("moe_expert_bias.bwd") + 1] == "moe_expert_down.dgrad"
    (bias,) = [op for op in layer.forward if op.name == "moe_expert_bias"]
    assert bias.bytes_accessed == 28 * 16384 * 2880       # received x h, 28 bytes each


def test_a_model_without_biases_has_none_and_the_collectives_feed_the_bias_gradient():
    model = load_model("qwen3-30b-a3b")
    assert not model.bias
    layer = moe_block_cost(model, 1, 4096, BF16, True)
    assert "moe_expert_bias" not in _names(layer.forward)
    assert "moe_expert_bias.bwd" not in _names(layer.backward)
    biased = moe_block_cost(replace(model, bias=True), 1, 4096, BF16, True)
    assert "moe_expert_bias" in _names(biased.forward)
    # the combine's gradient (and, under expert TP, the gather of the gradients) must
    # arrive before the bias's gradient, the experts' first backward kernel
    feeds = {c.name: c.feeds for c in EP_COLLECTIVES if c.phase == "backward"}
    assert "moe_expert_bias.bwd" in feeds["moe_combine.bwd"]
    assert "moe_expert_bias.bwd" in feeds["moe_expert_scatter.bwd"]


@pytest.mark.parametrize("e", [2, 4])
def test_the_activation_bytes_follow_the_dtype(e):
    fwd, bwd = expert_bias_ops(received=10, h=10, e=e)
    assert fwd.bytes_accessed == (24 + 2 * e) * 100
    assert bwd.bytes_accessed == (32 + 2 * e) * 100


def _bias_ops(**strategy):
    from test_moe_host_sync import _ops
    return sorted({op.name for op in _ops("gpt-oss-120b", **strategy)
                   if op.name.startswith("moe_expert_bias")})


def test_transformer_engines_op_fuser_adds_the_bias_in_the_grouped_gemm():
    # eager TEGroupedMLP: its own passes; under use_transformer_engine_op_fuser TE's
    # GroupedLinear (scale_bias) hands bias and probabilities to the grouped GEMM
    assert _bias_ops() == ["moe_expert_bias", "moe_expert_bias.bwd"]
    assert _bias_ops(use_transformer_engine_op_fuser=True) == []


def test_the_validation_rows_run_the_op_fuser_where_their_preset_set_it():
    from simulator.validation.parallel import cases, nemo
    spec, root = cases.load(), cases.default_root()
    fused = {}
    for row in nemo.table_rows(root, spec, "blackwell"):
        if row["model"] == "GPT OSS 120B":
            scn = nemo.scenario_of(row, root, spec, "x", "blackwell")
            key = (nemo.gpu_of(row), nemo.release_of(row), row["precision"])
            fused[key] = scn["strategy"].get("use_transformer_engine_op_fuser", False)
    assert fused[("GB300", "26.08", "MXFP8")] and fused[("GB200", "26.08", "MXFP8")]
    assert not fused[("GB300", "26.06", "MXFP8")] and not fused[("B300", "26.06", "MXFP8")]
    assert not fused[("GB200", "26.04.01", "BF16")]
