"""One setting, two spellings, one price (issue 40): Megatron-LM's argument file and the
scenario's ``megatron`` strategy read the cross-entropy fusion alike, with Megatron-LM's own
default where the file leaves the argument out (``--cross-entropy-loss-fusion`` absent: the
unfused loss; ``--cross-entropy-fusion-impl`` absent: ``native``), and Megatron-Core's
``fp8_dot_product_attention`` in a megatron strategy is ``training.fp8_attention``."""

from __future__ import annotations

import pytest

from simulator.cli.configfile import scenario_with_config
from simulator.errors import ConfigError
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict
from simulator.strategies.frameworks.files import read_config

TP2 = {"name": "megatron", "tensor_model_parallel_size": 2, "sequence_parallel": True,
       "use_distributed_optimizer": True}


def _write(tmp_path, text: str):
    path = tmp_path / "run.args"
    path.write_text(text)
    return path


def _base(tmp_path) -> str:
    """A megatron scenario file (Llama 3 8B, FP8, one DGX H100) the argument files go over."""
    import yaml
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(_scenario({"name": "megatron"})))
    return str(path)


def _step_s(scn) -> float:
    return run_setup(build_setup(scn)).metrics.iteration_time_s


def _scenario(strategy: dict, **training) -> dict:
    return {"name": "spellings", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100"},
            "strategy": strategy, "simulation": {"variability": "none"},
            "training": {"seq_len": 4096, "micro_batch": 1, "precision": "fp8",
                         "fp8_recipe": "delayed", **training}}


@pytest.mark.parametrize("flags, fusion, impl", [
    ("", False, "native"),                              # Megatron-LM's defaults
    ("--cross-entropy-loss-fusion", True, "native"),
    ("--cross-entropy-loss-fusion --cross-entropy-fusion-impl te", True, "te"),
    ("--cross-entropy-fusion-impl te", False, "te"),    # an impl without fusion: unfused
])
def test_an_argument_file_reads_the_cross_entropy_as_megatron_lm_does(tmp_path, flags,
                                                                       fusion, impl):
    pieces = read_config(_write(tmp_path, f"--tensor-model-parallel-size 2 {flags}\n"))
    assert pieces.strategy["cross_entropy_loss_fusion"] is fusion
    assert pieces.strategy["cross_entropy_fusion_impl"] == impl
    for flag in flags.split():
        if flag.startswith("--"):
            assert flag in pieces.used
    if not flags:     # the defaults it took are said
        assert "--cross-entropy-loss-fusion not given" in pieces.summary()


@pytest.mark.parametrize("flags, fields", [
    ("", {"cross_entropy_loss_fusion": False, "cross_entropy_fusion_impl": "native"}),
    ("--cross-entropy-loss-fusion --cross-entropy-fusion-impl te",
     {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}),
])
def test_the_argument_file_and_the_scenario_spelling_cost_the_same(tmp_path, flags, fields):
    pieces = read_config(_write(tmp_path, f"--tensor-model-parallel-size 2 --sequence-parallel "
                                          f"--use-distributed-optimizer {flags}\n"))
    from_file = scenario_with_config(_base(tmp_path), pieces, [])
    spelled = scenario_with_config(_base(tmp_path), read_config(_write(
        tmp_path, "--tensor-model-parallel-size 2 --sequence-parallel "
                  "--use-distributed-optimizer --cross-entropy-loss-fusion "
                  "--cross-entropy-fusion-impl te\n")),
        [f"strategy.{k}={v}" for k, v in fields.items()])
    assert _step_s(from_file) == _step_s(spelled)


def test_the_unfused_default_of_an_argument_file_makes_its_step_longer(tmp_path):
    """Megatron-LM without --cross-entropy-loss-fusion runs the vocab-parallel loss op by op
    (simulator/models/cross_entropy.py): 38 + 14 bytes a logit against TE's 4 + 4, so an
    argument file that leaves the flag out costs more than Bridge's fused default."""
    base = "--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer"
    unfused = scenario_with_config(_base(tmp_path),
                                   read_config(_write(tmp_path, base + "\n")), [])
    fused = scenario_with_config(_base(tmp_path), read_config(_write(
        tmp_path, base + " --cross-entropy-loss-fusion --cross-entropy-fusion-impl te\n")), [])
    assert _step_s(unfused) > _step_s(fused)


def test_fp8_dot_product_attention_is_training_fp8_attention():
    spelled = scenario_from_dict(_scenario({**TP2, "fp8_dot_product_attention": True}), "x")
    plain = scenario_from_dict(_scenario(TP2, fp8_attention=True), "x")
    assert spelled.training.fp8_attention is True
    assert "fp8_dot_product_attention" not in spelled.strategy
    assert spelled.strategy == plain.strategy
    assert _step_s(spelled) == _step_s(plain)
    off = scenario_from_dict(_scenario({**TP2, "fp8_dot_product_attention": False}), "x")
    assert off.training.fp8_attention is False


def test_the_two_spellings_disagreeing_are_refused_in_one_line():
    data = _scenario({**TP2, "fp8_dot_product_attention": True}, fp8_attention=False)
    with pytest.raises(ConfigError, match="one setting, two spellings") as info:
        scenario_from_dict(data, "run.yaml")
    assert info.value.field == "strategy.fp8_dot_product_attention"
    assert info.value.source == "run.yaml" and "\n" not in str(info.value)


def test_fp8_dot_product_attention_takes_training_fp8_attentions_checks():
    data = _scenario({**TP2, "fp8_dot_product_attention": True}, precision="bf16")
    with pytest.raises(ConfigError, match="fp8_attention needs precision: fp8"):
        scenario_from_dict(data, "x")


def test_another_strategy_does_not_read_megatrons_spelling():
    with pytest.raises(ConfigError, match="fp8_dot_product_attention"):
        build_setup(scenario_from_dict(_scenario({"name": "fsdp",
                                                  "fp8_dot_product_attention": True}), "x"))
