"""Packed sequences (training.packed_sequences): the attention of a pack is the sum of its
samples' causal pairs, priced through the same flash kernel; one sample is the unpacked
sequence; bad settings are refused in one line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simulator.errors import ConfigError
from simulator.models import layer_costs, load_model
from simulator.models.costs import params_total
from simulator.models.packing import Pack, sequence_pairs
from test_cli import run_main

LLAMA = load_model("llama-3-8b")
S = 512
# one GPU's step of a small causal decoder; the GPU's work alone (no host dispatch bound)
RUN = ["bert-large-ddp-8gpu", "--set", "model=llama-3-8b", "--set", "cluster.gpus=1",
       "--set", f"training.seq_len={S}", "--set", "training.micro_batch=1",
       "--set", "training.grad_accum=1", "--set", "strategy.host_dispatch=none",
       "--set", "training.flash_attention=true"]


def _kernel(layers, name):
    return next(op for op in (*layers[1].forward, *layers[1].backward) if op.name == name)


def test_pairs_of_a_pack_by_hand():
    pack = Pack((3, 5, 8))
    # causal: each token with itself and the ones before it in its sample, l (l + 1) / 2
    assert pack.pairs(causal=True) == 3 * 4 // 2 + 5 * 6 // 2 + 8 * 9 // 2 == 6 + 15 + 36
    # bidirectional: l^2 each
    assert pack.pairs(causal=False) == 9 + 25 + 64
    assert pack.tokens == 16
    assert sequence_pairs(16, causal=True) == 16 * 17 // 2 == 136


def test_one_sample_costs_what_the_unpacked_sequence_costs():
    unpacked = layer_costs(LLAMA, 2, S, "bf16")
    packed = layer_costs(replace(LLAMA, pack=Pack((S,))), 2, S, "bf16")
    assert packed == unpacked


def test_attention_kernel_scales_by_the_pairs_and_nothing_else_changes():
    lengths = (100, 150, 200)               # 450 tokens, 62 of padding
    whole = layer_costs(LLAMA, 2, S, "bf16", tp=2, sp=True)
    packed = layer_costs(replace(LLAMA, pack=Pack(lengths)), 2, S, "bf16", tp=2, sp=True)
    pairs = 100 * 101 // 2 + 150 * 151 // 2 + 200 * 201 // 2     # 5050 + 11325 + 20100
    assert pairs == 36475
    for name in ("attn_core", "attn_core.bwd"):
        w, p = _kernel(whole, name), _kernel(packed, name)
        assert p.flops == pytest.approx(w.flops * 36475 / (S * (S + 1) / 2))
        assert p.n == round(36475 / 450) == 81                    # keys per query
        assert w.n == round((S + 1) / 2)
        assert p.bytes_accessed == w.bytes_accessed             # Q, K, V, O of the row
    for lw, lp in zip(whole, packed):
        rest_w = [op for op in (*lw.forward, *lw.backward) if not op.name.startswith("attn_core")]
        rest_p = [op for op in (*lp.forward, *lp.backward) if not op.name.startswith("attn_core")]
        assert rest_w == rest_p
        assert lw.activation_bytes == lp.activation_bytes
    assert params_total(replace(LLAMA, pack=Pack(lengths))) == params_total(LLAMA)


def test_fp8_step_scales_the_same_kernel():
    whole = layer_costs(LLAMA, 1, S, "fp8", fp8_recipe="current")
    packed = layer_costs(replace(LLAMA, pack=Pack((256, 256))), 1, S, "fp8",
                         fp8_recipe="current")
    ratio = 2 * (256 * 257 // 2) / (S * (S + 1) / 2)
    assert _kernel(packed, "attn_core").flops == pytest.approx(
        _kernel(whole, "attn_core").flops * ratio)


def test_packed_step_is_faster_and_a_pack_of_one_is_the_same_step(capsys):
    runs = {}
    for key, extra in (("plain", []),
                       ("one", ["--set", f"training.packed_sequences={{lengths: [{S}]}}"]),
                       ("many", ["--set", "training.packed_sequences={lengths: [64, 64, 64, "
                                          "64, 64, 64, 64, 64]}"])):
        code, out, err = run_main(capsys, "run", *RUN, *extra, "--format", "json")
        assert code == 0, err
        runs[key] = json.loads(out)
    assert runs["one"]["iteration_time_s"] == runs["plain"]["iteration_time_s"]
    assert runs["many"]["iteration_time_s"] < runs["plain"]["iteration_time_s"]


@pytest.mark.parametrize("extra, needle", [
    (["training.packed_sequences={lengths: [400, 200]}"],
     "training.packed_sequences.lengths: the samples hold 600 tokens, more than seq_len 512"),
    (["training.packed_sequences={lengths: []}"], "non-empty list of positive integers"),
    (["training.packed_sequences={lengths: [0, 5]}"], "non-empty list of positive integers"),
    (["training.packed_sequences={sizes: [5]}"], "training.packed_sequences"),
    (["training.packed_sequences={lengths: [64]}", "training.flash_attention=false"],
     "packed sequences need a fused attention kernel"),
    (["training.packed_sequences={lengths: [64]}",
      "training.sequence_lengths={histogram: wikipedia-bert-512}"],
     "drop training.sequence_lengths"),
])
def test_bad_packs_are_one_line(capsys, extra, needle):
    sets = [arg for value in extra for arg in ("--set", value)]
    code, _, err = run_main(capsys, "run", *RUN, *sets)
    assert code == 2 and err.count("\n") == 1 and needle in err, err


def test_context_parallel_packs_are_refused():
    with pytest.raises(ConfigError, match="context parallelism are not modelled"):
        layer_costs(replace(LLAMA, pack=Pack((64,))), 1, S, "bf16", cp=2)


def test_non_transformers_have_nothing_to_pack(capsys):
    code, _, err = run_main(capsys, "run", "resnet50-ddp-1gpu", "--set",
                            "training.packed_sequences={lengths: [64]}")
    assert code == 2 and err.count("\n") == 1 and "no sequences to pack" in err, err


# ------------------------------------------------------------------ a packed dataset
def test_a_dataset_of_one_length_packs_as_the_explicit_pack(tmp_path):
    from simulator.models.packing import PackedDataset
    counts = (0,) * 63 + (1000,)                       # every sample 64 tokens
    dataset, explicit = PackedDataset(counts, S), Pack((64,) * 8)
    # a full row: 512 tokens in 8 samples of 64, 8 x 64 x 65 / 2 pairs
    assert dataset.pairs(causal=True) == explicit.pairs(causal=True) == 8 * 64 * 65 // 2
    assert layer_costs(replace(LLAMA, pack=dataset), 1, S, "bf16") == \
        layer_costs(replace(LLAMA, pack=explicit), 1, S, "bf16")


def test_a_packed_histogram_weights_each_sample_by_its_tokens():
    from simulator.models.packing import PackedDataset
    from simulator.models.seqlen import load_histogram
    counts = load_histogram("wikipedia-bert-512")
    bert = load_model("bert-large")                   # bidirectional: l^2 pairs a sample
    # a token lies in a sample of l tokens with probability l c_l / sum l c_l; a row of 512
    # tokens holds 512 sum c_l l^2 / sum c_l l pairs, against 512^2 unpacked
    per_token = (sum(c * (i + 1) ** 2 for i, c in enumerate(counts))
                 / sum(c * (i + 1) for i, c in enumerate(counts)))
    whole = layer_costs(bert, 1, S, "bf16")
    packed = layer_costs(replace(bert, pack=PackedDataset(tuple(counts), S)), 1, S, "bf16")
    w, p = _kernel(whole, "attn_core"), _kernel(packed, "attn_core")
    assert p.flops == pytest.approx(w.flops * S * per_token / S ** 2)
    assert p.n == round(per_token)


@pytest.mark.parametrize("value, needle", [
    ("{lengths: [64], histogram: wikipedia-bert-512}", "set one of lengths"),
    ("{}", "set one of lengths"),
    ("{histogram: wikipedia-bert-512}",
     "training.packed_sequences.histogram: the histogram has samples of up to 512 tokens, "
     "longer than seq_len 256"),
    ("{histogram: tolstoy}", "training.packed_sequences.histogram: unknown histogram"),
])
def test_bad_packed_datasets_are_one_line(capsys, value, needle):
    code, _, err = run_main(capsys, "run", *RUN, "--set", "training.seq_len=256", "--set",
                            f"training.packed_sequences={value}")
    assert code == 2 and err.count("\n") == 1 and needle in err, err


def test_plan_refuses_packed_sequences_it_cannot_estimate():
    from simulator.planner.search import search
    from simulator.scenario import scenario_from_dict
    data = {"name": "p", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100", "nodes": 1},
            "strategy": {"name": "megatron"},
            "training": {"micro_batch": 1, "seq_len": S, "precision": "bf16",
                         "packed_sequences": {"lengths": [256, 256]}}}
    with pytest.raises(ConfigError, match="training.packed_sequences"):
        search(scenario_from_dict(data), 8)


def test_megatron_plans_price_the_pack_through_the_same_kernel():
    from simulator.pipeline import build_setup, run_setup
    from simulator.scenario import scenario_from_dict

    def step(pack):
        data = {"name": "m", "model": "llama-3-8b",
                "cluster": {"topology": "dgx-h100", "gpus": 2},
                "strategy": {"name": "megatron", "tensor_model_parallel_size": 2,
                             "sequence_parallel": True},
                "training": {"micro_batch": 1, "seq_len": 4096, "grad_accum": 1,
                             "precision": "bf16", "flash_attention": True},
                "simulation": {"variability": "none"}}
        if pack:
            data["training"]["packed_sequences"] = {"lengths": pack}
        return run_setup(build_setup(scenario_from_dict(data))).metrics.iteration_time_s
    plain = step(None)             # 4,096 tokens: the attention kernel is compute-bound
    assert step([4096]) == plain
    assert step([512] * 8) < plain
