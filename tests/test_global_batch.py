"""Fair comparisons hold the samples per step: ``training.global_batch`` sets them for any
strategy (its micro-batches per step follow from the strategy's data-parallel ranks, as
Megatron derives them from ``--global-batch-size``), and ``compare`` runs every strategy at
the scenario's own global batch (a strategy that cannot reach it says why in its row)."""

from __future__ import annotations

import copy

import pytest

from simulator.compare.options import parse_strategies
from simulator.compare.runner import compare
from simulator.errors import ConfigError
from simulator.pipeline import build_setup
from simulator.scenario import load_scenario, scenario_from_dict

BASE = {"name": "gb", "model": "gpt3-1.3b",
        "cluster": {"topology": "dgx-a100-superpod", "nodes": 4},      # 32 GPUs
        "training": {"seq_len": 1024, "micro_batch": 2, "global_batch": 128}}


def _setup(strategy: dict, **training):
    data = copy.deepcopy(BASE)
    data["strategy"] = strategy
    data["training"].update(training)
    return build_setup(scenario_from_dict(data), extrapolate_steps=False)


@pytest.mark.parametrize("strategy, ranks", [
    ({"name": "fsdp"}, 32), ({"name": "ddp"}, 32), ({"name": "horovod"}, 32),
    ({"name": "megatron"}, 32),
    ({"name": "megatron", "pipeline_model_parallel_size": 4}, 8),
    ({"name": "megatron", "tensor_model_parallel_size": 8}, 4),
    ({"name": "megatron", "tensor_model_parallel_size": 2,
      "pipeline_model_parallel_size": 2}, 8),
])
def test_a_global_batch_is_kept_whatever_the_strategy(strategy, ranks):
    setup = _setup(strategy)
    # 128 samples = micro-batch 2 x grad_accum x the strategy's data-parallel ranks
    assert setup.trace.meta["global_batch"] == 128
    assert setup.scenario.training.grad_accum == 128 // (2 * ranks)


def test_a_global_batch_that_is_not_whole_micro_steps_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"not a whole number of micro-steps of 64 "
                                          r"\(micro-batch 2 on 32 data-parallel ranks") as e:
        _setup({"name": "fsdp"}, global_batch=96)
    assert e.value.field == "training.global_batch"


def test_a_grad_accum_beside_it_must_agree():
    assert _setup({"name": "fsdp"}, grad_accum=2).scenario.training.grad_accum == 2
    with pytest.raises(ConfigError, match="training.grad_accum says 3: set one") as e:
        _setup({"name": "fsdp"}, grad_accum=3)
    assert e.value.field == "training.global_batch"


def test_compare_runs_every_strategy_at_the_scenarios_own_global_batch():
    scn = load_scenario("quickstart")          # 8 GPUs, micro-batch 2, FSDP: 16 samples
    picks = parse_strategies("fsdp-full,ddp,horovod,megatron:pp4,megatron:tp8,"
                             "megatron:tp4pp4")
    cmp = compare(scn, picks, scaling=False, capacity=False)
    assert cmp.settings["global_batch"] == 16
    by = {r.alias.key: r for r in cmp.rows}
    for key in ("fsdp-full", "ddp", "horovod", "megatron:pp4", "megatron:tp8"):
        assert by[key].global_batch == 16, key
    # TP4 x PP4 needs 16 GPUs: the row says why, it does not run at another batch
    assert by["megatron:tp4pp4"].status == "n/a"
