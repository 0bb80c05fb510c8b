"""A torchtitan job TOML's torch.compile and Float8 settings (simulator/strategies/frameworks/
torchtitan.py, ``read_file``): each spelling torchtitan has used reaches the same
``training`` fields, a run from the TOML costs what the same scenario spelled directly
costs, and what is not modelled (another converter or recipe) is refused in one line."""

from __future__ import annotations

import pytest

from simulator.cli.configfile import scenario_with_config
from simulator.errors import ConfigError
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict
from simulator.strategies.frameworks.files import read_config

BASE = """
[parallelism]
data_parallel_shard_degree = -1
[training]
local_batch_size = 1
seq_len = 2048
"""


def _read(tmp_path, extra: str):
    path = tmp_path / "job.toml"
    path.write_text(BASE + extra)
    return read_config(path)


@pytest.mark.parametrize("extra", [
    '[model]\nconverters = ["float8"]\n[float8]\nrecipe_name = "rowwise"\n'
    '[compile]\nenable = true\ncomponents = ["model", "loss"]\n',
    '[model]\nconverters = ["quantize.linear.float8"]\n[quantize.linear.float8]\n'
    'recipe_name = "rowwise"\n[compile]\nenable = true\n',
], ids=["2025", "later"])
def test_float8_rowwise_and_compile_in_either_spelling(tmp_path, extra):
    p = _read(tmp_path, extra)
    assert p.training == {"micro_batch": 1, "seq_len": 2048, "compile": True,
                          "precision": "fp8", "fp8_recipe": "rowwise"}
    assert "model.converters" in p.used


def test_rowwise_with_gw_hp_is_the_training_recipe(tmp_path):
    p = _read(tmp_path, '[model]\nconverters = ["float8"]\n[float8]\n'
                        'recipe_name = "rowwise_with_gw_hp"\n')
    assert (p.training["precision"], p.training["fp8_recipe"]) == ("fp8", "rowwise_with_gw_hp")
    assert "float8.recipe_name" in p.used


def test_the_2024_spellings(tmp_path):
    p = _read(tmp_path, "[float8]\nenable_float8_linear = true\n"
                        "enable_fsdp_float8_all_gather = true\n")
    # no recipe_name: torchao's default, set (a scenario's own recipe would not be run)
    assert (p.training["precision"], p.training["fp8_recipe"]) == ("fp8", "tensorwise")
    assert "recipe_name not given: tensorwise" in p.summary()
    # the tensorwise recipe's FSDP all-gathers in FP8 (tests/test_torchtitan_fsdp_float8.py)
    assert p.strategy["enable_fsdp_float8_all_gather"] is True
    assert "float8.enable_fsdp_float8_all_gather" in p.used
    path = tmp_path / "old.toml"
    path.write_text(BASE.replace("seq_len = 2048", "seq_len = 2048\ncompile = true"))
    assert read_config(path).training["compile"] is True


def test_the_fp8_all_gather_is_ignored_as_torchtitan_ignores_it_under_rowwise(tmp_path):
    p = _read(tmp_path, '[model]\nconverters = ["quantize.linear.float8"]\n'
                        '[quantize.linear.float8]\nrecipe_name = "rowwise"\n'
                        'enable_fsdp_float8_all_gather = true\n'
                        'precompute_float8_dynamic_scale_for_fsdp = true\n')
    assert "enable_fsdp_float8_all_gather" not in p.strategy
    assert ("quantize.linear.float8.enable_fsdp_float8_all_gather (torchtitan ignores it "
            "under recipe_name rowwise)") in p.ignored
    assert "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp (not modelled)" \
        in p.ignored


def test_compiling_the_loss_alone_compiles_no_block(tmp_path):
    p = _read(tmp_path, '[compile]\nenable = true\ncomponents = ["loss"]\n')
    assert p.training["compile"] is False
    assert "compile.components (compiling the loss alone is not modelled)" in p.ignored


@pytest.mark.parametrize("extra, key", [
    ('[model]\nconverters = ["mx"]\n', "model.converters"),
    ('[model]\nconverters = ["float8"]\n[float8]\nrecipe_name = "blockwise"\n',
     "float8.recipe_name"),
    ('[compile]\nenable = "yes"\n', "compile.enable"),
])
def test_what_is_not_modelled_is_refused_in_one_line(tmp_path, extra, key):
    with pytest.raises(ConfigError) as info:
        _read(tmp_path, extra)
    assert info.value.field == key and "\n" not in str(info.value)


@pytest.mark.parametrize("recipe", ["rowwise", "tensorwise"])
def test_a_run_from_the_toml_costs_the_scenario_spelled_directly(tmp_path, recipe):
    """The TOML (FSDP over every GPU, local batch 1 of 2,048 tokens, no
    [activation_checkpoint]: torchtitan's default, selective every 2nd block, float8
    rowwise, or tensorwise with FSDP's FP8 all-gather, compiled) and the same job written
    out as a scenario cost the same step."""
    path = tmp_path / "job.toml"
    table = (f'recipe_name = "{recipe}"' if recipe == "rowwise"
             else "enable_fsdp_float8_all_gather = true")
    path.write_text(BASE + f'[model]\nconverters = ["float8"]\n[float8]\n{table}\n'
                    '[compile]\nenable = true\n')
    sets = ["cluster.topology=dgx-h100", "simulation.variability=none", "model=llama-3-8b",
            "training.global_batch=null"]
    toml = scenario_with_config("quickstart", read_config(path), sets)
    direct = {"name": "direct", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100"},
              "simulation": {"variability": "none"},
              "training": {"micro_batch": 1, "seq_len": 2048, "grad_accum": 1,
                           "precision": "fp8", "fp8_recipe": recipe, "compile": True},
              "strategy": {"name": "torchtitan",
                           "parallelism": {"data_parallel_shard_degree": -1},
                           "activation_checkpoint": {},
                           "enable_fsdp_float8_all_gather": recipe == "tensorwise"}}
    direct = scenario_from_dict(direct)
    assert (toml.training.precision, toml.training.fp8_recipe, toml.training.compile) == \
        ("fp8", recipe, True)
    assert toml.strategy.get("enable_fsdp_float8_all_gather", False) == (recipe == "tensorwise")
    a = run_setup(build_setup(toml)).metrics.iteration_time_s
    b = run_setup(build_setup(direct)).metrics.iteration_time_s
    assert a == b


def test_a_gpu_without_fp8_names_the_toml_key_that_asked_for_it(tmp_path):
    """The quickstart's A100 has no FP8 tensor cores: the refusal names the TOML and its
    float8 converter, not the scenario's training.precision; --set precision wins."""
    path = tmp_path / "job.toml"
    path.write_text(BASE + '[model]\nconverters = ["float8"]\n')
    with pytest.raises(ConfigError) as info:
        scenario_with_config("quickstart", read_config(path), [])
    assert (info.value.source, info.value.field) == (str(path), "model.converters")
    scn = scenario_with_config("quickstart", read_config(path), ["training.precision=bf16"])
    assert scn.training.precision == "bf16"
