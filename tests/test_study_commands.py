"""The commands behind a study: rows have exactly the declared columns, and the numbers are
those of the command's own public function for the same scenario."""

import pytest
from study_helpers import TINY_SET, write_study

from simulator.errors import ConfigError
from simulator.scenario import scenario_from_dict
from simulator.study import load_study, run_study
from simulator.study.commands import BASE_COLUMNS, COMMANDS


def _table(tmp_path, **fields):
    study = load_study(write_study(tmp_path, **fields))
    return study, run_study(study, tmp_path / "out", workers=1, progress=False).table


def _columns_are_declared(study, table):
    declared = {*BASE_COLUMNS, *study.spec.axis_keys(), *COMMANDS[study.spec.command].columns}
    assert set(table.columns) == declared


def _scenario(point):
    data = dict(point["scenario"])
    return scenario_from_dict(data)


def test_run_rows_have_the_declared_columns(tmp_path):
    study, table = _table(tmp_path, axes={"grid": {"cluster.gpus": [2]}})
    _columns_are_declared(study, table)


def test_compare_rows_are_compare_per_strategy(tmp_path):
    from simulator.compare.options import parse_strategies
    from simulator.compare.runner import compare
    strategies = ["fsdp-full", "ddp", "tf-mirrored"]
    study, table = _table(tmp_path, command="compare", options={"strategies": strategies},
                          axes={"grid": {"cluster.gpus": [2, 4]}})
    _columns_are_declared(study, table)
    assert list(table["strategy"]) == strategies * 2
    point = study.points[1]
    direct = compare(_scenario(point), parse_strategies(strategies), scaling=False,
                     capacity=False)
    rows = table[table["point"] == point["id"]]
    assert list(rows["samples_per_s"]) == [r.metrics.samples_per_s for r in direct.rows]
    assert list(rows["gpus"]) == [4, 4, 4]
    # How far to trust it: the sentence `clustersim compare` prints for the same rows, in
    # every row of the point and in the study's report (the study answered without it).
    from simulator.compare.trust import envelopes
    from simulator.validation.envelope import trust_sentence
    sentence = trust_sentence(envelopes(direct, point["scenario"]["model"]).values(),
                              "the runs: docs/accuracy.md")
    # TensorFlow's transformer runs (TF2 BERT-large) speak for a TensorFlow Llama, not its
    # Mask R-CNN runs (tests/test_envelope.py)
    assert "TensorFlow" in sentence and "too far off to rank" not in sentence
    assert set(rows["trust"]) == {sentence}
    report = (tmp_path / "out" / "report.md").read_text()
    asked = report.index("## How far to trust these answers?")
    listed = report[asked:].split("\n\n")[1].splitlines()
    assert all(line.startswith("- At ") and " GPUs: How far to trust it: " in line
               for line in listed)
    assert ("- At 2 and 4 GPUs: " + sentence) in listed or len(listed) == 2
    assert "How far to trust it" in (tmp_path / "out" / "report.html").read_text()
    # why the frameworks' compute differs: each strategy's kernel stack, as compare says it,
    # in every row and, grouped by stack, in the report and the page
    from simulator.study.report import KERNELS_ASK
    assert list(rows["kernels"]) == [r.kernels for r in direct.rows]
    stacks = {r.kernels for r in direct.rows}
    # PyTorch's eager stack (fsdp; ddp adds autocast's casts) and TensorFlow's kernels
    assert len(stacks) == 3 and any("not the eager PyTorch stack" in k for k in stacks)
    asked = report.index(f"## {KERNELS_ASK}")
    listed = [line for line in report[asked:].split("\n## ", 1)[0].splitlines()
              if line.startswith("- ")]
    assert sorted(listed) == sorted(
        f"- {', '.join(r.alias.key for r in direct.rows if r.kernels == k)}: {k}."
        for k in stacks)
    import html
    assert html.escape(KERNELS_ASK) in (tmp_path / "out" / "report.html").read_text()


def test_reliability_rows_are_run_study_for_the_points_seed(tmp_path):
    from simulator.reliability.study import run_study as reliability_study
    study, table = _table(
        tmp_path, command="reliability", options={"trials": 4}, seed=3,
        base={"scenario": "quickstart", "set": {
            **TINY_SET, "reliability": {"job": {"duration": "2 d"}, "failures": {
                "gpu": {"rate": "50 per 1000 gpu-days"}}}}},
        axes={"grid": {"reliability.checkpoint.interval": ["10 min", "2 h"]}})
    _columns_are_declared(study, table)
    point = study.points[1]
    direct = reliability_study(_scenario(point), "x", 4, seed=3, workers=1, with_search=False)
    row = table[table["point"] == point["id"]].iloc[0]
    assert row["ettr_mean"] == direct.summary.ettr["mean"]
    assert row["checkpoint_interval_s"] == 2 * 3600
    assert table["ettr_mean"].nunique() == 2


def test_reliability_columns_cover_every_loss_category():
    from simulator.reliability.results import LOSSES
    assert {f"lost_{c}_s" for c in LOSSES} <= set(COMMANDS["reliability"].columns)


@pytest.mark.parametrize("command, options, field", [
    ("compare", {"strategies": ["fsdp-full", "zero-9"]}, "options.strategies"),
    ("compare", {"strategies": []}, "options.strategies"),
    ("reliability", {"trials": 0}, "options.trials"),
    ("reliability", {"trails": 5}, "options.trails")])
def test_bad_command_options(tmp_path, command, options, field):
    path = write_study(tmp_path, command=command, options=options)
    with pytest.raises(ConfigError) as info:
        load_study(path)
    assert str(info.value).startswith(f"{path}: {field}: ")


def test_compare_rows_group_by_the_gpus_the_job_holds():
    """A parameter-server row trains on fewer GPUs than the job holds: per-size answers
    group by the job's GPUs; the training ranks are kept apart."""
    from simulator.study.adapters import _compare_row
    d = {"strategy": "tf-ps", "framework": "tensorflow", "status": "ok", "reason": "",
         "metrics": {"world_size": 24, "samples_per_s": 8.7}}
    row = _compare_row(d, 32, "")
    assert row["gpus"] == 32 and row["worker_gpus"] == 24 and row["samples_per_s"] == 8.7
