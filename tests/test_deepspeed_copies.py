"""DeepSpeed ZeRO-3's own copy kernels (simulator/strategies/fsdp_copies.py, mechanism
``deepspeed``), not FSDP2's: after a coalesced all-gather a per-parameter ``torch.cat``
rebuilds the parameters (2 x the gathered bytes, on the all-gather's stream, which the
compute stream waits for); before a reduce-scatter the gradients are copied into the
contiguous bucket in the communication dtype, interleaved rank by rank and pre-divided
(P (w + r) + 2 P r + 2 P r bytes). Both generators: ZeRO-3 alone (the data-parallel one)
and ZeRO-3 with AutoTP (the model-parallel one)."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.models.costs import layer_costs
from simulator.strategies import World
from simulator.strategies.fsdp_copies import copy_in_bytes
from simulator.strategies.frameworks.deepspeed import DeepSpeedConfig, deepspeed
from simulator.strategies.frameworks.torchtitan import TorchtitanConfig
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.generate import build_parallel

GPT2 = load_model("gpt2-small")
H = GPT2.hidden                                          # 768
OUT, IN = "all_gather_copy_out.", "reduce_scatter_copy_in."


def _zero3(**extra) -> DeepSpeedConfig:
    return DeepSpeedConfig(micro_batch=1, grad_accum=1, zero_optimization={"stage": 3},
                           **extra)


def _copies(ops, kind: str, layer: str):
    return [o for o in ops if o.name.startswith(kind) and o.layer == layer]


def _check(ops, gather_stream: str, grad_stream: str) -> None:
    """Each copy-out runs on its all-gather's stream after it, and the compute waits for
    it; each reduce-scatter waits for the copies before it, on its stream."""
    outs = [o for o in ops if o.name.startswith(OUT)]
    ins = [o for o in ops if o.name.startswith(IN)]
    assert outs and ins
    for out in outs:
        ag = ops[out.deps[0]]
        assert ag.collective == "all_gather" and out.stream == ag.stream == gather_stream
        assert out.attrs["copies"] == "deepspeed"
        assert out.bytes_accessed == 2 * ag.size_bytes
        assert any(out.id in o.deps and o.stream == "compute" for o in ops)
    for cin in ins:
        rs = [o for o in ops if cin.id in o.deps]
        assert len(rs) == 1 and rs[0].collective == "reduce_scatter"
        assert cin.stream == rs[0].stream == grad_stream
        assert cin.attrs["copies"] == "deepspeed"


def test_zero3_data_parallel_prices_deepspeed_copies():
    cfg = _zero3()
    assert cfg.plan(8).fsdp_copies == "deepspeed"
    w, r = cfg.weight_bytes(), cfg.grad_reduce_bytes()
    trace = deepspeed(layer_costs(GPT2, 1, 256, "bf16"), cfg, World(8, 8), spec=GPT2,
                      seq_len=256)
    ops = trace.classes[0].ops
    _check(ops, "unshard", "post_backward")
    # a block: 12 h^2 + 13 h = 7,087,872 parameters over 8 ranks, no padding
    p = 12 * H * H + 13 * H
    outs, ins = _copies(ops, OUT, "block.0"), _copies(ops, IN, "block.0")
    assert len(outs) == 2 and len(ins) == 1
    assert {o.bytes_accessed for o in outs} == {2 * p * w}
    # bucket copy P (w + r), interleave cat 2 P r, pre-divide 2 P r
    assert ins[0].bytes_accessed == p * (w + r) + 2 * p * r + 2 * p * r == p * (w + 5 * r)


def test_zero3_with_autotp_prices_the_same_copies_in_the_model_parallel_generator():
    world = World(8, 8)
    ds = _zero3(tensor_parallel={"autotp_size": 2})
    titan = TorchtitanConfig(micro_batch=1, grad_accum=1,
                             parallelism={"tensor_parallel_degree": 2})
    w, r = ds.weight_bytes(), ds.grad_reduce_bytes()
    ops = build_parallel(GPT2, ds.plan(8), ds, world, seq_len=256).classes[0].ops
    _check(ops, "dp_gather", "dp")
    fsdp2 = build_parallel(GPT2, titan.plan(8), titan, world, seq_len=256).classes[0].ops
    # the TP2 shard of a block: 6 h^2 + 9.5 h = 3,546,240 parameters (a multiple of 4)
    p = 6 * H * H + 19 * H // 2
    outs, ins = _copies(ops, OUT, "block.2"), _copies(ops, IN, "block.2")
    assert {o.bytes_accessed for o in outs} == {2 * p * w}
    assert ins[0].bytes_accessed == p * (w + 5 * r)
    # the same gathers as FSDP2's, on another stream, and heavier gradient copies
    assert [o.bytes_accessed for o in outs] == \
        [o.bytes_accessed for o in _copies(fsdp2, OUT, "block.2")]
    assert _copies(fsdp2, IN, "block.2")[0].bytes_accessed == p * (
        titan.weight_bytes() + titan.grad_reduce_bytes())


def test_the_mechanism_is_named_and_checked():
    assert copy_in_bytes(1000, 2, 2) == 4000                 # FSDP2's chunk_cat
    assert copy_in_bytes(1000, 2, 2, "deepspeed") == 1000 * (2 + 5 * 2)
    assert copy_in_bytes(1000, 2, 4, "deepspeed") == 1000 * (2 + 4) + 4 * 1000 * 4
    with pytest.raises(ConfigError) as info:
        ParallelPlan(dp_shard=8, fsdp_copies="megatron")
    assert info.value.field == "plan.fsdp_copies"
