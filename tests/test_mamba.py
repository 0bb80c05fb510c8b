"""Hybrid Mamba-Transformer models (simulator/models/mamba.py): the Mamba-2 layer's
parameters and FLOPs, the SSD formula, layer patterns and their refusals, with the
arithmetic written out (Nemotron 3 Nano's sizes: h 2688, 64 heads of 64, 8 groups of state
128, conv 4, chunk 128)."""

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.models.costs import layer_costs, model_flops_per_sample, params_total
from simulator.models.mamba import (
    layer_half, mamba_layer_cost, mamba_params, megatron_flops_per_token, pattern_counts,
    ssd_flops, ssd_kernels)
from simulator.models.moe import block_costs, is_moe_layer
from simulator.models.spec import load_model, parse_model
from simulator.models.transformer import block_cost

NANO = "nemotron-3-nano-30b-a3b"
ROOT = Path(__file__).resolve().parents[1]


def nano():
    return load_model(NANO)


def hybrid_file(**over):
    data = {"name": "tiny-hybrid", "family": "llama", "layers": 4, "hidden": 256,
            "heads": 4, "kv_heads": 2, "ffn_hidden": 512, "vocab": 1000,
            "max_seq_len": 2048, "mlp": "squared_relu", "position_embedding": "none",
            "layer_pattern": "M*ME",
            "mamba": {"heads": 8, "head_dim": 64, "state": 16, "groups": 2},
            "moe": {"num_experts": 4, "top_k": 2, "ffn_hidden": 128}}
    data.update(over)
    return {k: v for k, v in data.items() if v is not None}


def test_mamba_layer_params_written_out():
    # norm 2688; in_proj 2688 x (2*4096 + 2*8*128 + 64) = 2688 x 10304; conv1d over
    # 4096 + 2*8*128 = 6144 channels, (4 + 1) each; A_log, D, dt_bias 3 x 64; gated norm
    # 4096; out_proj 4096 x 2688
    expected = 2688 + 2688 * 10304 + 6144 * 5 + 3 * 64 + 4096 + 4096 * 2688
    assert expected == 38_744_896
    model = nano()
    assert mamba_params(model) == expected
    assert mamba_layer_cost(model, 1, 8192, 2).params == expected


def test_mamba_gemm_flops_and_backward():
    model, t = nano(), 2 * 4096
    layer = {op.name: op for op in mamba_layer_cost(model, 2, 4096, 2).forward}
    assert layer["mamba_in_proj"].flops == 2 * t * 2688 * 10304
    assert layer["mamba_out_proj"].flops == 2 * t * 4096 * 2688
    assert layer["mamba_conv1d"].flops == (2 * 4 + 4) * t * 6144   # 2K FMA + SiLU
    bwd = {op.name: op for op in mamba_layer_cost(model, 2, 4096, 2).backward}
    assert bwd["mamba_in_proj.dgrad"].flops == bwd["mamba_in_proj.wgrad"].flops \
        == 2 * t * 2688 * 10304
    assert bwd["mamba_conv1d.recompute"].flops == layer["mamba_conv1d"].flops


def test_ssd_flops_formula():
    # per token: C B^T 2 Q N G = 2*128*128*8; scores x X 2 Q P H = 2*128*64*64; chunk
    # states and state-to-output 2 N P H each = 2*128*64*64; state passing 2 N P H / Q
    per_token = (2 * 128 * 128 * 8 + 2 * 128 * 64 * 64 + 2 * 2 * 128 * 64 * 64
                 + 2 * 128 * 64 * 64 / 128)
    assert per_token == 3_416_064
    assert ssd_flops(nano(), 8192) == per_token * 8192
    # doubling the chunk doubles the two intra-chunk terms and halves state passing
    doubled = replace(nano(), mamba=replace(nano().mamba, chunk=256))
    assert ssd_flops(doubled, 1) == per_token + 262_144 + 1_048_576 - 8192 / 2


def test_ssd_kernels_as_mamba_ssm_launches_them():
    t = 8192
    fwd, bwd = ssd_kernels(nano(), t, 2)
    assert [op.name for op in fwd] == [f"mamba_ssd.{k}" for k in (
        "chunk_cumsum", "chunk_state", "state_passing", "bmm_chunk", "chunk_scan")]
    assert len(bwd) == 14              # 4 forward kernels recomputed, 10 gradient kernels
    # the products add up to the SSD's FLOPs; the cumsum adds 6 FLOPs per dt element
    assert sum(op.flops for op in fwd) == ssd_flops(nano(), t) + 6 * 64 * t
    by = {op.name: op for op in (*fwd, *bwd)}
    # chunk_state: B (8 x 128) and x (64 x 64) at 2 bytes, dt and dA_cumsum (64 each) in
    # fp32, the fp32 chunk states 64 x 64 x 128 / 128 per token
    assert by["mamba_ssd.chunk_state"].bytes_accessed == \
        t * (2 * (1024 + 4096) + 2 * 4 * 64 + 4 * 4096)
    # bmm_chunk: C and B in (2 x 1024 x 2 bytes), fp32 C B^T out (8 groups x 128)
    assert by["mamba_ssd.bmm_chunk"].bytes_accessed == t * (2 * 2 * 1024 + 4 * 8 * 128)
    assert by["mamba_ssd.bmm_chunk"].flops == 2 * 8 * 128 * 128 * t
    # backward: recomputed chunk states cost their forward
    assert by["mamba_ssd.chunk_state.recompute"].flops == by["mamba_ssd.chunk_state"].flops


def test_mamba_saved_activations():
    # residual stream 2 t h, in_proj output 2 t 10304, SSD output and out_proj input
    # 2 t 4096 each (bf16)
    t = 8192
    expected = 2 * t * 2688 + 2 * t * 10304 + 2 * 2 * t * 4096
    assert mamba_layer_cost(nano(), 1, t, 2).activation_bytes == expected


def test_nano_pattern_counts_and_layers():
    model = nano()
    assert pattern_counts(model) == {"Mamba-2": 23, "attention": 6, "MLP": 0, "MoE": 23}
    layers = block_costs(model, 1, 1024, 2, True)
    assert len(layers) == 52
    for i, (layer, sym) in enumerate(zip(layers, model.layer_pattern)):
        names = {op.name for op in layer.forward}
        assert is_moe_layer(model, i) == (sym == "E")
        assert ("mamba_ssd.chunk_scan" in names) == (sym == "M")
        assert ("attn_core" in names) == (sym == "*")
        assert ("moe_router" in names) == (sym == "E")


def test_nano_parameter_count():
    # embedding and untied head 131072 x 2688 each, final norm 2688; 23 Mamba layers
    # (38,744,896); 6 attention layers: norm, Q 2688x4096, K/V 2 x 2688x256, O 4096x2688;
    # 23 MoE layers: norm, router 2688x128, 128 experts 2 x 2688x1856, shared 2 x 2688x3712
    attention = 2688 + 2688 * 4096 + 2 * 2688 * 256 + 4096 * 2688
    moe = 2688 + 2688 * 128 + 128 * 2 * 2688 * 1856 + 2 * 2688 * 3712
    total = 2 * 131072 * 2688 + 2688 + 23 * 38_744_896 + 6 * attention + 23 * moe
    assert total == 31_577_937_344        # Hugging Face's model card: 31.6B
    assert params_total(nano()) == total


def test_attention_layer_is_the_blocks_attention_kernels():
    """One path, one price: a hybrid's attention layer runs the very kernels of a
    transformer block's attention half."""
    model = nano()
    dense = block_cost(model, 1, 2048, 2, True)
    attention = layer_half(dense, model, False)
    assert [op.name for op in attention.forward] == \
        ["norm1", "qkv_proj", "attn_core", "attn_out", "residual1"]
    assert all(op in dense.forward for op in attention.forward)
    assert attention.params == 2688 + 2688 * 4096 + 2 * 2688 * 256 + 4096 * 2688


def test_model_flops_count_attention_layers_only():
    model = nano()
    s = 4096
    n = params_total(model) - 131072 * 2688 - 23 * (128 - 6) * 2 * 2688 * 1856
    assert model_flops_per_sample(model, s) == 6.0 * n * s + 12.0 * 6 * 4096 * s ** 2


def test_megatron_flops_match_bridge_rows():
    """Megatron-LM's hybrid count on the catalog's Nano is the rows' tflops / tokens."""
    h, s, v = 2688, 8192, 131072
    attention = 4 * s * h * (128 * 32 / h) * (h + h * 2 / 32 + s / 2)
    mamba = 2 * s * h * (2 * 2 * h + 2 * 8 * 128 + 64) + 7 * s * 2 * h * 128 + 2 * s * 2 * h * h
    moe = 4 * s * h * 1856 * 6 + 4 * s * h * 3712
    per_token = 3 * (6 * attention + 23 * mamba + 23 * moe + 2 * s * h * v) / s
    assert megatron_flops_per_token(nano(), s) == pytest.approx(per_token, rel=1e-12)
    for name in ("megatron_bridge_h100.csv", "megatron_bridge_blackwell.csv"):
        with open(ROOT / "validation" / "parallel" / name) as f:
            for row in csv.DictReader(f):
                if row["model"] == "Nemotron_3_Nano":
                    ratio = float(row["tflops_per_gpu"]) * 1e12 / float(
                        row["tokens_per_s_per_gpu"])
                    assert ratio == pytest.approx(per_token, rel=0.015)


@pytest.mark.parametrize("over, field, words", [
    ({"layer_pattern": "M*MX"}, "layer_pattern", "unknown layer symbol 'X'"),
    ({"layer_pattern": "M*M"}, "layer_pattern", "3 symbols for 4 layers"),
    ({"layer_pattern": "M*M-"}, "layer_pattern", "a moe mapping needs E layers"),
    ({"moe": None}, "layer_pattern", "E (MoE) layers need a moe mapping"),
    ({"mamba": None}, "layer_pattern", "M (Mamba-2) layers need a mamba mapping"),
    ({"layer_pattern": None, "moe": None}, "mamba", "needs a layer_pattern"),
    ({"mamba": {"heads": 8, "head_dim": 64, "state": 16, "groups": 3}}, "mamba.groups",
     "groups (3) must divide heads (8)"),
    ({"mamba": {"heads": 8, "head_dim": 64}}, "mamba.state", None),
])
def test_pattern_refusals(over, field, words):
    with pytest.raises(ConfigError) as err:
        parse_model(hybrid_file(**over), "tiny.yaml")
    assert err.value.field == field
    assert "\n" not in str(err.value)
    if words:
        assert words in str(err.value)


def test_valid_tiny_hybrid_and_cp_refusal():
    model = parse_model(hybrid_file(), "tiny.yaml")
    assert pattern_counts(model) == {"Mamba-2": 2, "attention": 1, "MLP": 0, "MoE": 1}
    assert len(layer_costs(model, 1, 128, "bf16")) == 4 + 2
    with pytest.raises(ConfigError, match="context parallelism of a hybrid"):
        layer_costs(model, 1, 128, "bf16", cp=2)


def test_mlp_layer_is_the_blocks_mlp_half():
    model = parse_model(hybrid_file(layer_pattern="M*-E"), "tiny.yaml")
    layers = block_costs(model, 1, 128, 2, True)
    assert [op.name for op in layers[2].forward] == \
        ["norm2", "mlp_up", "squared_relu", "mlp_down", "residual2"]
    assert layers[2].params == 256 + 2 * 256 * 512        # norm, up and down, no bias


@pytest.mark.parametrize("strategy, field", [
    ({"context_parallel_size": 2}, "strategy.context_parallel_size"),
])
def test_hybrid_cp_refused_in_one_line(capsys, tmp_path, strategy, field):
    from test_cli import run_main
    from test_parallel_errors import scenario
    path = scenario(tmp_path, NANO, 8, {"expert_model_parallel_size": 4, **strategy})
    code, _, err = run_main(capsys, "run", path, "-q")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert path in lines[0] and f"{field}:" in lines[0] and "hybrid" in lines[0]


def test_memory_planner_counts_a_hybrids_layers_by_kind():
    """The analytic memory's parameters per rank (strategies/parallel/memory.py) are the
    layers' own: 23 Mamba, 6 attention, 23 MoE layers with 128 / 8 experts each."""
    from simulator.models.moe import moe_block_params
    from simulator.strategies.parallel import ParallelPlan
    from simulator.strategies.parallel.memory import block_params_per_rank, stage_params
    model = nano()
    attention = 2688 + 2688 * 4096 + 2 * 2688 * 256 + 4096 * 2688
    moe_ep8 = 2688 + 2688 * 128 + 16 * 2 * 2688 * 1856 + 2 * 2688 * 3712
    assert moe_block_params(model, 16) == moe_ep8
    assert [block_params_per_rank(model, 1, 8, i) for i in (0, 1, 5)] == \
        [38_744_896, moe_ep8, attention]
    plan = ParallelPlan(ep=8, dp_replicate=8, dp_mode="ddp")
    embed_head = 2 * 131072 * 2688 + 2688
    assert stage_params(model, plan, 0) == \
        embed_head + 23 * 38_744_896 + 6 * attention + 23 * moe_ep8


def latent_model():
    return parse_model(hybrid_file(moe={"num_experts": 4, "top_k": 2, "ffn_hidden": 128,
                                        "shared_experts": 1, "latent_size": 64}), "tiny.yaml")


def test_latent_moe_layer_written_out():
    """LatentMoE (Nemotron 3 Super's moe_latent_size): router and shared expert on h = 256,
    tokens projected to L = 64 for the routed experts and back."""
    from simulator.models.moe import inactive_params
    model = latent_model()
    layer = block_costs(model, 1, 128, 2, True)[3]                 # the E layer
    names = [op.name for op in layer.forward]
    assert names[:5] == ["norm2", "moe_router", "moe_topk", "moe_latent_down", "moe_permute"]
    assert names.index("moe_latent_up") == names.index("moe_unpermute") + 1
    # norm 256, router 256 x 4, 4 experts 2 x 64 x 128 (squared ReLU: up and down), the
    # shared expert 2 x 256 x 128, the projections 256 x 64 each way
    assert layer.params == 256 + 256 * 4 + 4 * 2 * 64 * 128 + 2 * 256 * 128 + 2 * 256 * 64
    ops = {op.name: op for op in layer.forward}
    assert ops["moe_expert_up"].k == 64 and ops["moe_shared_up"].k == 256
    assert ops["moe_latent_down"].flops == 2 * 128 * 256 * 64
    assert inactive_params(model) == 1 * (4 - 2) * 2 * 64 * 128


def test_latent_moe_dispatch_carries_latent_tokens():
    from simulator.strategies.parallel.moe import dispatch_bytes
    assert dispatch_bytes(latent_model(), 100, 2) == 100 * 2 * 64 * 2    # t k L e


def test_latent_moe_megatron_flops():
    model, s = latent_model(), 128
    h, f, lat = 256, 128, 64
    attention = 4 * s * h * (64 * 4 / h) * (h + h * 2 / 4 + s / 2)     # 4 heads of 64, 2 KV
    mamba = 2 * s * h * (2 * 2 * h + 2 * 2 * 16 + 8) + 7 * s * 2 * h * 16 + 2 * s * 2 * h * h
    moe = 4 * s * lat * f * 2 + 4 * s * h * lat + 4 * s * h * f * 1
    per_token = 3 * (attention + 2 * mamba + moe + 2 * s * h * 1000) / s
    assert megatron_flops_per_token(model, s) == pytest.approx(per_token, rel=1e-12)


def test_mtp_depths_written_out():
    """Two MTP depths of pattern *E on the tiny hybrid: each an embedding (shared table),
    enorm + hnorm + eh_proj 2h -> h, the model's own * and E layers, a final norm with the
    shared output layer and its loss."""
    model = parse_model(hybrid_file(mtp={"layers": 2, "pattern": "*E"}), "tiny.yaml")
    plain = parse_model(hybrid_file(), "tiny.yaml")
    layers = layer_costs(model, 1, 128, "bf16")
    names = [layer.name for layer in layers]
    assert names == ["embed", "block.0", "block.1", "block.2", "block.3",
                     "mtp.0.embed", "mtp.0.proj", "mtp.0.block.0", "mtp.0.block.1",
                     "mtp.0.head", "mtp.1.embed", "mtp.1.proj", "mtp.1.block.0",
                     "mtp.1.block.1", "mtp.1.head", "head"]
    by = {layer.name: layer for layer in layers}
    # the same kernels as the model's own attention (block.1) and MoE (block.3) layers
    assert by["mtp.1.block.0"].forward == by["block.1"].forward
    assert by["mtp.0.block.1"].forward == by["block.3"].forward
    assert by["mtp.0.proj"].params == 2 * 256 + 2 * 256 * 256   # two RMSNorms, eh_proj
    assert {op.name: op.flops for op in by["mtp.0.proj"].forward}["mtp_eh_proj"] == \
        2 * 128 * 512 * 256
    assert by["mtp.0.embed"].params == 0 and by["mtp.0.head"].params == 256
    # parameters: per depth the projection, the * and E layers and the final norm
    extra = 2 * (2 * 256 + 2 * 256 * 256 + by["block.1"].params + by["block.3"].params + 256)
    assert params_total(model) == params_total(plain) + extra


def test_mtp_refusals_and_pipeline():
    with pytest.raises(ConfigError) as err:
        parse_model(hybrid_file(mtp={"layers": 1, "pattern": "*-"}), "tiny.yaml")
    assert err.value.field == "mtp.pattern"
    with pytest.raises(ConfigError) as err:
        parse_model(hybrid_file(layer_pattern=None, mamba=None, moe=None,
                                mtp={"layers": 1, "pattern": "*"}), "tiny.yaml")
    assert err.value.field == "mtp"


def test_a_hybrids_mtp_depths_run_on_the_last_stage_under_pipeline_parallelism():
    """One MTP mechanism for transformers and hybrids (simulator/models/mtp.py): under PP2
    the pattern's 4 layers split 2 + 2 and the MTP depth joins the loss's stage."""
    from simulator.strategies.parallel.plan import ParallelPlan
    from simulator.strategies.parallel.stages import chunks
    model = parse_model(hybrid_file(mtp={"layers": 1, "pattern": "*E"}), "tiny.yaml")
    stages = chunks(layer_costs(model, 1, 128, "bf16"), ParallelPlan(pp=2))
    first, last = stages[(0, 0)].layers, stages[(1, 0)].layers
    assert [x.name for x in first] == ["embed", "block.0", "block.1"]
    assert [x.name for x in last] == ["block.2", "block.3", "mtp.0.embed", "mtp.0.proj",
                                      "mtp.0.block.0", "mtp.0.block.1", "mtp.0.head", "head"]


def test_super_megatron_flops_with_mtp():
    """Megatron-LM's count for Nemotron 3 Super (88 layers: 8 *, 40 M, 40 E; 2 MTP depths
    *E counted as layers, logits three times) is its Bridge rows' tflops / tokens."""
    h, s, v, lat, f = 4096, 8192, 131072, 1024, 2688
    attention = 4 * s * h * (128 * 32 / h) * (h + h * 2 / 32 + s / 2)
    mamba = 2 * s * h * (2 * 2 * h + 2 * 8 * 128 + 128) + 7 * s * 2 * h * 128 + 2 * s * 2 * h * h
    moe = 4 * s * lat * f * 22 + 4 * s * h * lat + 4 * s * h * 5376
    per_token = 3 * ((8 + 2) * attention + 40 * mamba + (40 + 2) * moe + 2 * s * h * v * 3) / s
    assert megatron_flops_per_token(load_model("nemotron-3-super"), s) == \
        pytest.approx(per_token, rel=1e-12)
    with open(ROOT / "validation" / "parallel" / "megatron_bridge_blackwell.csv") as f_:
        ratios = [float(r["tflops_per_gpu"]) * 1e12 / float(r["tokens_per_s_per_gpu"])
                  for r in csv.DictReader(f_) if r["model"] == "Nemotron_3_Super"]
    assert ratios and all(ratio == pytest.approx(per_token, rel=0.02) for ratio in ratios)


def test_mamba_layer_under_tensor_parallelism():
    """TP2 splits the 64 heads and 8 groups: in_proj 2688 -> 10304 / 2, conv over 6144 / 2
    channels, out_proj 2048 -> 2688; the norm stays whole (and on half the tokens under
    sequence parallelism)."""
    model, t = nano(), 4096
    layer = mamba_layer_cost(model, 1, t, 2, tp=2, sp=True)
    ops = {op.name: op for op in layer.forward}
    assert ops["mamba_in_proj"].flops == 2 * t * 2688 * 5152
    assert ops["mamba_out_proj"].flops == 2 * t * 2048 * 2688
    assert ops["mamba_norm"].flops == 4 * (t // 2) * 2688             # RMSNorm, 4 per element
    assert layer.params == 2688 + (2688 * 10304 + 6144 * 5 + 3 * 64 + 4096 + 4096 * 2688) // 2
    from simulator.strategies.parallel.memory import block_params_per_rank
    assert block_params_per_rank(model, 2, 1, 0) == layer.params


def test_mamba_tp_collectives_are_an_attention_layers():
    """Under TP2 with sequence parallelism a Mamba layer runs the same TP collectives as an
    attention layer (all-gather before the column-parallel in_proj, reduce-scatter after the
    row-parallel out_proj, and their backward), of the same b s h sizes."""
    from simulator.strategies import World
    from simulator.strategies.frameworks.megatron import MegatronConfig
    from simulator.strategies.parallel import ParallelPlan
    from simulator.strategies.parallel.generate import build_parallel
    model = parse_model(hybrid_file(layer_pattern="M*M-", moe=None), "tiny.yaml")
    plan = ParallelPlan(tp=2, sequence_parallel=True, dp_mode="ddp")
    cfg = MegatronConfig(micro_batch=1, grad_accum=1, tensor_model_parallel_size=2,
                         sequence_parallel=True)
    trace = build_parallel(model, plan, cfg, World(2, 2), seq_len=256, flash=True)

    def tp_ops(layer):
        return sorted((op.phase, op.collective, op.size_bytes) for op in trace.classes[0].ops
                      if op.kind == "collective" and op.comm.startswith("tp")
                      and op.layer == layer)
    mamba, attention = tp_ops("block.0"), tp_ops("block.1")
    assert len(mamba) == 5 and mamba == attention
    assert {size for *_, size in mamba} == {256 * 256 * 2}           # b s h at 2 bytes


def test_mamba_groups_must_split_over_tp():
    from simulator.strategies.parallel import ParallelPlan
    model = parse_model(hybrid_file(kv_heads=4), "tiny.yaml")      # 8 heads, 2 groups
    with pytest.raises(ConfigError, match="does not divide tiny-hybrid's 2 mamba groups"):
        ParallelPlan(tp=4, sequence_parallel=True, dp_mode="ddp").check(model, 4, seq_len=128)
