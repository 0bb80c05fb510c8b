"""Megatron-Core's ``recompute_modules`` under ``recompute_granularity: selective``: what each
module drops from a block's saved activations and which forward kernels it reruns
(:mod:`simulator.strategies.checkpointing`).

The blocks are one sequence of S = 256 tokens at bf16 (e = 2), one rank (no TP, every
expert on the rank): DeepSeek-V3 (MLA, h = 7168, dense f = 18432, 256 experts of 2048, top
8, one shared expert; blocks 0-2 dense, 3 on MoE), GPT-OSS 120B (h = 2880, every block MoE,
128 experts of 2880, top 4, no MLA) and Llama-2-7B (dense, h = 4096, f = 11008).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.models.costs import layer_costs
from simulator.models.moe import moe_activation_bytes
from simulator.strategies import FSDPConfig, World
from simulator.strategies.checkpointing import recompute_plan
from simulator.strategies.frameworks.files import read_config
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.generate import build_parallel

S, E = 256, 2


def blocks(name: str, flash: bool = True):
    return {L.name: L for L in layer_costs(load_model(name), 1, S, "bf16", flash)}


def selective(modules=None) -> MegatronConfig:
    extra = {} if modules is None else {"recompute_modules": modules}
    return MegatronConfig(recompute_granularity="selective", **extra)


def dropped(layer, modules) -> int:
    plan = recompute_plan(layer, selective(modules))
    return 0 if plan is None else layer.activation_bytes - plan.kept_bytes


def rerun(layer, modules) -> list[str]:
    plan = recompute_plan(layer, selective(modules))
    return [] if plan is None else [layer.forward[i].name for i in plan.ops]


@pytest.mark.parametrize("name", ["deepseek-v3", "gpt-oss-120b", "kimi-k2",
                                  "nemotron-3-nano-30b-a3b", "nemotron-3-super"])
def test_moe_blocks_attribute_every_saved_tensor_to_an_op(name):
    for L in blocks(name).values():
        if L.kind.endswith("block"):
            assert sum(c.saved_bytes for c in L.forward) == L.activation_bytes, L.name


def test_a_hybrids_moe_layer_counts_its_moe_half_once():
    # Nemotron 3 Nano's E layer: the pre-MLP norm's output e t h and the residual stream
    # e t h, plus the MoE half of moe_activation_bytes (its kernels carry those bytes)
    model = load_model("nemotron-3-nano-30b-a3b")
    layer = blocks("nemotron-3-nano-30b-a3b")["block.1"]
    moe_half = moe_activation_bytes(model, S, E, S * model.top_k)
    assert layer.activation_bytes == 2 * E * S * model.hidden + moe_half


def test_the_default_is_todays_selective_recompute_of_the_attention_core():
    for flash in (True, False):
        for L in blocks("llama-2-7b", flash).values():
            old = recompute_plan(L, FSDPConfig(activation_checkpointing="selective",
                                               selective_ac_option="attention"))
            assert recompute_plan(L, selective()) == old
            assert recompute_plan(L, selective(["core_attn"])) == old


def test_core_attn_on_an_moe_block_keeps_the_moe_half():
    moe = blocks("deepseek-v3")["block.3"]
    # flash attention: the core's output stays for attn_out, nothing is freed; the MoE
    # half's permuted tokens, expert tensors and router probabilities stay too
    assert rerun(moe, ["core_attn"]) == ["attn_core"]
    assert dropped(moe, ["core_attn"]) == 0


def test_layernorm_drops_the_norms_that_are_modules_of_their_own():
    ds, oss = blocks("deepseek-v3"), blocks("gpt-oss-120b")
    h_ds, h_oss = 7168, 2880
    # MLA MoE block: input norm (TENorm before the TELinear down projections) and pre-MLP
    # norm (TENorm before the router): 2 x e t h
    assert rerun(ds["block.3"], ["layernorm"]) == ["norm1", "norm2"]
    assert dropped(ds["block.3"], ["layernorm"]) == 2 * E * S * h_ds
    # MLA dense block: the pre-MLP norm is fused into fc1 (an IdentityOp): e t h
    assert dropped(ds["block.0"], ["layernorm"]) == E * S * h_ds
    # GPT-OSS: its input norm fused into linear_qkv, the pre-MLP norm before the router
    assert rerun(oss["block.0"], ["layernorm"]) == ["norm2"]
    assert dropped(oss["block.0"], ["layernorm"]) == E * S * h_oss
    # Llama: both fused, nothing to recompute
    assert recompute_plan(blocks("llama-2-7b")["block.0"], selective(["layernorm"])) is None


def test_mlp_recomputes_the_dense_mlp_only():
    ds = blocks("deepseek-v3")
    h, f = 7168, 18432
    # the fused pre-MLP norm's output e t h, SwiGLU's gate and up 2 e t f, its output e t f
    assert rerun(ds["block.0"], ["mlp"]) == ["norm2", "mlp_gate_up", "swiglu", "mlp_down"]
    assert dropped(ds["block.0"], ["mlp"]) == E * S * h + 2 * E * S * f + E * S * f
    # TransformerLayer ignores "mlp" on an MoE layer
    assert recompute_plan(ds["block.3"], selective(["mlp"])) is None


def test_moe_act_drops_the_experts_activation_output():
    moe = blocks("deepseek-v3")["block.3"]
    copies, f = S * 8, 2048           # t k token copies on the rank's experts, moe_ffn_hidden
    assert rerun(moe, ["moe_act"]) == ["moe_expert_swiglu"]
    assert dropped(moe, ["moe_act"]) == E * copies * f
    oss = blocks("gpt-oss-120b")["block.0"]
    assert dropped(oss, ["moe_act"]) == E * (S * 4) * 2880


def test_shared_experts_drop_their_inner_tensors():
    moe = blocks("deepseek-v3")["block.3"]
    fs = 1 * 2048                     # shared_experts x moe_ffn_hidden
    assert rerun(moe, ["shared_experts"]) == ["moe_shared_gate_up", "moe_shared_swiglu",
                                              "moe_shared_down"]
    assert dropped(moe, ["shared_experts"]) == 2 * E * S * fs + E * S * fs
    # GPT-OSS has no shared experts: there is nothing to checkpoint
    assert recompute_plan(blocks("gpt-oss-120b")["block.0"],
                          selective(["shared_experts"])) is None


def test_mla_up_proj_drops_q_k_and_v():
    L = blocks("deepseek-v3")["block.3"]
    a, dn, dr, dv = 128, 128, 64, 128
    assert rerun(L, ["mla_up_proj"]) == ["q_up_proj", "kv_up_proj", "rotary"]
    # Q and K (a (dn + dr) each) and V (a dv) per token
    assert dropped(L, ["mla_up_proj"]) == E * S * a * (2 * (dn + dr) + dv)


def test_modules_add_up_and_an_empty_list_recomputes_nothing():
    L = blocks("deepseek-v3")["block.3"]
    parts = ["mla_up_proj", "layernorm", "moe_act", "shared_experts"]
    assert dropped(L, parts) == sum(dropped(L, [m]) for m in parts)
    assert recompute_plan(L, selective([])) is None


def _trace(modules):
    small = dataclasses.replace(load_model("deepseek-v3"), layers=4, mtp_layers=0)
    plan = ParallelPlan(pp=1, dp_shard=8, ep=8, dp_mode="zero1")
    cfg = MegatronConfig(micro_batch=1, grad_accum=1, use_distributed_optimizer=True,
                         recompute_granularity="selective", recompute_modules=modules)
    return build_parallel(small, plan, cfg, World(8, 8), seq_len=S)


def test_recompute_reruns_the_forward_kernels_at_their_forward_price():
    base, more = _trace(["core_attn"]), _trace(["core_attn", "mla_up_proj", "moe_act"])

    def ops(trace, phase):
        return [o for o in trace.classes[0].ops if o.phase == phase]
    before = {(o.layer, o.name) for o in ops(base, "recompute")}
    extra = sorted((o.layer, o.name) for o in ops(more, "recompute")
                   if (o.layer, o.name) not in before)
    # every block's up projections and rotary, and the MoE block's expert activation
    assert extra == sorted([(f"block.{i}", n) for i in range(4)
                            for n in ("q_up_proj", "kv_up_proj", "rotary")]
                           + [("block.3", "moe_expert_swiglu")])
    forward = {(o.layer, o.name): (o.flops, o.bytes_accessed) for o in ops(more, "forward")}
    for o in ops(more, "recompute"):
        assert (o.flops, o.bytes_accessed) == forward[(o.layer, o.name)]
    # the activation reruns on the tokens already received: no second dispatch
    assert not any(o.collective for o in ops(more, "recompute"))
    # the forward is the same either way
    assert [(o.name, o.flops) for o in ops(base, "forward")] == \
        [(o.name, o.flops) for o in ops(more, "forward")]


@pytest.mark.parametrize("kw, words", [
    ({"recompute_granularity": "selective", "recompute_modules": ["attn"]}, "unknown module"),
    ({"recompute_granularity": "selective", "recompute_modules": ["moe"]}, "not modelled"),
    ({"recompute_granularity": "full", "recompute_modules": ["mlp"]}, "selective"),
    ({"recompute_modules": ["mlp"]}, "selective"),
])
def test_settings_megatron_would_refuse_or_not_modelled_are_refused(kw, words):
    with pytest.raises(ConfigError) as info:
        MegatronConfig(**kw)
    assert info.value.field == "strategy.recompute_modules" and words in str(info.value)


@pytest.mark.parametrize("module", ["mla_up_proj", "moe_act"])
def test_a_module_the_model_lacks_is_refused_where_megatron_refuses_it(module):
    cfg = selective([module])
    with pytest.raises(ConfigError) as info:
        cfg.check_model(load_model("llama-2-7b"))
    assert info.value.field == "strategy.recompute_modules" and module in str(info.value)
    cfg.check_model(load_model("deepseek-v3"))          # has both


def test_the_argument_file_takes_recompute_modules(tmp_path: Path):
    path = tmp_path / "a.args"
    path.write_text("--recompute-granularity selective --recompute-modules mla_up_proj "
                    "moe_act --micro-batch-size 1\n")
    p = read_config(path)
    assert p.strategy["recompute_modules"] == ["mla_up_proj", "moe_act"]
    assert "--recompute-modules" not in p.ignored


def test_validation_rows_run_the_recompute_their_release_preset_set():
    # Megatron-Bridge's DeepSeek-V3 presets (cases.yaml bridge_recipes): GB200 MXFP8
    # ["mla_up_proj"] at v0.5.0 (26.06), ["mlp"] at v0.4.0 (26.04); GB300 MXFP8
    # ["mla_up_proj"] at v0.4.0, [] at v0.5.0; GPT-OSS H100 ["layernorm", "moe_act"]
    from simulator.validation.parallel import cases, nemo
    spec, root = cases.load(), cases.default_root()
    expect = {("blackwell", "DeepSeekV3", "GB200", "26.06"): ["mla_up_proj"],
              ("blackwell", "DeepSeekV3", "GB200", "26.04"): ["mlp"],
              ("blackwell", "DeepSeekV3", "GB300", "26.04"): ["mla_up_proj"],
              ("blackwell", "DeepSeekV3", "GB300", "26.06"): None,
              ("bridge", "GPT OSS 120B", "H100", "26.02"): ["layernorm", "moe_act"]}
    seen = {}
    for kind in ("bridge", "blackwell"):
        for row in nemo.table_rows(root, spec, kind):
            key = (kind, row["model"], nemo.gpu_of(row), nemo.release_of(row))
            if key in expect and str(row["precision"]).strip() in ("MXFP8", "BF16"):
                strategy = nemo.scenario_of(row, root, spec, "x", kind)["strategy"]
                seen[key] = strategy.get("recompute_modules")
                assert (strategy.get("recompute_granularity") == "selective") == \
                    (seen[key] is not None)
    assert seen == expect
