"""activation_checkpointing none | full | selective: what is recomputed, what is saved.

The block is Llama-2-7B's (pre-norm, SwiGLU, no dropout) on one sequence of 512 tokens at
bf16 (e = 2): t = 512 tokens, h = 4096, f = 11008, kv width 4096. The arithmetic of each
mode is written out against the Korthikanti et al. (arXiv 2205.05198) terms.
"""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.models.costs import layer_costs
from simulator.models.spec import load_model
from simulator.strategies import DDPConfig, FSDPConfig, World, parse_strategy
from simulator.strategies.checkpointing import ac_mode, ac_setting, recompute_plan
from simulator.strategies.ddp import ddp
from simulator.strategies.fsdp import fsdp

T, H, F, E = 512, 4096, 11008, 2


def layers(flash=True, name="llama-2-7b", seq=T):
    return layer_costs(load_model(name), 1, seq, "bf16", flash)


def block(flash=True, name="llama-2-7b", seq=T):
    return layers(flash, name, seq)[1]


def _kernels(trace, phase, layer):
    return [o.name for o in trace.classes[0].ops
            if o.phase == phase and o.layer == layer and o.kind == "compute"]


def recomputed(trace, layer="block.0"):
    return _kernels(trace, "recompute", layer)


def forward_names(trace, layer="block.0"):
    return _kernels(trace, "forward", layer)


def test_saved_bytes_attribute_every_saved_tensor():
    for name in ("llama-2-7b", "gpt2-small", "bert-large"):
        for flash in (True, False):
            b = block(flash, name, 256)
            assert sum(c.saved_bytes for c in b.forward) == b.activation_bytes


def test_booleans_normalise():
    assert FSDPConfig(activation_checkpointing=True).ac_mode == "full"
    assert FSDPConfig(activation_checkpointing=False).ac_mode == "none"
    assert FSDPConfig(activation_checkpointing="selective").selective_policy == "op"
    assert ac_mode("full") == "full" and ac_mode(False) == "none"
    assert ac_setting({"activation_checkpointing": True}) is True
    assert ac_setting({"activation_checkpointing": "none"}) is False
    assert ac_setting({"activation_checkpointing": "selective",
                       "selective_ac_option": 2}) == "selective:2"


def test_full_recomputes_the_whole_block_and_keeps_its_output():
    b = block()
    plan = recompute_plan(b, FSDPConfig(activation_checkpointing="full"))
    assert plan.full and plan.ops == tuple(range(len(b.forward)))
    assert plan.kept_bytes == E * T * H          # the block output (residual stream)
    assert recompute_plan(b, FSDPConfig(activation_checkpointing="none")) is None


def test_selective_op_saves_alternate_matmuls_and_attention():
    b = block()
    plan = recompute_plan(b, FSDPConfig(activation_checkpointing="selective"))
    names = [b.forward[i].name for i in plan.ops]
    # torchtitan's policy on this block's kernels: mm #1 (qkv) and #3 (gate_up) saved,
    # #2 (attn_out) and #4 (mlp_down) recomputed, flash attention saved, rest recomputed
    assert names == ["norm1", "rotary", "attn_out", "residual1", "norm2", "swiglu",
                     "mlp_down", "residual2"]
    # kept: output t h e + Q,K,V 3 t h e + attention output t h e + gate/up 2 t f e
    assert plan.kept_bytes == E * T * H * (1 + 3 + 1) + 2 * E * T * F
    # freed: norm1 and norm2 outputs, residual1, swiglu output = (3 h + f) t e
    assert b.activation_bytes - plan.kept_bytes == E * T * (3 * H + F)


def test_selective_attention_recomputes_only_the_core():
    cfg = FSDPConfig(activation_checkpointing="selective", selective_ac_option="attention")
    flash = block(True)
    flash_plan = recompute_plan(flash, cfg)
    assert [flash.forward[i].name for i in flash_plan.ops] == ["attn_core"]
    assert flash_plan.kept_bytes == flash.activation_bytes       # nothing freed
    plain = block(False)
    plan = recompute_plan(plain, cfg)
    assert [plain.forward[i].name for i in plan.ops] == ["attn_scores", "softmax", "attn_av"]
    # Korthikanti's selective recompute frees the score terms: here (no dropout) the
    # a s^2 b softmax output at 2 bytes; the core's output stays for attn_out
    a = 32
    assert plain.activation_bytes - plan.kept_bytes == E * a * T * T


def test_every_nth_block_is_fully_checkpointed():
    cfg = FSDPConfig(activation_checkpointing="selective", selective_ac_option=3)
    ls = layers()
    checked = [L.name for L in ls if recompute_plan(L, cfg) is not None]
    assert checked == [f"block.{i}" for i in range(2, 32, 3)]       # torchtitan: count % 3
    assert all(recompute_plan(L, cfg).full for L in ls if L.name in checked)


@pytest.mark.parametrize("kw, field", [
    ({"selective_ac_option": "op"}, "strategy.selective_ac_option"),
    ({"activation_checkpointing": "selective", "selective_ac_option": 0},
     "strategy.selective_ac_option"),
    ({"activation_checkpointing": "partial"}, "strategy.activation_checkpointing"),
    ({"activation_checkpointing": "selective", "activation_offload": True},
     "strategy.activation_offload"),
])
def test_bad_settings_name_the_field(kw, field):
    with pytest.raises(ConfigError) as info:
        parse_strategy({"name": "fsdp", **kw})
    assert info.value.field == field


def _fsdp(**kw):
    return fsdp(layers()[:3] + layers()[-1:], FSDPConfig(**kw), World(8, 8))


@pytest.mark.parametrize("build", [
    _fsdp, lambda **kw: ddp(layers()[:3] + layers()[-1:], DDPConfig(**kw), World(8, 8))])
def test_strategies_emit_the_recompute_and_balance_memory(build):
    full, op, none = (build(activation_checkpointing=m) for m in ("full", "selective", "none"))
    assert recomputed(full) == forward_names(full)
    assert recomputed(op) == ["norm1", "rotary", "attn_out", "residual1", "norm2", "swiglu",
                              "mlp_down", "residual2"]
    assert recomputed(none) == []
    b = block()
    freed = b.activation_bytes - recompute_plan(b, FSDPConfig(
        activation_checkpointing="selective")).kept_bytes
    ops = op.classes[0].ops
    rc = [o for o in ops if o.phase == "recompute" and o.layer == "block.0"]
    assert sum(o.mem_alloc_bytes for o in rc) == freed     # what forward freed comes back
    for t in (full, op, none):
        assert sum(o.mem_alloc_bytes - o.mem_free_bytes for o in t.classes[0].ops) == 0
