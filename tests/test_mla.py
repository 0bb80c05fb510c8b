"""Multi-head latent attention (simulator/models/mla.py) and multi-token prediction
(simulator/models/mtp.py): parameters, FLOPs and saved bytes against the formulas written
out, the catalog's DeepSeek-V3 and Kimi K2 against their published sizes, the refusals."""

from dataclasses import replace

import pytest

from simulator.errors import ConfigError
from simulator.models.costs import layer_costs, model_flops_per_sample, params_total
from simulator.models.mla import mla_attention_params
from simulator.models.moe import inactive_params
from simulator.models.mtp import is_mtp
from simulator.models.spec import load_model, parse_model
from simulator.models.transformer import block_activation_bytes, block_cost, block_params
from simulator.strategies.frameworks.megatron_layout import FIELD, layout_blocks
from simulator.strategies.parallel.tp import kernel_key

H, A, F = 7168, 128, 18432                 # DeepSeek-V3: hidden, heads, dense SwiGLU width
LQ, LKV, DN, DR, DV = 1536, 512, 128, 64, 128   # latent ranks and head widths


@pytest.fixture(scope="module")
def v3():
    return load_model("deepseek-v3")


def _dense(model):
    """The model with no experts: block_cost is the dense block."""
    return replace(model, num_experts=0, top_k=0, mtp_layers=0)


def _op(layer, name):
    return next(op for op in layer.forward if op.name == name)


def test_mla_parameters_per_layer_are_deepseek_v3s(v3):
    # q down, kv down (latent + the rotary key), the two latent norms, q up, kv up, output
    mla = (H * LQ + H * (LKV + DR) + LQ + LKV + LQ * A * (DN + DR) + LKV * A * (DN + DV)
           + A * DV * H)
    assert mla == 187_107_328                      # the report's 187.1M (the -like file's header)
    assert mla_attention_params(v3) == mla
    assert block_params(v3) == mla + 3 * H * F + 2 * H     # + SwiGLU MLP and two RMSNorms


def test_tensor_parallelism_splits_the_heads_and_keeps_the_down_projections_whole(v3):
    whole = H * LQ + H * (LKV + DR) + LQ + LKV
    split = LQ * A * (DN + DR) + LKV * A * (DN + DV) + A * DV * H
    assert mla_attention_params(v3, tp=4) == whole + split // 4


def test_the_projection_flops_per_token_are_two_per_weight(v3):
    s = 4096
    block = block_cost(_dense(v3), 1, s, 2, True)
    per_token = {name: _op(block, name).flops / s for name in
                 ("q_down_proj", "kv_down_proj", "q_up_proj", "kv_up_proj", "attn_out")}
    assert per_token == {"q_down_proj": 2 * H * LQ, "kv_down_proj": 2 * H * (LKV + DR),
                         "q_up_proj": 2 * LQ * A * (DN + DR),
                         "kv_up_proj": 2 * LKV * A * (DN + DV), "attn_out": 2 * A * DV * H}


def test_the_attention_core_is_192_wide_q_k_and_128_wide_v(v3):
    b, s = 2, 4096
    core = _op(block_cost(_dense(v3), b, s, 2, True), "attn_core")
    causal = (s + 1) / (2 * s)                      # flash skips the masked tiles
    pairs = b * A * s * s
    # QK^T over 128 + 64 and AV over 128: 2 x (192 + 128) FLOPs per query-key pair, and the
    # softmax's 5 per score
    assert core.flops == pytest.approx(causal * (pairs * 2 * (DN + DR + DV) + 5 * pairs))
    # priced on the flash curve at the head width with the same FLOPs per pair:
    # 4 x 160 = 2 x 192 + 2 x 128
    assert core.k == (DN + DR + DV) // 2 == 160
    # Q, K (192 each), V and O (128 each) read or written once, and the 4-byte lse
    assert core.bytes_accessed == 2 * b * s * A * (2 * (DN + DR) + 2 * DV) + 4 * b * A * s


def test_the_saved_bytes_are_the_latents_and_q_k_v_o(v3):
    b, s, e = 1, 4096, 2
    model = _dense(v3)
    t = b * s
    tensors = (e * t * H                           # norm1's output (the down projections' input)
               + 2 * e * t * (LQ + LKV)             # each latent before and after its norm
               + e * t * A * (2 * (DN + DR) + DV)   # Q, K, V out of the rotary kernel
               + e * t * A * DV                     # the attention output
               + e * t * H + 3 * e * t * F          # norm2's output; gate, up, SwiGLU out
               + 2 * e * t * H)                     # the residual stream at both norms
    assert block_activation_bytes(model, b, s, e, True) == tensors
    block = block_cost(model, b, s, e, True)
    assert block.activation_bytes == tensors == sum(op.saved_bytes for op in block.forward)


def test_sequence_parallel_divides_the_latents_by_tp(v3):
    b, s, e, tp = 1, 4096, 2, 4
    model = _dense(v3)
    with_sp = block_activation_bytes(model, b, s, e, True, tp=tp, sp=True)
    without = block_activation_bytes(model, b, s, e, True, tp=tp)
    # everything outside the split (norm outputs, residuals, latents) on 1 / tp of the tokens
    outside = e * s * (H + H) + 2 * e * s * H + 2 * e * s * (LQ + LKV)
    assert without - with_sp == outside - outside // tp


def test_deepseek_v3_is_671b_with_37b_active_and_its_mtp_layer_one_moe_block(v3):
    mla = 187_107_328
    dense = mla + 3 * H * F + 2 * H
    expert = 3 * H * 2048
    moe = mla + 2 * H + H * 256 + 256 * expert + expert       # router, 256 experts, 1 shared
    main = 2 * 129280 * H + H + 3 * dense + 58 * moe           # embedding, head, final norm
    assert main == 671_026_404_352                               # the report: 671B
    layers = layer_costs(v3, 1, 1, "fp32")
    mtp = sum(layer.params for layer in layers if is_mtp(layer))
    assert mtp == moe + 2 * H * H + 3 * H                        # block, eh_proj, three norms
    assert params_total(v3) == main + mtp
    # active: the 248 experts a token skips in the 58 blocks (the report: 37B)
    assert main - 58 * 248 * expert == 37_552_282_624


def test_kimi_k2_counts_its_checkpoints_weights():
    kimi = load_model("kimi-k2")
    mla = (H * LQ + H * (LKV + DR) + LQ + LKV + LQ * 64 * (DN + DR) + LKV * 64 * (DN + DV)
           + 64 * DV * H)
    assert mla == 101_124_096
    expert = 3 * H * 2048
    total = (2 * 163840 * H + H + (mla + 3 * H * F + 2 * H)
             + 60 * (mla + 2 * H + H * 384 + 384 * expert + expert))
    assert total == 1_026_408_209_408
    assert params_total(kimi) == total and kimi.mtp_layers == 0


def test_mtp_adds_one_block_its_projection_and_a_second_output_layer_on_the_last_stage(v3):
    with_mtp = layer_costs(v3, 1, 1024, "bf16")
    without = layer_costs(replace(v3, mtp_layers=0), 1, 1024, "bf16")
    assert [x.name for x in with_mtp] == [x.name for x in without][:-1] + [
        "mtp.0.embed", "mtp.0.proj", "mtp.0.block.0", "mtp.0.head", "head"]
    by_name = {x.name: x for x in with_mtp}
    block, last = by_name["mtp.0.block.0"], by_name["block.60"]
    assert (block.params, block.forward, block.backward) == (last.params, last.forward,
                                                             last.backward)
    head, out = by_name["head"], by_name["mtp.0.head"]
    assert out.forward == head.forward and out.params == H      # its own final norm only
    embed, lookup = by_name["mtp.0.embed"], by_name["embed"]
    assert embed.forward == lookup.forward and embed.params == 0  # the shared table
    eh = _op(by_name["mtp.0.proj"], "mtp_eh_proj")
    assert eh.flops == 2 * 1024 * (2 * H) * H and eh.params == 2 * H * H
    extra = sum(x.forward_flops for x in with_mtp) - sum(x.forward_flops for x in without)
    assert extra == pytest.approx(block.forward_flops + head.forward_flops
                                  + by_name["mtp.0.proj"].forward_flops
                                  + embed.forward_flops)


def test_model_flops_count_the_mtp_block_and_its_output_layer(v3):
    s = 4096
    expert = 3 * H * 2048
    mtp_active = (187_107_328 + 2 * H + H * 256 + 8 * expert + expert   # its MoE block
                  + 2 * H * H + 3 * H + 129280 * H)                  # eh_proj, norms, head
    diff = model_flops_per_sample(v3, s) - model_flops_per_sample(replace(v3, mtp_layers=0), s)
    assert diff == pytest.approx(6 * mtp_active * s + 12 * A * 160 * s * s)
    assert inactive_params(v3) == 59 * 248 * expert                   # 58 blocks + the MTP's


def test_the_layout_takes_the_mtp_layer_before_the_loss_only():
    vp, blocks = layout_blocks("Et*4|(t*4|)*14,tmL", 4)
    assert vp == 4 and blocks == (4,) * 15 + (1,) and sum(blocks) == 61
    with pytest.raises(ConfigError, match="before the loss") as e:
        layout_blocks("Etm|tL", 2)
    assert e.value.field == FIELD


def test_mla_takes_the_qkv_projections_tp_collectives():
    assert kernel_key("q_down_proj") == "qkv_proj"


def _file(**over):
    data = dict(name="m", family="llama", source="s", layers=2, hidden=1024, heads=8,
                vocab=1000, max_seq_len=512,
                attention=dict(kind="mla", q_lora_rank=64, kv_lora_rank=32,
                               qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32))
    data.update(over)
    return data


@pytest.mark.parametrize("over, field", [
    (dict(kv_heads=2), "kv_heads"), (dict(head_dim=64), "head_dim"), (dict(bias=True), "bias"),
    (dict(attention=dict(kind="mla", q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=32,
                         qk_rope_head_dim=16, v_head_dim=33)), "attention.v_head_dim"),
    (dict(attention=dict(kind="gqa")), "attention.kind"),
    (dict(family="bert", mtp_layers=1, attention=None), "mtp_layers"),
])
def test_bad_mla_and_mtp_files_are_refused_in_one_line(over, field):
    with pytest.raises(ConfigError) as e:
        parse_model(_file(**over), "f.yaml")
    assert e.value.field == field and "\n" not in str(e.value)


@pytest.mark.parametrize("kwargs, field", [
    (dict(flash_attention=False), "training.flash_attention"),
    (dict(elementwise="eager"), "training.elementwise"),
    (dict(autocast=True), "training.precision"),
])
def test_what_mla_is_not_modelled_with_is_refused(kwargs, field):
    model = parse_model(_file(), "f.yaml")
    with pytest.raises(ConfigError) as e:
        layer_costs(model, 1, 128, "bf16", **kwargs)
    assert e.value.field == field


@pytest.mark.parametrize("layout, mtp, found", [("Et*4|(t*4|)*14,tL", 1, 0),
                                               ("Et*4|(t*4|)*14,tmL", 0, 1)])
def test_a_layout_must_hold_the_models_mtp_layers(v3, layout, mtp, found):
    from simulator.strategies import parse_strategy
    cfg = parse_strategy({"name": "megatron", "pipeline_model_parallel_size": 4,
                          "expert_model_parallel_size": 64,
                          "pipeline_model_parallel_layout": layout})
    with pytest.raises(ConfigError, match=f"{found} multi-token-prediction layer") as e:
        cfg.check_model(replace(v3, mtp_layers=mtp))
    assert e.value.field == FIELD
    cfg.check_model(replace(v3, mtp_layers=found))          # the matching model passes


def _tiny_mtp_scenario(tmp_path, **strategy):
    import yaml
    model = _file(layers=4, mtp_layers=1, moe=dict(num_experts=4, top_k=2, ffn_hidden=256,
                                                   shared_experts=1, first_dense_layers=1))
    path = tmp_path / "tiny-mla.yaml"
    path.write_text(yaml.safe_dump(model))
    return {"name": "tiny-mla", "model": str(path),
            "training": {"micro_batch": 1, "seq_len": 256, "grad_accum": 4,
                         "precision": "bf16", "flash_attention": True},
            "cluster": {"topology": "dgx-h100-superpod", "nodes": 1},
            "strategy": {"name": "megatron", "tensor_model_parallel_size": 2,
                         "pipeline_model_parallel_size": 2, "sequence_parallel": True,
                         "expert_model_parallel_size": 2, "use_distributed_optimizer": True,
                         **strategy}}


def test_an_mla_model_with_mtp_runs_under_tp_sp_pp_and_ep(tmp_path):
    from simulator.validation.parallel.iteration import simulate
    metrics = simulate(_tiny_mtp_scenario(tmp_path), "tiny")
    assert metrics.iteration_time_s > 0 and not metrics.oom
    with pytest.raises(ConfigError, match="0 multi-token-prediction layer") as e:
        simulate(_tiny_mtp_scenario(tmp_path, pipeline_model_parallel_layout="Ett|ttL"), "t")
    assert e.value.field == FIELD


def test_the_mtp_layers_run_on_the_last_stage_before_the_head_outside_the_split():
    from simulator.strategies.parallel.plan import ParallelPlan
    from simulator.strategies.parallel.stages import chunks
    model = parse_model(_file(layers=4, mtp_layers=1), "f.yaml")
    layers = layer_costs(model, 1, 128, "bf16")
    stages = chunks(layers, ParallelPlan(pp=2))
    first, last = stages[(0, 0)].layers, stages[(1, 0)].layers
    # the 4 blocks split 2 + 2, as without MTP; the MTP layers join the loss's stage
    assert [x.name for x in first] == ["embed", "block.0", "block.1"]
    assert [x.name for x in last] == ["block.2", "block.3", "mtp.0.embed", "mtp.0.proj",
                                      "mtp.0.block.0", "mtp.0.head", "head"]
