"""training.compile: Inductor's residual+norm, dropout+residual and cast+norm fusions."""

from __future__ import annotations

import pytest

from simulator.models.costs import layer_costs
from simulator.models.spec import load_model

T = 2 * 128


def _block(name, compile, autocast=False):
    return layer_costs(load_model(name), 2, 128, "fp16", False, autocast, compile)[1]


def test_bert_block_fusions_save_the_intermediate_traffic():
    eager, fused = _block("bert-large", False), _block("bert-large", True)
    names = [op.name for op in fused.forward]
    assert "attn_out.dropout+residual1+norm2" in names
    assert "mlp_down.dropout+residual2" in names
    n, e = T * 1024, 2
    # forward: two dropout outputs never written and read back (2 e n each), one stream
    # re-read saved (k n, k = e without autocast)
    saved = sum(o.bytes_accessed for o in eager.forward) - sum(
        o.bytes_accessed for o in fused.forward)
    assert saved == pytest.approx(2 * 2 * e * n + e * n)
    assert sum(o.flops for o in fused.forward) == sum(o.flops for o in eager.forward)
    assert len(fused.forward) == len(eager.forward) - 3
    # the norm keeps its weight (FSDP units, gradient readiness) and saved bytes add up
    merged = next(o for o in fused.forward if o.name == "attn_out.dropout+residual1+norm2")
    assert merged.weight == "norm2" and merged.op_class == "norm"
    assert sum(o.saved_bytes for o in fused.forward) == fused.activation_bytes


def test_autocast_casts_fold_into_their_norms():
    eager, fused = _block("gpt2-small", False, True), _block("gpt2-small", True, True)
    assert any(o.name.startswith("cast.norm1") for o in eager.forward)
    assert not any(o.name == "cast.norm1" for o in fused.forward)
    assert "norm1+cast.norm1" in [o.name for o in fused.forward]
    assert "cast.norm1.bwd+norm1.bwd" in [o.name for o in fused.backward]


def test_compile_leaves_gemms_and_attention_alone():
    eager, fused = _block("llama-2-7b", False), _block("llama-2-7b", True)
    def heavy(b):
        return [(o.name, o.flops, o.bytes_accessed) for o in b.forward + b.backward
                if o.op_class in ("matmul", "attention")]
    assert heavy(eager) == heavy(fused)
