"""Regression tests of the third hostile-input campaign (issue 42, round two;
benchmarks/hostile/campaign3.py): one per root cause, each with the input that used to end
badly (traceback or silent wrong success)."""

from __future__ import annotations

from campaign_table import check_campaign_table
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
    # an --against value is named as the option the user gave it with
    err = refused(capsys, "cluster", path, "-q", "--against", "cluster.nodes=1e9")
    assert f"{path}: --against cluster.nodes: " in err, err
    err = refused(capsys, "cluster", path, "-q", "--set", "seed=3", "--against",
                  "scheduler=lottery")
    assert f"{path}: --against scheduler: " in err, err


def test_a_jobs_cluster_key_is_refused_not_dropped(capsys, tmp_path):
    """A job's ``set: {cluster.gpus: 16}`` ran on the job's 8 GPUs without a word (the
    mix's cluster replaces the scenario's whole cluster section)."""
    path = mix(tmp_path, MIX.replace("steps: 20}", "steps: 20, set: {cluster.gpus: 16}}"))
    err = refused(capsys, "cluster", path, "-q")
    assert f"{path}: jobs[0].set.cluster.gpus: " in err and "no cluster key" in err, err


def test_a_generated_mix_whose_min_gpus_cannot_be_met(capsys, tmp_path):
    """``min_gpus: 1000`` on 32 GPUs, or above ``max_gpus``, drew jobs held at the cap and
    ran (exit 0) as if it had been honoured."""
    text = ("name: g\ncluster: {topology: dgx-a100-superpod, nodes: 4}\n"
            "generate: {trace: acme, cluster: Seren, jobs: 5, scenarios: {quickstart: 1}, "
            "MORE}\n")
    for more, cap in (("min_gpus: 1000", 32), ("min_gpus: 16, max_gpus: 8", 8)):
        path = mix(tmp_path, text.replace("MORE", more))
        err = refused(capsys, "cluster", path, "-q")
        assert f"{path}: generate.min_gpus: " in err and f"({cap}: " in err, err


def test_capacity_refuses_a_model_that_does_not_load(capsys):
    """``capacity quickstart --set model=nope`` searched the llama ladder (exit 0): the
    scenario's model, read only for its family, fell back to llama on any error."""
    for extra in ((), ("--family", "gpt")):
        err = refused(capsys, "capacity", "quickstart", "-q", "--set", "model=nope", *extra)
        assert "--set model: unknown model 'nope'" in err, err


STUDY = ("name: s\ncommand: run\nbase: {scenario: resnet50-ddp-1gpu}\n"
         "axes:\n  grid: {simulation.seed: [0]}\n"
         "plots:\n  - {kind: line, x: simulation.seed, y: iteration_time_s, file: FILE}\n")


def test_a_plot_file_no_file_system_takes(capsys, tmp_path):
    """A plot ``file`` of 300 characters or with a NUL byte was an OSError / ValueError
    traceback; an empty one was silently replaced by a made-up name."""
    for name, words in (('"' + "x" * 300 + '"', "a name of 300 bytes is longer than"),
                        ('"nul\\0"', "holds a NUL byte"),
                        ('""', "must name a file in the output folder")):
        path = tmp_path / "st.yaml"
        path.write_text(STUDY.replace("FILE", name))
        err = refused(capsys, "study", str(path), "--out", str(tmp_path / "out"), "-q")
        assert f"{path}: plots[0].file: {words}" in err, err


def test_a_reliability_job_shorter_than_one_step(capsys):
    """``reliability.job.duration=1e-30 s`` reported an ETTR of 1.0000 for a job of no
    step (exit 0); the checkpoint interval already had this check."""
    err = refused(capsys, "reliability", "-q", "--workers", "1", "--trials", "2",
                  "--set", "reliability.job.duration=1e-30 s")
    assert "--set reliability.job.duration: 1e-30 s is shorter than one training step" in err


def test_a_jobs_checkpoint_interval_shorter_than_its_step(capsys, tmp_path):
    """A job checkpointing every nanosecond (1 h each) never ended and the run said
    ``1 done of 2`` with exit 0; reliability refuses such an interval."""
    path = mix(tmp_path, MIX.replace(
        "steps: 20}", "steps: 20, checkpoint: {interval: 1 ns, save: 1 h, restore: 1 s}}"))
    err = refused(capsys, "cluster", path, "-q")
    assert f"{path}: checkpoint.interval: 1e-09 s is shorter than one of job a's steps" in err


def test_the_campaign_table_in_docs_is_its_results_file():
    """docs/inputs.md's table of the third campaign is counted from the committed
    benchmarks/hostile/campaign3_results.csv (the script's own output)."""
    check_campaign_table("campaign3_results.csv", "## The third campaign", 1000)
