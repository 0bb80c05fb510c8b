"""Model catalog and per-layer costs: published sizes, FLOP identities, activations, errors."""

import pytest
import yaml

from simulator.errors import ConfigError
from simulator.models import (
    layer_costs, load_model, lookup_params, model_flops_per_sample, model_names, params_total,
    tokens_per_sample)
from simulator.models.resnet import resnet_forward_flops
from simulator.models.transformer import block_params

OP_CLASSES = {"matmul", "attention", "elementwise", "norm", "conv", "embedding", "loss"}
ATTN_MATMULS = {"attn_scores", "attn_av"}


@pytest.mark.parametrize("name, published", [
    ("gpt2-small", 124.44e6), ("gpt2-xl", 1.558e9), ("gpt3-175b", 174.6e9),
    ("llama-2-7b", 6.74e9), ("llama-2-13b", 13.02e9), ("llama-2-70b", 68.98e9),
    ("llama-2-34b", 33.7e9), ("bert-large", 335e6), ("resnet-50", 25.557e6),
    ("mingpt-1t", 1.0e12),
])
def test_parameter_counts_match_published_sizes(name, published):
    assert params_total(load_model(name)) == pytest.approx(published, rel=0.02)


def test_bert_large_between_335_and_340_million():
    assert 335e6 <= params_total(load_model("bert-large")) <= 340e6


def test_catalog_names_and_case_insensitive_lookup():
    names = set(model_names())
    for required in ("gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3-1.3b",
                     "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b", "mingpt-175b",
                     "mingpt-1t", "llama-2-7b", "llama-2-13b", "llama-2-34b", "llama-2-70b",
                     "bert-large", "resnet-50"):
        assert required in names
    spec = load_model("LLaMA-2-70B")
    assert (spec.layers, spec.hidden, spec.heads, spec.kv_heads, spec.ffn_hidden,
            spec.vocab, spec.mlp, spec.norm) == (80, 8192, 64, 8, 28672, 32000, "swiglu",
                                                 "rmsnorm")
    assert all(load_model(n).source for n in names)


def test_a_catalog_name_reads_its_own_file_alone_and_equals_the_catalog(monkeypatch):
    """Each catalog file is named after its model, so a run reads that file alone
    (docs/speed.md: ~30 ms of every start); what it reads equals the whole catalog's entry,
    and a name without a file of its own is still found in the catalog."""
    from simulator.models import spec as spec_module
    folder = spec_module._catalog_folder()
    catalog = spec_module._catalog()
    stems = {e.name.removesuffix(".yaml") for e in folder.iterdir() if e.name.endswith(".yaml")}
    assert stems == set(catalog)
    read = []
    real = spec_module.parse_model_file
    monkeypatch.setattr(spec_module, "parse_model_file", lambda p: read.append(p) or real(p))
    spec_module._catalog_model.cache_clear()
    monkeypatch.setattr(spec_module, "_catalog", lambda: catalog)
    try:
        for name in sorted(catalog):
            read.clear()
            assert load_model(name.upper()) == catalog[name]
            assert [p.name for p in read] == [f"{name}.yaml"]
    finally:
        spec_module._catalog_model.cache_clear()


def test_unknown_model_lists_the_catalog():
    with pytest.raises(ConfigError, match="gpt3-175b"):
        load_model("gpt-5")


@pytest.mark.parametrize("name", ["gpt3-175b", "llama-2-70b", "bert-large", "gpt2-small"])
def test_forward_matmul_flops_per_token_are_twice_the_block_params(name):
    model = load_model(name)
    s = min(model.max_seq_len, 1024)
    block = layer_costs(model, 2, s, "bf16")[1]
    flops = sum(op.flops for op in block.forward
                if op.op_class == "matmul" and op.name not in ATTN_MATMULS)
    assert flops / (2 * s) == pytest.approx(2 * block_params(model), rel=0.01)


@pytest.mark.parametrize("name", ["gpt3-175b", "llama-2-7b", "bert-large"])
def test_backward_is_twice_forward(name):
    model = load_model(name)
    s = min(model.max_seq_len, 2048)
    for layer in layer_costs(model, 1, s, "bf16", flash_attention=False)[1:-1]:
        assert layer.backward_flops == pytest.approx(2 * layer.forward_flops, rel=0.01)
    head = layer_costs(model, 1, s, "bf16")[-1]
    assert head.backward_flops == pytest.approx(2 * head.forward_flops, rel=0.01)


@pytest.mark.parametrize("name", ["gpt3-175b", "bert-large"])
def test_flash_attention_changes_bytes_and_skips_the_causal_half(name):
    model = load_model(name)
    b, s = 2, min(model.max_seq_len, 2048)
    flash = layer_costs(model, b, s, "bf16", flash_attention=True)
    plain = layer_costs(model, b, s, "bf16", flash_attention=False)
    # FlashAttention skips the masked tiles of a causal mask: (s + 1) / (2 s) of the square
    c = (s + 1) / (2 * s) if model.causal else 1.0
    assert model.causal == (name == "gpt3-175b")
    core_ops = ("attn_scores", "softmax", "attn_dropout", "attn_av")
    for f, p in zip(flash, plain):
        core = sum(op.flops for op in p.forward if op.name in core_ops)
        # dropout's FLOPs run inside the flash kernel too (counted there as 0)
        drop = sum(op.flops for op in p.forward if op.name == "attn_dropout")
        assert f.forward_flops == pytest.approx(p.forward_flops - core + c * (core - drop),
                                                rel=1e-12)
    bytes_of = lambda layer: sum(op.bytes_accessed for op in layer.forward)  # noqa: E731
    assert bytes_of(flash[1]) < 0.7 * bytes_of(plain[1])
    assert "attn_core" in [op.name for op in flash[1].forward]
    assert {"attn_scores", "softmax", "attn_av"} <= {op.name for op in plain[1].forward}
    # Backward: flash recomputes QK^T (2 b s^2 h) and the softmax (5 per score element);
    # 2.5x the forward attention matmuls plus 8 per score element, all times c
    h, a = model.hidden, model.heads
    attn_fwd = 4 * b * s * s * h
    core = next(op for op in flash[1].backward if op.name == "attn_core.bwd")
    assert core.flops == pytest.approx(c * (2.5 * attn_fwd + 8 * b * a * s * s))
    fwd = next(op for op in flash[1].forward if op.name == "attn_core")
    assert fwd.flops == pytest.approx(c * (attn_fwd + 5 * b * a * s * s))
    assert (fwd.m, fwd.n, fwd.k) == (b * a * s, round(c * s), model.head_dim)


def test_gqa_shrinks_the_qkv_projection():
    model = load_model("llama-2-70b")
    t, h, d = 4096, model.hidden, model.head_dim
    qkv = next(op for op in layer_costs(model, 1, t, "bf16")[1].forward if op.name == "qkv_proj")
    assert qkv.flops == 2 * t * h * (h + 2 * 8 * d)


@pytest.mark.parametrize("b, s", [(1, 2048), (4, 2048), (2, 512)])
def test_gpt_block_activation_equals_korthikanti(b, s):
    model = load_model("mingpt-175b")           # GPT-3 175B shapes, with dropout 0.1
    h, a = model.hidden, model.heads
    korthikanti = s * b * h * (34 + 5 * a * s / h)      # bytes, 16-bit, no flash
    plain = layer_costs(model, b, s, "fp16", flash_attention=False)[1]
    assert plain.activation_bytes == korthikanti
    assert layer_costs(model, b, s, "bf16")[1].activation_bytes == s * b * h * 34
    # fp32: tensors double, the three 1-byte dropout masks do not
    fp32 = layer_costs(model, b, s, "fp32", flash_attention=False)[1]
    assert fp32.activation_bytes == s * b * h * (2 * 32 + 2) + b * a * s * s * (2 * 4 + 1)
    assert plain.output_bytes == 2 * s * b * h


def test_no_dropout_no_masks_and_no_dropout_kernels():
    """Without dropout (GPT-3, Llama) Korthikanti's masks (s b h twice, a s^2 b) and the
    dropped-out probabilities (2 a s^2 b) are not saved, and no dropout kernel runs."""
    gpt3, b, s = load_model("gpt3-175b"), 2, 512
    h, a = gpt3.hidden, gpt3.heads
    assert gpt3.dropout == 0 and load_model("llama-2-7b").dropout == 0
    plain = layer_costs(gpt3, b, s, "fp16", flash_attention=False)[1]
    assert plain.activation_bytes == s * b * h * (32 + 2 * a * s / h)
    names = {op.name for layer in layer_costs(gpt3, b, s, "bf16", False)
             for op in (*layer.forward, *layer.backward)}
    assert not any("dropout" in n for n in names)


def test_dropout_kernels_read_write_and_mask():
    bert, b, s = load_model("bert-large"), 2, 128
    t, h, a = b * s, bert.hidden, bert.heads
    assert bert.dropout == 0.1
    embed, block = layer_costs(bert, b, s, "fp16", flash_attention=False)[:2]
    fwd, bwd = _ops(block), _ops(block, "backward")
    for name in ("attn_out.dropout", "mlp_down.dropout"):   # hidden dropouts, 16-bit
        assert fwd[name].bytes_accessed == (2 + 2 + 1) * t * h
        assert bwd[f"{name}.bwd"].bytes_accessed == (2 + 1 + 2) * t * h
    assert fwd["attn_dropout"].bytes_accessed == 5 * b * a * s * s
    assert _ops(embed)["embed_dropout"].bytes_accessed == 5 * t * h
    # flash attention drops the probabilities inside its kernel
    flash = _ops(layer_costs(bert, b, s, "fp16", flash_attention=True)[1])
    assert "attn_dropout" not in flash and "attn_out.dropout" in flash


def test_model_flops_per_sample_formula():
    model = load_model("gpt3-175b")
    s = 2048
    n = params_total(model) - s * model.hidden          # position table is lookup-only
    assert lookup_params(model) == s * model.hidden
    expected = 6 * n * s + 12 * model.layers * model.hidden * s * s
    assert model_flops_per_sample(model, s) == pytest.approx(expected)
    layers = layer_costs(model, 1, s, "bf16", flash_attention=False)
    simulated = sum(layer.forward_flops + layer.backward_flops for layer in layers)
    assert simulated == pytest.approx(expected, rel=0.01)
    assert tokens_per_sample(model, s) == s


def test_resnet50_costs():
    model = load_model("resnet-50")
    assert resnet_forward_flops(model) == pytest.approx(8.2e9, rel=0.05)
    assert model_flops_per_sample(model, 0) == 3 * resnet_forward_flops(model)
    assert tokens_per_sample(model, 0) == 0
    layers = layer_costs(model, 8, 0, "fp16")
    names = [layer.name for layer in layers]
    assert names[0] == "stem" and names[-1] == "head" and len(names) == 18
    assert names[1:4] == ["layer1.0", "layer1.1", "layer1.2"] and names[-2] == "layer4.2"
    conv = sum(op.flops for layer in layers for op in layer.forward if op.op_class == "conv")
    assert conv / 8 == pytest.approx(8.2e9, rel=0.05)
    assert layers[-2].output_bytes == 2 * 8 * 2048 * 7 * 7
    per_image = sum(layer.activation_bytes for layer in layers) / 8
    assert 20e6 < per_image < 100e6          # fp16 feature maps, tens of MB per image


@pytest.mark.parametrize("name", ["gpt2-small", "llama-2-7b", "bert-large", "resnet-50"])
def test_every_op_is_well_formed(name):
    model = load_model(name)
    for layer in layer_costs(model, 2, 128, "bf16"):
        assert layer.forward and layer.backward and layer.params > 0
        for op in layer.forward + layer.backward:
            assert op.op_class in OP_CLASSES and op.flops >= 0 and op.bytes_accessed > 0


def _write(tmp_path, data, name="mine.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


USER = dict(name="tiny-gpt", family="gpt", source="test", layers=2, hidden=64, heads=4,
            vocab=1000, max_seq_len=128)


def test_user_yaml_model_loads_with_family_defaults(tmp_path):
    spec = load_model(str(_write(tmp_path, USER)))
    assert (spec.kv_heads, spec.ffn_hidden, spec.mlp, spec.norm, spec.tied_embeddings) == (
        4, 256, "gelu", "layernorm", True)
    assert len(layer_costs(spec, 1, 128, "fp32")) == 4
    llama = load_model(_write(tmp_path, {**USER, "family": "llama", "kv_heads": 2}))
    assert (llama.mlp, llama.norm, llama.position_embedding, llama.kv_heads) == (
        "swiglu", "rmsnorm", "rope", 2)
    bert = load_model(_write(tmp_path, {**USER, "family": "bert"}))
    assert (spec.dropout, llama.dropout, bert.dropout) == (0.0, 0.0, 0.1)
    assert load_model(_write(tmp_path, {**USER, "dropout": 0.2})).dropout == 0.2


@pytest.mark.parametrize("change, field", [
    ({"dropout": 1.0}, "dropout"),
    ({"dropout": -0.1}, "dropout"),
    ({"hiden": 64}, "hiden"),
    ({"hidden": None}, "hidden"),
    ({"hidden": 0}, "hidden"),
    ({"layers": -2}, "layers"),
    ({"hidden": "64"}, "hidden"),
    ({"heads": 5}, "heads"),
    ({"kv_heads": 3}, "kv_heads"),
    ({"family": "mamba"}, "family"),
    ({"mlp": "relu"}, "mlp"),
    ({"tied_embeddings": "yes"}, "tied_embeddings"),
])
def test_bad_yaml_names_file_and_field(tmp_path, change, field):
    data = {k: v for k, v in {**USER, **change}.items() if v is not None}
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        load_model(str(path))
    assert err.value.source == str(path) and err.value.field == field
    assert str(path) in str(err.value) and field in str(err.value)


def test_bad_resnet_depth_and_unreadable_file(tmp_path):
    path = _write(tmp_path, dict(name="r34", family="resnet", source="x", depth=34))
    with pytest.raises(ConfigError) as err:
        load_model(path)
    assert err.value.field == "depth"
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed")
    with pytest.raises(ConfigError) as err:
        load_model(broken)
    assert err.value.source == str(broken)
    with pytest.raises(ConfigError, match="no such file"):
        load_model(tmp_path / "missing.yaml")


@pytest.mark.parametrize("kwargs, field", [
    (dict(precision="fp4"), "precision"),
    (dict(seq_len=2048), "seq_len"),
    (dict(batch=0), "batch"),
])
def test_layer_cost_arguments_are_checked(kwargs, field):
    args = dict(batch=1, seq_len=128, precision="bf16") | kwargs
    with pytest.raises(ConfigError) as err:
        layer_costs(load_model("gpt2-small"), **args)
    assert err.value.field == field


def test_a_user_model_file_needs_no_source_but_says_where_it_came_from(tmp_path):
    from simulator.models import load_model
    path = tmp_path / "tiny.yaml"
    path.write_text("name: tiny\nfamily: llama\nlayers: 2\nhidden: 128\nheads: 2\n"
                    "vocab: 1000\nmax_seq_len: 4096\n")
    spec = load_model(str(path))
    assert spec.source == f"user-defined model, file {path}"
    assert spec.layers == 2 and spec.heads == 2


# ---------------------------------------------------------------------- autocast
def _ops(layer, phase="forward"):
    return {op.name: op for op in getattr(layer, phase)}


@pytest.mark.parametrize("name", ["bert-large", "gpt3-175b"])
def test_autocast_adds_traffic_not_flops(name):
    model = load_model(name)
    pure = layer_costs(model, 4, 128, "fp16", flash_attention=False)
    amp = layer_costs(model, 4, 128, "fp16", flash_attention=False, autocast=True)
    for p, a in zip(pure, amp):
        assert a.forward_flops == pytest.approx(p.forward_flops, rel=1e-12)
        assert a.backward_flops == pytest.approx(p.backward_flops, rel=1e-12)
        for phase in ("forward", "backward"):
            assert sum(op.bytes_accessed for op in getattr(a, phase)) > \
                sum(op.bytes_accessed for op in getattr(p, phase))
    # matmuls read the same 16-bit operands either way
    for op in ("qkv_proj", "mlp_up", "attn_scores"):
        assert _ops(amp[1])[op] == _ops(pure[1])[op]
    # fp32 and tf32 have nothing to cast: autocast is a no-op there
    assert layer_costs(model, 4, 128, "tf32", autocast=True) == layer_costs(model, 4, 128, "tf32")


def test_autocast_block_traffic_by_tensor():
    """Each autocast op counted from the tensors it reads and writes (2-byte copies, 4-byte
    fp32 tensors), independently of the implementation's formulas."""
    model = load_model("bert-large")
    b, s = 2, 128
    t, h, a = b * s, model.hidden, model.heads
    scores = b * a * s * s
    blk = layer_costs(model, b, s, "fp16", flash_attention=False, autocast=True)[1]
    fwd, bwd = _ops(blk), _ops(blk, "backward")
    # LayerNorm in fp32: read x (4 B), write y (4 B), fp32 weight and bias
    assert fwd["norm1"].bytes_accessed == 8 * t * h + 4 * 2 * h
    # the fp32 LayerNorm output copied to fp16 for the QKV matmul, and the gradient back
    assert fwd["cast.norm1"].bytes_accessed == (4 + 2) * t * h
    assert bwd["cast.norm1.bwd"].bytes_accessed == (2 + 4) * t * h
    # fp16 branch + fp32 residual -> fp32
    assert fwd["residual1"].bytes_accessed == (2 + 4 + 4) * t * h
    # softmax: cast scores up (2+4), softmax in fp32 (4+4), probs down for AV (4+2)
    assert fwd["softmax"].bytes_accessed == (6 + 8 + 6) * scores
    # every fp32 weight copied to fp16 once per forward, its fp16 gradient back to fp32
    assert fwd["weight_cast"].bytes_accessed == 6 * block_params(model)
    assert bwd["weight_cast.bwd"].bytes_accessed == 6 * block_params(model)
    # saved for backward: fp32 norm inputs; the softmax output in fp32 (4 bytes, not 2)
    # next to the 16-bit probabilities AV reads (the dropout output, saved either way)
    pure = layer_costs(model, b, s, "fp16", flash_attention=False)[1]
    assert blk.activation_bytes - pure.activation_bytes == 2 * 2 * t * h + 2 * scores
    assert blk.output_bytes == 4 * t * h


def test_autocast_loss_runs_in_fp32():
    model = load_model("gpt2-small")
    t, v = 2 * 64, model.vocab
    head = _ops(layer_costs(model, 2, 64, "bf16", autocast=True)[-1])
    pure = _ops(layer_costs(model, 2, 64, "bf16")[-1])
    assert pure["cross_entropy"].bytes_accessed == 2 * 2 * t * v
    # cast logits up (2+4), log_softmax in fp32 (4+4)
    assert head["cross_entropy"].bytes_accessed == (6 + 8) * t * v


def test_rotary_kernels_on_q_and_k_of_rope_models_only():
    llama, gpt = load_model("llama-2-70b"), load_model("gpt3-175b")
    b, s = 2, 1024
    block = layer_costs(llama, b, s, "bf16")[1]
    names = [op.name for op in block.forward]
    assert names.index("rotary") == names.index("qkv_proj") + 1
    rope = block.forward[names.index("rotary")]
    # Q (64 heads) and K (8 kv heads) of head dim 128: 3 FLOPs per element; read + write
    # at 2 bytes plus the cos/sin tables (s x head_dim each)
    elements = b * s * (llama.hidden + 8 * 128)
    assert rope.flops == 3 * elements
    assert rope.bytes_accessed == 2 * (2 * elements + 2 * s * 128)
    bwd = [op.name for op in block.backward]
    assert bwd.index("rotary.bwd") < bwd.index("qkv_proj.dgrad")
    assert "rotary" not in [op.name for op in layer_costs(gpt, b, s, "bf16")[1].forward]
