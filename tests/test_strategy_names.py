"""Strategy names (simulator/choices.py): one table, every spelling accepted by both
``clustersim compare`` and ``clustersim capacity``, each printing its own name."""

from __future__ import annotations

import pytest

from simulator.capacity.probe import parse_strategy_specs
from simulator.choices import (DEFAULT_CAPACITY_STRATEGIES, DEFAULT_COMPARE_STRATEGIES,
                               FRAMEWORK_STRATEGIES, NAMED_STRATEGIES, framework_of,
                               strategy_named)
from simulator.cli import main
from simulator.compare.options import parse_strategies
from simulator.errors import ConfigError
from simulator.strategies import SHARDINGS, STRATEGIES

# quickstart on 4 GPUs with a small model: one replay per strategy in well under a second
SMALL = ["model=gpt2-small", "training.seq_len=1024", "training.micro_batch=1",
         "cluster.gpus=4"]
SETS = [arg for s in SMALL for arg in ("--set", s)]


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return (0 if exc.value.code is None else exc.value.code), out, err


# ------------------------------------------------------------------------------ table
def test_table_names_every_registered_strategy_and_sharding():
    named = {**NAMED_STRATEGIES, **FRAMEWORK_STRATEGIES}       # the framework ones too
    assert {n.strategy for n in named.values()} == set(STRATEGIES)
    assert [n.sharding for n in NAMED_STRATEGIES.values() if n.sharding] == list(SHARDINGS)
    assert DEFAULT_COMPARE_STRATEGIES == tuple(NAMED_STRATEGIES)
    assert DEFAULT_CAPACITY_STRATEGIES == ("ddp", "fsdp:FULL_SHARD", "fsdp:SHARD_GRAD_OP",
                                           "fsdp:HYBRID_SHARD")
    assert framework_of("tf_ps") == "tensorflow" and framework_of("fsdp") == "pytorch"
    assert framework_of("no_such") is None


@pytest.mark.parametrize("key", sorted(NAMED_STRATEGIES))
def test_every_spelling_names_the_same_strategy(key):
    n = NAMED_STRATEGIES[key]
    spellings = [key, key.upper(), key.replace("-", "_"), n.registry_name,
                 n.registry_name.lower(), n.registry_name.replace(":", " : "), f" {key} "]
    assert {strategy_named(s) for s in spellings} == {n}


def test_bare_fsdp_is_full_shard_and_unknown_names_nothing():
    assert strategy_named("fsdp") == strategy_named("fsdp:") == NAMED_STRATEGIES["fsdp-full"]
    for text in ("zero3", "fsdp-ful", "fsdp:FOO", "ddp:FULL_SHARD", ""):
        assert strategy_named(text) is None


# ------------------------------------------------------------------ both vocabularies
MIXED = "fsdp:SHARD_GRAD_OP, tf-mirrored,ddp,fsdp_full,fsdp-grad-op"


def test_compare_reads_capacity_spellings_and_prints_its_keys():
    assert [n.key for n in parse_strategies(MIXED)] == \
        ["fsdp-grad-op", "tf-mirrored", "ddp", "fsdp-full"]


def test_capacity_reads_compare_spellings_and_prints_registry_names():
    specs = parse_strategy_specs(MIXED)
    assert [s.label for s in specs] == ["fsdp:SHARD_GRAD_OP", "tf_mirrored", "ddp",
                                        "fsdp:FULL_SHARD"]
    assert [s.text for s in specs] == ["fsdp:SHARD_GRAD_OP", "tf-mirrored", "ddp",
                                       "fsdp_full"]   # as written, for error messages


@pytest.mark.parametrize("text, message", [
    ("zero3", "unknown strategy 'zero3' in 'zero3'; valid: " + ", ".join(STRATEGIES)),
    ("fsdp:FOO", "unknown FSDP sharding 'FOO' in 'fsdp:FOO'; valid: " + ", ".join(SHARDINGS)),
    ("ddp:FULL_SHARD", "ddp takes no sharding mode, got 'ddp:FULL_SHARD'; use ddp or "
                       "fsdp:FULL_SHARD"),
    ("tf_ps:NO_SHARD", "tf_ps takes no sharding mode"),
    ("ddp,,fsdp", "empty strategy in 'ddp,,fsdp'; write e.g. ddp,fsdp:FULL_SHARD"),
])
def test_capacity_errors_name_the_option(text, message):
    with pytest.raises(ConfigError) as exc:
        parse_strategy_specs(text)
    assert exc.value.source == "--strategies" and message in exc.value.reason


# ------------------------------------------------------------------------------- CLI
def test_compare_cli_output_is_the_same_for_either_spelling(capsys):
    runs = [run_main(capsys, "compare", *SETS, "--strategies", text, "--no-capacity",
                     "--no-scaling", "--price-per-gpu-hour", "2", "--format", "csv", "-q")
            for text in ("fsdp-grad-op,ddp", "fsdp:SHARD_GRAD_OP,DDP")]
    assert runs[0][0] == 0, runs[0][2]
    assert runs[0] == runs[1]
    assert [line.split(",")[0] for line in runs[0][1].splitlines()[1:]] == \
        ["fsdp-grad-op", "ddp"]


def test_capacity_cli_output_is_the_same_for_either_spelling(capsys):
    fast = ["--set", "training.micro_batch=1", "--set", "training.seq_len=2048"]
    runs = [run_main(capsys, "capacity", *fast, "--strategies", text)
            for text in ("fsdp:SHARD_GRAD_OP", "fsdp-grad-op")]
    assert runs[0][0] == 0, runs[0][2]
    assert runs[0] == runs[1]
    assert any(line.startswith("fsdp:SHARD_GRAD_OP ") for line in runs[0][1].splitlines())


@pytest.mark.parametrize("command, valid", [
    ("compare", "fsdp-full, fsdp-grad-op"), ("capacity", "ddp, fsdp, tf_mirrored")])
def test_unknown_name_is_one_line_naming_the_option(capsys, command, valid):
    code, out, err = run_main(capsys, command, "--strategies", "ddp,zero3")
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("clustersim: error: --strategies: unknown strategy 'zero3'")
    assert f"valid: {valid}" in err
