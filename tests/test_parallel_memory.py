"""The per-rank memory of a parallel plan against the formulas it implements: Korthikanti et
al. 2022 (arXiv 2205.05198) Table 2 per layer, the schedules' micro-batches in flight, and
Megatron's bytes per parameter under each data-parallel mode (arithmetic in each test)."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.models.spec import parse_model
from simulator.models.transformer import block_activation_bytes
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel import activation_memory as am
from simulator.strategies.parallel.memory import (block_params_per_rank, in_flight, peak_rank_memory,
                                       rank_memory, stage_params)

H, A, S, B, V, L = 64, 4, 32, 2, 1000, 8
SBH = S * B * H


def gpt(**kw):
    d = dict(name="tiny-gpt", family="gpt", source="test", layers=L, hidden=H, heads=A,
             vocab=V, max_seq_len=S, dropout=0.1)
    return parse_model({**d, **kw}, "test")


def saved(model=None, **kw):
    return am.layer_saved_bytes(model or gpt(), batch=B, seq_len=S, e=2, **kw)


# ---------------------------------------------------------------- Table 2, per layer
def test_no_parallelism_is_sbh_34_plus_5as_over_h():
    assert saved() == SBH * 34 + 5 * A * S * S * B            # sbh (34 + 5as/h)


@pytest.mark.parametrize("t", [2, 4])
def test_tensor_parallel_is_sbh_10_plus_24_over_t_plus_5as_over_ht(t):
    assert saved(tp=t) == SBH * 10 + SBH * 24 // t + 5 * A * S * S * B // t


@pytest.mark.parametrize("t", [2, 4])
def test_sequence_parallel_is_sbh_34_over_t_plus_5as_over_ht(t):
    assert saved(tp=t, sp=True) == SBH * 34 // t + 5 * A * S * S * B // t


def test_selective_recompute_and_flash_drop_the_score_term():
    assert saved(tp=4, sp=True, ac="selective") == SBH * 34 // 4
    assert saved(tp=4, sp=True, flash=True) == SBH * 34 // 4
    assert saved(tp=4, ac="selective") == SBH * 10 + SBH * 24 // 4


def test_full_recompute_keeps_the_layer_input_2sbh_split_by_sp():
    assert saved(ac="full") == 2 * SBH
    assert saved(tp=4, ac="full") == 2 * SBH                   # replicated input
    assert saved(tp=4, sp=True, ac="full") == 2 * SBH // 4


def test_recompute_working_set_is_one_layer():
    work = am.layer_working_bytes(gpt(), batch=B, seq_len=S, e=2, tp=4, sp=True, ac="full")
    assert work == SBH * 34 // 4 + 5 * A * S * S * B // 4      # the whole layer, rebuilt
    sel = am.layer_working_bytes(gpt(), batch=B, seq_len=S, e=2, tp=4, ac="selective")
    assert sel == 5 * A * S * S * B // 4                       # only the scores
    assert am.layer_working_bytes(gpt(), batch=B, seq_len=S, e=2, ac="none") == 0


def test_context_parallel_divides_the_sequence():
    # s -> s/cp in every term; ring attention is blockwise: no score term
    assert saved(tp=2, sp=True, cp=2) == (S // 2) * B * H * 34 // 2


def test_without_dropout_the_masks_and_dropped_probabilities_go():
    # 34 - 2 masks = 32 sbh; scores: the softmax output only, 2 a s^2 b
    assert saved(gpt(dropout=0.0)) == SBH * 32 + 2 * A * S * S * B


@pytest.mark.parametrize("kw", [{}, {"dropout": 0.0}, {"family": "llama", "kv_heads": 2},
                                {"ffn_hidden": 3 * H}])
@pytest.mark.parametrize("flash", [False, True])
def test_terms_add_up_to_the_block_cost_model_at_t1(kw, flash):
    model = gpt(**kw)
    assert saved(model, flash=flash) == block_activation_bytes(model, B, S, 2, flash)


def test_unknown_checkpointing_mode_names_the_field():
    with pytest.raises(ConfigError, match="activation_checkpointing"):
        saved(ac="block")


# ---------------------------------------------------------------- micro-batches in flight
def test_1f1b_stage_i_holds_pp_minus_i_micro_batches():
    plan = ParallelPlan(pp=4, schedule="1f1b", dp_mode="ddp")
    assert [in_flight(plan, 8, st) for st in range(4)] == [4, 3, 2, 1]
    assert in_flight(ParallelPlan(pp=4, schedule="gpipe", dp_mode="ddp"), 8, 0) == 8


def test_interleaved_stage0_holds_1_plus_p_minus_1_over_pv_of_the_model():
    p, v = 4, 2
    plan = ParallelPlan(pp=p, vp=v, schedule="interleaved_1f1b", dp_mode="ddp",
                        sequence_parallel=True, tp=2)
    model = gpt(layers=16, dropout=0.0)
    r = rank_memory(model, plan, seq_len=S, micro_batch=B, micro_batches=8, ac="selective",
                    precision="fp16")
    per_layer = am.layer_saved_bytes(model, batch=B, seq_len=S, e=2, tp=2, sp=True,
                                     ac="selective")
    # Korthikanti sec 4.2.3: L (1 + (p-1)/(p v)) layers' worth on the first stage
    assert r.layer_activations_bytes == round(16 * (1 + (p - 1) / (p * v)) * per_layer)
    assert r.in_flight == p * v + p - 1


def test_no_pipeline_holds_one_micro_batch():
    plan = ParallelPlan(tp=2, dp_mode="ddp")
    r = rank_memory(gpt(), plan, seq_len=S, micro_batch=B, micro_batches=16)
    assert r.in_flight == 1
    assert r.layer_activations_bytes == L * saved(tp=2)


# ---------------------------------------------------------------- model state
def test_block_params_split_as_megatron_splits_them():
    # GPT block 12h^2 + 13h; norms (4h) and the two row-parallel biases (2h) replicated
    assert block_params_per_rank(gpt(), 4) == (12 * H * H + 7 * H) // 4 + 6 * H


def test_embedding_on_the_first_stage_head_on_the_last():
    plan = ParallelPlan(pp=2, tp=4, dp_mode="ddp")
    block = block_params_per_rank(gpt(), 4)
    first, last = stage_params(gpt(), plan, 0), stage_params(gpt(), plan, 1)
    # vocab-parallel word embedding, learned positions replicated
    assert first == 4 * block + V * H // 4 + S * H
    # final norm (2h) + Megatron's copy of the tied word embedding on the last stage
    assert last == 4 * block + 2 * H + V * H // 4
    one = stage_params(gpt(), ParallelPlan(tp=4, dp_mode="ddp"), 0)
    assert one == 8 * block + V * H // 4 + S * H + 2 * H       # tied: no copy at pp 1


@pytest.mark.parametrize("mode,per_param", [
    ("ddp", (2, 4, 12)),          # Megatron: 18 bytes
    ("zero1", (2, 4, 12 / 4)),    # distributed optimizer: 6 + 12/d
    ("zero2", (2, 4 / 4, 12 / 4)),
    ("fsdp", (2 / 4, 4 / 4, 12 / 4))])
def test_bytes_per_parameter_by_data_parallel_mode(mode, per_param):
    plan = ParallelPlan(pp=2, dp_shard=4, tp=2, dp_mode=mode)
    n = stage_params(gpt(), plan, 0)
    r = rank_memory(gpt(), plan, seq_len=S, micro_batch=B, micro_batches=4, precision="bf16")
    assert (r.params_bytes, r.grads_bytes, r.optimizer_bytes) == tuple(
        -(-round(n * x * 4) // 4) for x in per_param)


def test_fsdp_working_set_is_two_gathered_units_and_one_unsharded_gradient():
    plan = ParallelPlan(dp_shard=4, dp_mode="fsdp")
    r = rank_memory(gpt(), plan, seq_len=S, micro_batch=B, micro_batches=1)
    assert r.working_bytes == block_params_per_rank(gpt(), 1) * (2 * 2 + 4)


def test_fp32_weights_have_no_master_copy():
    plan = ParallelPlan(dp_mode="ddp")
    r = rank_memory(gpt(), plan, seq_len=S, micro_batch=B, micro_batches=1, precision="fp32")
    n = stage_params(gpt(), plan, 0)
    assert (r.params_bytes, r.grads_bytes, r.optimizer_bytes) == (4 * n, 4 * n, 8 * n)


def test_peak_is_the_first_stage_under_1f1b_and_totals_add_up():
    plan = ParallelPlan(pp=4, tp=2, dp_mode="ddp")
    peak = peak_rank_memory(gpt(), plan, seq_len=S, micro_batch=B, micro_batches=8)
    assert peak.stage == 0
    assert peak.total_bytes == (peak.params_bytes + peak.grads_bytes + peak.optimizer_bytes
                                + peak.activations_bytes + peak.working_bytes)


def test_zbv_puts_the_head_on_rank_0():
    plan = ParallelPlan(pp=2, vp=2, schedule="zbv", dp_mode="ddp", tp=1)
    block = block_params_per_rank(gpt(), 1)
    assert stage_params(gpt(), plan, 0) == 4 * block + V * H + S * H + 2 * H + V * H
    assert stage_params(gpt(), plan, 1) == 4 * block


def test_bad_stage_and_non_transformer_are_config_errors():
    plan = ParallelPlan(pp=2, dp_mode="ddp")
    with pytest.raises(ConfigError, match="stage 2"):
        rank_memory(gpt(), plan, seq_len=S, micro_batch=B, micro_batches=2, stage=2)
    resnet = parse_model(dict(name="r", family="resnet", source="t", depth=50), "t")
    with pytest.raises(ConfigError, match="not a transformer"):
        rank_memory(resnet, plan, seq_len=S, micro_batch=B, micro_batches=2)


# ---------------------------------------------------------------- mixture of experts
def moe_model(**kw):
    return gpt(family="llama", kv_heads=2, dropout=0.0,
               moe={"num_experts": 8, "top_k": 2, "ffn_hidden": 96, "first_dense_layers": 1,
                    **kw})


@pytest.mark.parametrize("etp", [0, 1])
def test_moe_blocks_split_their_experts_over_ep_and_etp(etp):
    from simulator.models.transformer import block_params
    model = moe_model()
    plan = ParallelPlan(dp_shard=4, ep=4, tp=2, etp=etp, sequence_parallel=True,
                        dp_mode="ddp")
    kvd = 2 * (H // A)
    attention = (H * (H + 2 * kvd) + H * H) // 2 + 2 * H          # split QKV/out + 2 norms
    expert = 3 * H * 96                                             # SwiGLU, no biases
    # router + 2 local experts, each split over etp ranks: tp 2 unless etp is given
    moe_block = attention + H * 8 + (8 // 4) * expert // (etp or 2)
    blocks = block_params(model, 2) + (L - 1) * moe_block           # block 0 dense
    assert stage_params(model, plan, 0) == (blocks + 2 * (-(-V // 2)) * H + H)


def test_expert_state_shards_over_its_own_data_parallel_group():
    model = moe_model(first_dense_layers=0)
    plan = ParallelPlan(dp_shard=8, ep=4, dp_mode="zero1")
    r = rank_memory(model, plan, seq_len=S, micro_batch=B, micro_batches=1)
    experts = L * (8 // 4) * 3 * H * 96
    dense = stage_params(model, plan, 0) - experts
    # Adam's 12 bytes over dp 8 for the dense part, over dp 8 / ep 4 = 2 for the experts
    assert r.optimizer_bytes == -(-dense * 12 // 8) + -(-experts * 12 // 2)


def test_moe_block_activations_are_the_attention_half_plus_the_moe_half():
    from simulator.models.moe import moe_activation_bytes
    model = moe_model()
    t, kvd = S * B, 2 * (H // A)
    # norm, QKV and MLP inputs (4 t h), Q and the output projection's input (2 t h), K and
    # V (2 t kvd), 2 bytes each; no dropout masks, no scores (flash)
    attn = 2 * (4 * t * H + 2 * t * H + 2 * t * kvd)
    moe = am.layer_saved_bytes(model, batch=B, seq_len=S, e=2, flash=True, moe=True)
    assert moe == attn + moe_activation_bytes(model, t, 2, t * 2)     # top-2 copies


# ---------------------------------------------------------------- per kind, not per block
def _by_block(model, plan, stage):
    """stage_params' block part as a sum over the stage's blocks, one block at a time (what
    memory.py summed before it counted dense and MoE blocks): the stages' blocks read off
    schedules.stage_location for every model stage."""
    from simulator.strategies.parallel.schedules import stage_location
    sizes = plan.model_stage_blocks(model.layers)
    blocks, first = [], 0
    for v, size in enumerate(sizes):
        if stage_location(plan.schedule, plan.pp, plan.vp, v).rank == stage:
            blocks += range(first, first + size)
        first += size
    return sum(block_params_per_rank(model, plan.tp, plan.ep, i, plan.expert_tp)
               for i in blocks)


@pytest.mark.parametrize("name,plan", [
    ("gpt3-175b", dict(pp=8, tp=8, dp_shard=2)),
    ("gpt3-175b", dict(pp=4, vp=3, tp=4, schedule="interleaved_1f1b", dp_shard=4)),
    ("llama-3-70b", dict(pp=4, tp=8, schedule="zbv", vp=2, dp_shard=2)),
    ("mixtral-8x7b", dict(pp=4, tp=2, ep=4, dp_shard=4)),
    ("deepseek-v3-like", dict(pp=8, tp=2, ep=8, etp=1, dp_shard=8, first_stage_layers=7,
                              last_stage_layers=6)),
])
def test_stage_params_counted_by_kind_are_the_sum_over_blocks(name, plan):
    from simulator.models import load_model
    from simulator.models.transformer import embed_params, head_params, vocab_rows
    from simulator.strategies.parallel.memory import head_rank
    model, p = load_model(name), ParallelPlan(**plan, dp_mode="fsdp")
    for stage in range(p.pp):
        want = _by_block(model, p, stage)
        if stage == 0:
            want += embed_params(model, p.tp)
        if stage == head_rank(p):
            want += head_params(model, p.tp) + (
                vocab_rows(model, p.tp) * model.hidden if model.tied_embeddings else 0)
        assert stage_params(model, p, stage) == want
    # FSDP's working buffers under a pipeline: the stage's parameters gathered (2 B) and
    # its gradients unsharded (fp32 here), held from the first forward to the one
    # reduce-scatter after the last micro-batch (torch.distributed.pipelining)
    mem = rank_memory(model, p, seq_len=128, micro_batch=1, micro_batches=8, flash=True)
    assert mem.working_bytes == am.layer_working_bytes(
        model, batch=1, seq_len=128, e=2, ac="none", flash=True, tp=p.tp,
        sp=p.sequence_parallel, cp=p.cp) + stage_params(model, p, 0) * (2 + 4)
