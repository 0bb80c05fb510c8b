"""Variable-length sequences (training.sequence_lengths): padded-length distribution, mixed
layer costs, the shipped Wikipedia histogram, metrics and bad input."""

from __future__ import annotations

import json

import pytest

from simulator.models import layer_costs, load_model, model_flops_per_sample
from simulator.models.seqlen import (load_histogram, mean_length, mixed_layer_costs,
                                     padded_length_weights)
from test_cli import run_main

BERT = load_model("bert-large")
# the GPU's work alone: 4 short sequences of BERT-large launch kernels shorter than the
# CPU's dispatch of them, so with it the step would be the host's, binned or padded
SEQ512 = ["bert-large-ddp-8gpu", "--set", "cluster.gpus=1", "--set", "training.seq_len=512",
          "--set", "training.micro_batch=4", "--set", "training.grad_accum=1",
          "--set", "strategy.host_dispatch=none"]


def test_longest_of_n_draws_by_hand():
    # lengths 1 and 2, equally likely; two samples: the batch is 1 long only if both are 1
    assert padded_length_weights([1, 1], 2, None) == [(1, 0.25), (2, 0.75)]
    # bins of one length: each bin is padded to itself, chosen by its share
    assert padded_length_weights([1, 3], 5, 1) == [(1, 0.25), (2, 0.75)]
    # bins of 2 over lengths 1..4, counts 1,1 | 0,2: bin 1 (share 1/2) gives 1 w.p. 1/4
    assert padded_length_weights([1, 1, 0, 2], 2, 2) == [(1, 0.125), (2, 0.375), (4, 0.5)]


def test_wikipedia_histogram_is_the_published_one():
    counts = load_histogram("wikipedia-bert-512")
    assert len(counts) == 512 and sum(counts) == 16_279_552
    # Krell et al. 2021: at 512, padding is "in excess of 50%" of the tokens
    assert 1 - mean_length(counts) / 512 == pytest.approx(0.500, abs=0.001)
    w = padded_length_weights(counts, 16, 64)
    assert sum(p for _, p in w) == pytest.approx(1.0)
    full = sum(counts[448:]) / sum(counts)          # the 449..512 bin is padded to 512
    assert dict(w)[512] == pytest.approx(full, rel=1e-3)
    # binning pads far less than padding to 512, more than the real mean
    padded = sum(n * p for n, p in w)
    assert mean_length(counts) < padded < 0.6 * 512
    # without bins, 16 draws almost always include a 512 (23% of all sequences are)
    assert dict(padded_length_weights(counts, 16, None))[512] > 0.98


def test_one_length_gives_the_fixed_length_costs():
    counts = [0] * 127 + [10]
    mixed = mixed_layer_costs(BERT, 8, padded_length_weights(counts, 8, 64), "fp16", False)
    assert mixed == layer_costs(BERT, 8, 128, "fp16", False)


def test_costs_are_the_probability_weighted_mix():
    weights = [(64, 0.25), (128, 0.75)]
    mixed = mixed_layer_costs(BERT, 8, weights, "bf16", False, autocast=True)
    short = layer_costs(BERT, 8, 64, "bf16", False, autocast=True)
    long = layer_costs(BERT, 8, 128, "bf16", False, autocast=True)
    for m, s, lg in zip(mixed, short, long):
        assert m.forward_flops == pytest.approx(0.25 * s.forward_flops + 0.75 * lg.forward_flops)
        for mo, so, lo in zip(m.backward, s.backward, lg.backward):
            assert mo.name == so.name
            assert mo.bytes_accessed == pytest.approx(0.25 * so.bytes_accessed
                                                      + 0.75 * lo.bytes_accessed)
        assert m.activation_bytes == lg.activation_bytes     # the longest batch must fit


def test_metrics_count_real_tokens_not_padding(capsys):
    spec = "training.sequence_lengths={histogram: wikipedia-bert-512, bin_size: 64}"
    code, out, _ = run_main(capsys, "run", *SEQ512, "--set", spec, "--format", "json")
    assert code == 0
    binned = json.loads(out)
    code, out, _ = run_main(capsys, "run", *SEQ512, "--format", "json")
    padded = json.loads(out)
    counts = load_histogram("wikipedia-bert-512")
    assert binned["tokens_per_s"] == pytest.approx(binned["samples_per_s"] * mean_length(counts))
    assert padded["tokens_per_s"] == pytest.approx(padded["samples_per_s"] * 512)
    assert binned["samples_per_s"] > 1.4 * padded["samples_per_s"]
    assert binned["peak_memory_gib"] == pytest.approx(padded["peak_memory_gib"])
    # MFU counts the model FLOPs of the real lengths
    flops = sum(c * model_flops_per_sample(BERT, i + 1) for i, c in enumerate(counts)) / sum(counts)
    assert binned["tflops_per_gpu"] == pytest.approx(binned["samples_per_s"] * flops / 1e12)


@pytest.mark.parametrize("value, needle", [
    ("{histogram: tolstoy}", "training.sequence_lengths.histogram: unknown histogram 'tolstoy'"),
    ("{histogram: wikipedia-bert-512, bin_size: 60}", "bin_size: 60 does not divide seq_len 512"),
    ("{histogram: wikipedia-bert-512, bin_size: 0}", "training.sequence_lengths.bin_size"),
    ("{histogram: wikipedia-bert-512, bins: 64}", "bins"),
    ("{bin_size: 64}", "training.sequence_lengths.histogram"),
])
def test_bad_sequence_lengths_are_one_line(capsys, value, needle):
    code, _, err = run_main(capsys, "run", *SEQ512, "--set", f"training.sequence_lengths={value}")
    assert code == 2 and err.count("\n") == 1 and needle in err, err


def test_histogram_must_match_seq_len_and_model(capsys):
    spec = "training.sequence_lengths={histogram: wikipedia-bert-512}"
    code, _, err = run_main(capsys, "run", *SEQ512, "--set", "training.seq_len=256", "--set", spec)
    assert code == 2 and "covers lengths 1..512; training.seq_len is 256" in err
    code, _, err = run_main(capsys, "run", "resnet50-ddp-1gpu", "--set", spec)
    assert code == 2 and "resnet-50 has no sequence length" in err


def test_user_histogram_file(capsys, tmp_path):
    good = tmp_path / "lengths.yaml"
    good.write_text("counts: [" + ", ".join(["0"] * 511 + ["5"]) + "]\n")
    spec = f"training.sequence_lengths={{histogram: {good}}}"
    code, out, _ = run_main(capsys, "run", *SEQ512, "--set", spec, "--format", "json")
    code2, out2, _ = run_main(capsys, "run", *SEQ512, "--format", "json")
    assert code == code2 == 0
    assert json.loads(out)["iteration_time_s"] == json.loads(out2)["iteration_time_s"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("counts: [1, -2]\n")
    code, _, err = run_main(capsys, "run", *SEQ512, "--set",
                            f"training.sequence_lengths={{histogram: {bad}}}")
    assert code == 2 and "bad.yaml" in err and "non-negative" in err
