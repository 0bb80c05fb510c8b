"""torchtitan's tensor parallelism under float8 tensorwise: torchao's float8 TP styles cast a
column-parallel GEMM's input (and, backward, a row-parallel GEMM's output gradient) to FP8
before the all-gather, so a block's all-gathers move one byte an element and each rank casts
only its ``1 / tp`` of the rows; the reduce-scatters stay 16-bit. The rowwise recipe and
Megatron (Transformer Engine) keep 16-bit gathers here."""

from __future__ import annotations

import pytest

from simulator.models import load_model
from simulator.models.costs import layer_costs
from simulator.models.fp8 import COMPILED_CAST_BYTES, CAST_BYTES, fp8_layer
from simulator.strategies import World
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.frameworks.torchtitan import TorchtitanConfig
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.generate import build_parallel
from simulator.strategies.parallel.tp import gathered_input

GPT2 = load_model("gpt2-small")
H, S, TP = GPT2.hidden, 256, 2
PLAN = ParallelPlan(tp=TP, sequence_parallel=True)


def _tp_sizes(cfg, recipe):
    ops = build_parallel(GPT2, PLAN, cfg, World(TP, TP), seq_len=S,
                         fp8_recipe=recipe).classes[0].ops
    sizes = {}
    for op in ops:
        if op.comm.startswith("tp.") and op.layer == "block.0":
            sizes.setdefault(op.collective, set()).add(op.size_bytes)
    return sizes


def test_torchtitan_tensorwise_gathers_a_blocks_activations_in_fp8():
    act = 1 * S * H * 2                              # micro-batch 1, bf16: 393,216 bytes
    titan = TorchtitanConfig(micro_batch=1, grad_accum=1)
    assert _tp_sizes(titan, "tensorwise") == {"all_gather": {act // 2},
                                              "reduce_scatter": {act}}
    assert _tp_sizes(titan, "rowwise") == {"all_gather": {act}, "reduce_scatter": {act}}
    assert _tp_sizes(titan, None) == {"all_gather": {act}, "reduce_scatter": {act}}
    megatron = MegatronConfig(micro_batch=1, grad_accum=1, sequence_parallel=True,
                              tensor_model_parallel_size=TP)
    assert _tp_sizes(megatron, "current") == {"all_gather": {act}, "reduce_scatter": {act}}


def test_an_fp8_gathered_input_is_cast_on_the_ranks_rows():
    block = next(x for x in layer_costs(GPT2, 1, S, "bf16", True, tp=TP, sp=True)
                 if x.kind == "transformer_block")
    plain = fp8_layer(block, "tensorwise")
    shard = fp8_layer(block, "tensorwise", gathered=gathered_input(block.kind), tp=TP)
    casts = {op.name: op for op in (*plain.forward, *plain.backward)
             if op.name.startswith("float8_cast.")}
    cast_shard = {op.name: op for op in (*shard.forward, *shard.backward)
                  if op.name.startswith("float8_cast.")}
    gemms = {op.name: op for op in (*block.forward, *block.backward)}
    moved = {n for n in casts if casts[n].bytes_accessed != cast_shard[n].bytes_accessed}
    # the inputs the SP layout gathers: QKV and MLP-up forward, output-projection and
    # MLP-down output gradients backward
    assert moved == {"float8_cast.qkv_proj", "float8_cast.mlp_up",
                     "float8_cast.attn_out.dgrad", "float8_cast.mlp_down.dgrad"}
    for name in moved:
        g = gemms[name.removeprefix("float8_cast.")]
        per = CAST_BYTES if g.launch != "compiled" else COMPILED_CAST_BYTES
        act = g.m * g.k                                  # the activation operand
        weight = g.k * g.n if not name.endswith(".dgrad") else 0
        assert casts[name].bytes_accessed == pytest.approx(per * (act + weight))
        assert cast_shard[name].bytes_accessed == pytest.approx(per * (act / TP + weight))
