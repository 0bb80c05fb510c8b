"""Regression tests of the third hostile-input campaign (issue 42, round two;
benchmarks/hostile/campaign3.py): one per root cause, each with the input that used to end
badly (traceback or silent wrong success)."""

from __future__ import annotations

from test_cli import run_main
from test_hostile import refused

MIX = """name: m
cluster: {topology: dgx-a100-superpod, nodes: 4}
jobs:
  - {name: a, arrival: 0 s, scenario: resnet50-ddp-8gpu, gpus: 8, steps: 20}
"""


def mix(tmp_path, text: str = MIX) -> str:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return str(path)


def test_a_bad_cluster_set_names_the_mix_and_the_key(capsys, tmp_path):
    """Every refusal of a ``cluster --set`` was a KeyError traceback: the wrapper that
    names ``--set`` looked for a scenario argument ``cluster`` does not have."""
    path = mix(tmp_path)
    err = refused(capsys, "cluster", path, "-q", "--set", "scheduler=lottery")
    assert err.startswith(f"clustersim: error: {path}: --set scheduler: "), err
    err = refused(capsys, "cluster", path, "-q", "--against", "cluster.nodes=1e9")
    assert f"{path}: --set cluster.nodes: " in err, err
