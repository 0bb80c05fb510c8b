"""A model file's ``head_dim``: heads wider than ``hidden / heads`` (Qwen3: 32 heads of 128 on
a 2048-wide model) make the queries and the attention output ``heads x head_dim`` wide, so
the query and output projections, the attention core, rotary and the saved Q and O grow
with it; a model without the key prices as before."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from simulator.errors import ConfigError
from simulator.models import layer_costs, load_model, model_flops_per_sample, params_total
from simulator.models.moe import inactive_params
from simulator.models.ops import SOFTMAX_FLOPS
from simulator.models.transformer import block_activation_bytes, block_cost, block_params

SMALL = dict(name="wide-heads", family="llama", source="test", layers=2, hidden=64, heads=4,
             kv_heads=2, head_dim=32, vocab=1000, max_seq_len=128, ffn_hidden=96)


def _load(tmp_path, data):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_model(str(path))


def test_qwen3_30b_a3b_counts_its_published_parameters_exactly():
    # config.json: hidden 2048, 32 heads x 128 (q 4096), 4 KV heads x 128 (512 each), 48
    # blocks of 128 SwiGLU experts 768 wide, top 8, vocab 151936, untied head.
    # per block: q/k/v 2048 x (4096 + 2 x 512) = 10,485,760; o 4096 x 2048 = 8,388,608;
    # 2 RMSNorms 4,096; router 2048 x 128 = 262,144; experts 128 x 3 x 2048 x 768 =
    # 603,979,776 -> 623,120,384; x 48 = 29,909,778,432; + embedding and head 2 x 151936 x
    # 2048 = 622,329,856 + final norm 2,048 = 30,532,110,336 (the report: 30.5B)
    model = load_model("qwen3-30b-a3b")
    assert (model.head_dim, model.q_width, model.hidden) == (128, 4096, 2048)
    assert params_total(model) == 30_532_110_336
    # active: 120 of 128 experts skipped, 120 x 3 x 2048 x 768 x 48 = 27,179,089,920 fewer
    assert params_total(model) - inactive_params(model) == 30_532_110_336 - 27_179_089_920


def test_qwen3_235b_counts_its_published_parameters():
    # 64 heads x 128 = 8192-wide queries on a 4096-wide model; the report: 235B total, 22B active
    model = load_model("validation/parallel/models/qwen3-235b-a22b.yaml")
    assert model.q_width == 8192
    assert params_total(model) == pytest.approx(235e9, rel=0.001)
    assert params_total(model) - inactive_params(model) == pytest.approx(22e9, rel=0.01)


def test_projections_attention_and_rotary_are_priced_at_the_query_width(tmp_path):
    model = _load(tmp_path, SMALL)
    b, s, h, q, kvd, a = 2, 128, 64, 4 * 32, 2 * 32, 4
    t = b * s
    ops = {op.name: op for op in block_cost(model, b, s, 2, flash=True).forward}
    assert ops["qkv_proj"].flops == 2 * t * h * (q + 2 * kvd)        # 64 -> 128 + 2 x 64
    assert ops["attn_out"].flops == 2 * t * q * h                     # 128 -> 64
    c = (s + 1) / (2 * s)                                             # causal: the kept half
    assert ops["attn_core"].flops == pytest.approx(
        c * (2 * 2 * b * s * s * q + SOFTMAX_FLOPS * b * a * s * s))
    assert ops["attn_core"].k == 32
    assert ops["rotary"].flops == 3 * t * (q + kvd)
    # parameters: q/k/v 64 x 256 + o 128 x 64 + SwiGLU 3 x 64 x 96 + 2 norms x 64
    assert block_params(model) == 64 * 256 + 128 * 64 + 3 * 64 * 96 + 2 * 64
    # saved for backward (bf16, flash): norm outputs 2 x 2 t h, Q 2 t q, K V 2 x 2 t kvd,
    # O 2 t q, residual stream 2 x 2 t h, SwiGLU's 6 t f
    assert block_activation_bytes(model, b, s, 2, True) == (
        4 * t * h + 2 * t * q + 4 * t * kvd + 2 * t * q + 4 * t * h + 6 * t * 96)
    # MFU's attention term 12 L q s^2
    assert model_flops_per_sample(model, s) == pytest.approx(
        6 * (params_total(model) - 1000 * 64) * s + 12 * 2 * q * s * s)


def test_tensor_parallel_splits_the_query_width(tmp_path):
    model = _load(tmp_path, SMALL)
    t = 256
    ops = {op.name: op for op in block_cost(model, 1, t, 2, flash=True, tp=2, sp=True).forward}
    assert ops["qkv_proj"].flops == 2 * t * 64 * (128 + 2 * 64) // 2
    assert ops["attn_out"].flops == 2 * t * (128 // 2) * 64


def test_head_dim_equal_to_hidden_over_heads_prices_as_without_it(tmp_path):
    plain = {k: v for k, v in SMALL.items() if k != "head_dim"}
    same = _load(tmp_path, {**plain, "head_dim": 16})         # 64 / 4
    assert same.q_width == same.hidden == 64
    assert layer_costs(same, 2, 128, "bf16") == layer_costs(
        replace(same, head_size=0), 2, 128, "bf16")
    dense = load_model("llama-3-8b")                          # no head_dim in its file
    assert (dense.head_dim, dense.q_width) == (128, dense.hidden)


def test_head_dim_lets_heads_not_divide_hidden_and_must_be_positive(tmp_path):
    odd = _load(tmp_path, {**SMALL, "heads": 6, "kv_heads": 2, "head_dim": 16})
    assert odd.q_width == 96
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, {**SMALL, "head_dim": 0})
    assert err.value.field == "head_dim"
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, {k: v for k, v in {**SMALL, "heads": 6, "kv_heads": 2}.items()
                         if k != "head_dim"})
    assert err.value.field == "heads"
