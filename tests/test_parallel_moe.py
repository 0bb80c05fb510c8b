"""Mixture of experts: the catalog entries against their published sizes, the MoE block's
costs against its formulas, expert-parallel loads (balanced, Zipf, measured, capacity) and
the all-to-all volumes with the arithmetic, bad input."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.errors import ConfigError
from simulator.models import layer_costs, load_model, model_flops_per_sample, params_total
from simulator.models.moe import (expert_params, inactive_params, is_moe_block, is_moe_layer,
                                  moe_block_cost, moe_layer_count)
from simulator.models.spec import parse_model
from simulator.strategies.parallel.moe import (ExpertLoad, all_to_all_size_bytes, dispatch_bytes,
                                    EPHooks, EpSizes, ep_block_cost, ep_loads, expert_shares,
                                    leaving_bytes)
from parallel_helpers import emit_with_hooks

BF16 = 2


@pytest.mark.parametrize("name,total,active,rel_total,rel_active", [
    # Jiang et al. 2024: 46.7B / 12.9B; Mistral AI: 141B / 39B
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.01, 0.01),
    ("mixtral-8x22b", 141e9, 39e9, 0.01, 0.01),
    # DeepSeek-V3 report: 671B / 37B; MLA as MHA adds 1.1B to every token (file comment)
    ("deepseek-v3-like", 671e9, 37e9, 0.01, 0.05),
    # Qwen3 report: 30.5B / 3.3B (its 32 heads of 128: a 4096-wide query, head_dim)
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.002, 0.02),
])
def test_moe_catalog_matches_published_total_and_active_parameters(name, total, active,
                                                                   rel_total, rel_active):
    model = load_model(name)
    assert model.is_moe and model.source
    assert params_total(model) == pytest.approx(total, rel=rel_total)
    assert params_total(model) - inactive_params(model) == pytest.approx(active, rel=rel_active)


def test_deepseek_has_three_dense_blocks_then_moe():
    model = load_model("deepseek-v3-like")
    assert [is_moe_layer(model, i) for i in range(5)] == [False, False, False, True, True]
    assert moe_layer_count(model) == 58
    layers = layer_costs(model, 1, 1024, "bf16")
    assert [is_moe_block(layer) for layer in layers[1:5]] == [False] * 3 + [True]
    assert {layer.kind for layer in layers[1:5]} == {"transformer_block"}   # FSDP wraps each
    every_other = replace(model, moe_layer_freq=2)
    assert moe_layer_count(every_other) == 29          # blocks 3, 5, ..., 59


def test_moe_block_forward_matmul_flops_are_twice_its_active_params_per_token():
    # router h E + k experts (3 h f each, SwiGLU) + attention: 2 FLOPs per parameter per token
    model = load_model("mixtral-8x7b")
    s = 1024
    block = layer_costs(model, 2, s, "bf16")[1]
    active = block.params - (model.num_experts - model.top_k) * expert_params(model)
    flops = sum(op.flops for op in block.forward if op.op_class == "matmul")
    norms = 2 * model.hidden                            # two RMSNorm weights: no matmul
    assert flops / (2 * s) == pytest.approx(2 * (active - norms), rel=1e-9)
    assert block.params == 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 2 * 4096 \
        + 4096 * 8 + 8 * 3 * 4096 * 14336
    back = sum(op.flops for op in block.backward if op.op_class == "matmul")
    assert back == pytest.approx(2 * flops, rel=1e-9)


def test_model_flops_use_the_active_parameters():
    model = load_model("mixtral-8x7b")
    s = 4096
    dense_n = params_total(model) - model.vocab * model.hidden - inactive_params(model)
    expected = 6 * dense_n * s + 12 * model.layers * model.hidden * s ** 2
    assert model_flops_per_sample(model, s) == pytest.approx(expected, rel=1e-12)


def test_balanced_routing_volume_is_tokens_times_top_k_times_hidden():
    # Mixtral 8x7B, one sequence of 4096 tokens, bf16, EP 8: the dispatch buffer is
    # t k h e = 4096 x 2 x 4096 x 2 = 67,108,864 B, of which 7/8 = 58,720,256 B leave.
    model = load_model("mixtral-8x7b")
    t = 4096
    loads = ep_loads(model, t, 8)
    assert loads.per_rank == (t * 2.0,) * 8 and loads.dropped == 0 and loads.imbalance == 1
    assert dispatch_bytes(model, t, BF16) == 4096 * 2 * 4096 * 2 == 67_108_864
    assert leaving_bytes(model, t, BF16, 8) == 67_108_864 * 7 / 8 == 58_720_256
    assert all_to_all_size_bytes(model, loads, BF16) == 67_108_864


def test_zipf_routing_is_seeded_and_loads_the_busiest_rank():
    model = load_model("qwen3-30b-a3b")                # 128 experts, top 8
    t, ep = 2048, 8
    zipf = ExpertLoad(distribution="zipf", zipf_s=1.0, seed=7)
    a, b = ep_loads(model, t, ep, zipf), ep_loads(model, t, ep, zipf)
    other = ep_loads(model, t, ep, zipf.model_copy(update={"seed": 8}))
    assert a == b and a.per_rank != other.per_rank
    assert sum(a.per_rank) == pytest.approx(ep * t * 8)      # nothing dropped: dropless
    assert a.slowest > t * 8 and a.imbalance > 1
    steeper = ep_loads(model, t, ep, zipf.model_copy(update={"zipf_s": 1.5}))
    assert steeper.imbalance > a.imbalance
    shares = expert_shares(zipf, 128)
    assert sorted(shares, reverse=True)[0] / sorted(shares, reverse=True)[1] \
        == pytest.approx(2.0)                          # 1^-1 / 2^-1


def test_an_expert_takes_each_token_at_most_once():
    # all routing to expert 0 of Mixtral: it can take at most the group's ep t tokens; the
    # other t k ep - ep t copies spread evenly over the 7 experts that received none
    model = load_model("mixtral-8x7b")
    t, ep = 100, 8
    loads = ep_loads(model, t, ep, ExpertLoad(distribution="measured",
                                              counts=[5, 0, 0, 0, 0, 0, 0, 0]))
    assert loads.per_rank[0] == pytest.approx(ep * t)
    assert loads.per_rank[1:] == pytest.approx([ep * t / 7] * 7)


def test_capacity_factor_drops_the_overflow():
    # E = 8, k = 2, ep = 8, t = 1000: A = 16,000 copies, capacity 1.0 x A / E = 2,000 each;
    # measured counts 4:1:1:1:1:1:1:2 give expert 0 4/12 of A = 5,333.3 (drops 3,333.3) and
    # expert 7 2,666.7 (drops 666.7); the others 1,333.3 (kept).
    model = replace(load_model("mixtral-8x7b"), capacity_factor=1.0)
    loads = ep_loads(model, 1000, 8, ExpertLoad(distribution="measured",
                                                counts=[4, 1, 1, 1, 1, 1, 1, 2]))
    assert loads.per_rank[0] == pytest.approx(2000) and loads.per_rank[7] == pytest.approx(2000)
    assert loads.per_rank[1] == pytest.approx(16000 / 12)
    assert loads.dropped == pytest.approx(16000 * 4 / 12 - 2000 + 16000 * 2 / 12 - 2000)


def test_the_ep_block_runs_its_share_of_experts_on_the_busiest_ranks_tokens():
    model = load_model("mixtral-8x7b")
    s, ep = 4096, 4
    loads = ep_loads(model, s, ep, ExpertLoad(distribution="zipf", zipf_s=1.2, seed=1))
    block = ep_block_cost(model, 1, s, BF16, True, loads, ep)
    gemm = {op.name: op for op in block.forward}
    h, f = model.hidden, model.moe_ffn_hidden
    assert gemm["moe_expert_gate_up"].flops == pytest.approx(2 * loads.slowest * h * 2 * f)
    assert gemm["moe_expert_down"].flops == pytest.approx(2 * loads.slowest * f * h)
    assert gemm["moe_expert_gate_up"].params == 2 * h * 2 * f   # 2 local experts, gate + up
    whole = moe_block_cost(model, 1, s, BF16, True)
    assert block.params == whole.params - (8 - 2) * expert_params(model)


def test_four_all_to_alls_per_block_on_the_ep_group_with_the_formula_bytes():
    model = load_model("mixtral-8x7b")
    t = 4096
    loads = ep_loads(model, t, 8)
    block = ep_block_cost(model, 1, t, BF16, True, loads, 8)
    size = all_to_all_size_bytes(model, loads, BF16)
    ops = emit_with_hooks(block, lambda i, c: EPHooks(i, c, size_bytes=EpSizes(tokens=size))).ops
    comm = [op for op in ops if op.kind == "collective"]
    assert [op.name.split(".")[0] for op in comm] == ["moe_dispatch", "moe_combine",
                                                      "moe_combine", "moe_dispatch"]
    assert {(op.collective, op.comm, op.size_bytes) for op in comm} == \
        {("all_to_all", "ep", t * 2 * 4096 * 2)}
    by_name = {op.name: op for op in ops if op.kind == "compute" and op.phase == "forward"}
    dispatch, combine = comm[0], comm[1]
    # the dispatch sends what the permute wrote, and the expert GEMM waits for it
    assert dispatch.deps == (by_name["moe_permute"].id,)
    assert by_name["moe_expert_gate_up"].deps == (dispatch.id,)
    assert combine.deps == (by_name["moe_expert_down"].id,)
    assert by_name["moe_unpermute"].deps == (combine.id,)
    backward = {op.name: op for op in ops if op.phase == "backward" and op.kind == "compute"}
    assert backward["moe_expert_down.dgrad"].deps == (comm[2].id,)
    assert backward["moe_permute.bwd"].deps == (comm[3].id,)
    assert [op.name for op in ops if op.kind == "compute"] == \
        [c.name for c in block.forward + block.backward]


def test_recompute_repeats_the_forward_all_to_alls():
    model = load_model("mixtral-8x7b")
    block = moe_block_cost(model, 1, 256, BF16, True)
    ops = emit_with_hooks(block, lambda i, c: EPHooks(i, c, size_bytes=EpSizes(tokens=1)),
                ("forward", "recompute", "backward")).ops
    assert len([op for op in ops if op.kind == "collective"]) == 6


def test_shared_experts_run_on_every_token():
    model = load_model("deepseek-v3-like")
    t = 512
    block = moe_block_cost(model, 1, t, BF16, True)
    shared = {op.name: op for op in block.forward}["moe_shared_gate_up"]
    assert shared.flops == 2 * t * 7168 * 2 * 2048    # one shared expert of 2048, gate + up


@pytest.mark.parametrize("moe,field,words", [
    ({"num_experts": 8, "top_k": 9, "ffn_hidden": 64}, "moe.top_k", "exceeds num_experts"),
    ({"num_experts": 8, "top_k": 2}, "moe.ffn_hidden", "missing"),
    ({"num_experts": 8, "top_k": 2, "ffn_hidden": 64, "router": "x"}, "moe.router", "unknown"),
    ({"num_experts": 1, "top_k": 1, "ffn_hidden": 64}, "moe.num_experts", "greater than"),
    ({"num_experts": 8, "top_k": 2, "ffn_hidden": 64, "first_dense_layers": 2},
     "moe.first_dense_layers", "leaves no MoE block"),
    ({"num_experts": 8, "top_k": 2, "ffn_hidden": 64, "capacity_factor": 0},
     "moe.capacity_factor", "greater than"),
])
def test_bad_moe_entries_name_the_key(moe, field, words):
    data = {"name": "tiny-moe", "family": "llama", "layers": 2, "hidden": 64, "heads": 4,
            "vocab": 100, "max_seq_len": 128, "moe": moe}
    with pytest.raises(ConfigError, match=words) as info:
        parse_model(data, "tiny.yaml")
    assert info.value.field == field and info.value.source == "tiny.yaml"


def test_measured_counts_must_cover_every_expert():
    with pytest.raises(ConfigError, match="one token count per expert") as info:
        expert_shares(ExpertLoad(distribution="measured", counts=[1, 2]), 8)
    assert info.value.field == "strategy.moe_load.counts"
