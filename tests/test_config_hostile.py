"""``--config`` refusals name the config file and its own key (issue 42), and a config
with nothing clustersim can use is refused instead of running the scenario unchanged."""

from __future__ import annotations

import pytest

from test_cli import run_main
from test_parallel_cfg import write


@pytest.mark.parametrize("name, text, key", [
    ("ds.json", '{"pipeline": {"stages": 33}}', "pipeline.stages"),
    ("ds.json", '{"tensor_parallel": {"autotp_size": 3}}', "tensor_parallel.autotp_size"),
    ("tt.toml", "[parallelism]\ntensor_parallel_degree = 3\n", "parallelism"),
    # Megatron-LM asserts TP communication overlap needs sequence parallelism
    ("m.args", "--tensor-model-parallel-size 2\n--tp-comm-overlap\n", "--tp-comm-overlap"),
])
def test_a_plan_that_does_not_fit_the_gpus_is_named_in_the_config(capsys, tmp_path, name,
                                                                  text, key):
    path = write(tmp_path, name, text)
    code, out, err = run_main(capsys, "run", "quickstart", "--config", str(path))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"clustersim: error: {path}: {key}"), err
    assert "quickstart.yaml" not in err


@pytest.mark.parametrize("name, text, fmt", [
    ("ds.args", '{"zero_optimization": {"stage": 3}}', None),          # JSON read as Megatron
    ("slashes.args", "\\\n\\\n\\\n", None),
    ("ds.json", '{"steps_per_print": 10, "optimizer": {"type": "Adam"}}', None),
    ("auto.json", '{"train_micro_batch_size_per_gpu": "auto"}', None),
    ("m.json", '{"zero_optimization": {"stage": 3}}', "megatron"),
])
def test_a_config_with_nothing_usable_is_refused(capsys, tmp_path, name, text, fmt):
    path = write(tmp_path, name, text)
    extra = ["--config-format", fmt] if fmt else []
    code, out, err = run_main(capsys, "run", "quickstart", "--config", str(path), *extra)
    assert code == 2 and err.count("\n") == 1, err
    assert str(path) in err and "nothing" in err


def test_an_ignored_key_is_shown_short(capsys, tmp_path):
    """A file read as the wrong format: its text is one ignored 'key', shown cut."""
    path = write(tmp_path, "big.args", "{" + ", ".join(f'"k{i}": [1, 2, 3]' for i in range(400))
                 + "}\n--micro-batch-size 1\n")
    code, out, err = run_main(capsys, "run", "quickstart", "--config", str(path),
                              "--set", "training.seq_len=512")
    assert code == 0, err
    assert max(len(line) for line in err.splitlines()) < 600


@pytest.mark.parametrize("name, text, key", [
    ("tt.toml", "[training]\nseq_len = " + "1" + "0" * 50 + "\n", "training.seq_len"),
    ("ds.json", '{"train_micro_batch_size_per_gpu": ' + "9" * 30 + "}",
     "train_micro_batch_size_per_gpu"),
    ("m.args", "--seq-length " + "9" * 30 + "\n", "--seq-length"),
])
def test_a_training_value_out_of_range_is_named_in_the_config(capsys, tmp_path, name, text,
                                                              key):
    path = write(tmp_path, name, text)
    code, out, err = run_main(capsys, "run", "quickstart", "--config", str(path))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"clustersim: error: {path}: {key}: "), err
