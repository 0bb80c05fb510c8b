"""A frozen LM head computes only its input gradient (simulator/models/finetune.py
``_weight_gradient``): under LoRA (which freezes the whole base: NeMo's PEFT and Hugging
Face PEFT leave only the adapters trainable) and under ``freeze_head``, the head's
weight-gradient GEMM is dropped, as every frozen block Linear's is. The head's GEMMs name no
weight (its parameters are the layer's), so before 2026-12-06 its ``lm_head.wgrad`` was
kept: 2 t h v FLOPs too many a micro-batch."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.models import layer_costs, load_model
from simulator.models.finetune import Finetune

B, S = 1, 512
T = B * S
BASE = load_model("llama-2-7b")
H, V = BASE.hidden, BASE.vocab
LORA = Finetune(mode="lora", rank=16, alpha=32.0, targets=("o", "qkv"), dropout=0.1)


def _head(ft, tp=1):
    model = BASE if ft is None else replace(BASE, finetune=ft)
    head = layer_costs(model, B, S, "bf16", tp=tp)[-1]
    assert head.kind == "head"
    return head


def _flops(layer, name) -> float:
    return sum(op.flops for op in layer.backward if op.name == name)


@pytest.mark.parametrize("ft", [LORA, Finetune(mode="full", freeze_head=True)],
                         ids=["lora", "freeze_head"])
def test_a_frozen_head_keeps_its_input_gradient_only(ft):
    """lm_head [t, h] x [h, v]: dgrad dX = dY W^T, 2 t h v FLOPs, kept (the blocks below
    train); wgrad dW = X^T dY, 2 t h v FLOPs, gone."""
    full, frozen = _head(None), _head(ft)
    assert _flops(full, "lm_head.dgrad") == pytest.approx(2 * T * H * V)
    assert _flops(full, "lm_head.wgrad") == pytest.approx(2 * T * H * V)
    assert _flops(frozen, "lm_head.dgrad") == pytest.approx(2 * T * H * V)
    assert not [op.name for op in frozen.backward if op.name.endswith(".wgrad")]
    assert frozen.params == 0 and frozen.frozen_params == full.params
    # everything else of the head's backward (loss, final norm) is unchanged
    rest = [op for op in full.backward if op.name != "lm_head.wgrad"]
    assert [op.name for op in frozen.backward] == [op.name for op in rest]


def test_a_trained_head_keeps_its_weight_gradient():
    ft = Finetune(mode="full", freeze_embedding=True)     # the head still trains
    assert _flops(_head(ft), "lm_head.wgrad") == pytest.approx(2 * T * H * V)


def test_a_vocab_parallel_frozen_head_drops_its_shard_of_the_weight_gradient():
    """TP2: each rank's head is [h, v / 2], dgrad 2 t h v / 2 FLOPs, no wgrad."""
    frozen = _head(LORA, tp=2)
    assert _flops(frozen, "lm_head.dgrad") == pytest.approx(2 * T * H * V / 2)
    assert _flops(frozen, "lm_head.wgrad") == 0
