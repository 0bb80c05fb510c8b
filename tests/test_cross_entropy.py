"""Megatron-Core's unfused vocab-parallel cross entropy (``cross_entropy_loss_fusion:
false``; simulator/models/cross_entropy.py): the kernels of ``_VocabParallelCrossEntropy``
at core_v0.8.0 over the rank's ``tokens x vocab / tp`` logits, in fp32.

Bytes per logit with bf16 logits (e = 2): forward ``float`` 2 + 4, ``max`` 4, ``sub_max``
8, ``exp`` 8, ``sum`` 4, ``div`` 8 = 38; backward ``grad_mul`` 8, ``float.bwd`` 4 + 2 = 14.
The fused loss it replaces moves 2 x 2 = 4 each way (Transformer Engine's one kernel,
``cross_entropy_fusion_impl: te``). Megatron-Core's TorchScript-fused ``native`` one: forward
``logits_max`` 2 + 4, ``predicted_logits`` 8, ``softmax`` 8 = 22; backward ``gradients``
4 + 4 + 2 = 10.
"""

from __future__ import annotations

import dataclasses

import pytest

from simulator.models import load_model
from simulator.models.cross_entropy import megatron_cross_entropy, unfused_cross_entropy
from simulator.models.transformer import head_cost
from simulator.strategies import World
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.generate import build_parallel

GPT = load_model("gpt3-1.3b")


def test_the_unfused_kernels_and_their_bytes():
    # 2 sequences of 1,024 tokens, vocab split over tp 2: logits = 2,048 x vocab_rows
    head = head_cost(GPT, 2, 1024, 2, tp=2)
    fused = next(o for o in head.forward if o.name == "cross_entropy")
    logits = fused.flops / 5                     # LOSS_FLOPS per logit
    assert fused.bytes_accessed == pytest.approx(4 * logits)
    out = unfused_cross_entropy(head)
    fwd = {o.name: o.bytes_accessed / logits for o in out.forward if o.op_class == "loss"}
    bwd = {o.name: o.bytes_accessed / logits for o in out.backward if o.op_class == "loss"}
    assert fwd == pytest.approx({"ce.float": 6, "ce.max": 4, "ce.sub_max": 8, "ce.exp": 8,
                                 "ce.sum": 4, "ce.div": 8})
    assert bwd == pytest.approx({"ce.grad_mul.bwd": 8, "ce.float.bwd": 6})
    assert sum(fwd.values()) == pytest.approx(38) and sum(bwd.values()) == pytest.approx(14)
    # the rest of the head is untouched, in order (the loss last forward, first backward)
    assert [o.name for o in out.forward][:-6] == [o.name for o in head.forward][:-1]
    assert [o.name for o in out.backward][2:] == [o.name for o in head.backward][1:]


def test_a_layer_without_a_loss_is_left_as_it_is():
    head = head_cost(GPT, 1, 128, 2)
    plain = dataclasses.replace(head, forward=head.forward[:-1], backward=head.backward[1:])
    assert unfused_cross_entropy(plain) is plain


def test_the_native_fused_kernels_and_their_bytes():
    head = head_cost(GPT, 2, 1024, 2, tp=2)
    logits = next(o for o in head.forward if o.name == "cross_entropy").flops / 5
    out = megatron_cross_entropy(head, "native")
    fwd = {o.name: o.bytes_accessed / logits for o in out.forward if o.op_class == "loss"}
    bwd = {o.name: o.bytes_accessed / logits for o in out.backward if o.op_class == "loss"}
    assert fwd == pytest.approx({"ce.logits_max": 6, "ce.predicted_logits": 8,
                                 "ce.softmax": 8})
    assert bwd == pytest.approx({"ce.gradients.bwd": 10})
    # the FLOPs are the one-pass loss's, split over the kernels
    assert sum(o.flops for o in out.forward if o.op_class == "loss") == pytest.approx(5 * logits)
    assert sum(o.flops for o in out.backward if o.op_class == "loss") == \
        pytest.approx(2 * logits)


def _loss_bytes(fusion: bool, impl: str = "te") -> float:
    plan = ParallelPlan(pp=2, tp=2, dp_mode="ddp", sequence_parallel=True)
    cfg = MegatronConfig(micro_batch=1, grad_accum=2, cross_entropy_loss_fusion=fusion,
                         cross_entropy_fusion_impl=impl)
    trace = build_parallel(GPT, plan, cfg, World(plan.size, 4), seq_len=512)
    return sum(op.bytes_accessed for cls in trace.classes for op in cls.ops
               if op.kind == "compute" and op.op_class == "loss")


def test_the_megatron_field_prices_the_unfused_loss_on_the_last_stage():
    cfg = MegatronConfig()
    assert cfg.cross_entropy == "te"                   # one fused pass, as before the fields
    head = head_cost(GPT, 1, 512, 2, tp=2)
    logits = next(o for o in head.forward if o.name == "cross_entropy").flops / 5
    # two micro-batches on the last stage: te 2 x (4 + 4), native 2 x (22 + 10), unfused
    # 2 x (38 + 14) a logit; unfused whatever the implementation
    assert _loss_bytes(True) == pytest.approx(2 * 8 * logits)
    assert _loss_bytes(True, "native") == pytest.approx(2 * 32 * logits)
    assert _loss_bytes(False) == pytest.approx(2 * 52 * logits)
    assert _loss_bytes(False, "native") == pytest.approx(2 * 52 * logits)


def test_an_unknown_implementation_is_refused_naming_the_field():
    with pytest.raises(Exception) as err:
        MegatronConfig(cross_entropy_fusion_impl="triton")
    assert "cross_entropy_fusion_impl" in str(err.value)
