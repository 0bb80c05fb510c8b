"""Study files: axes expanded into points, point identity, and every bad input refused with
one line naming the file and the field, before anything runs."""

import pytest
from study_helpers import TINY_SET, write_study

from simulator.cli import main
from simulator.errors import ConfigError
from simulator.study import load_study
from simulator.study.points import axis_values
from simulator.study.runner import resolve_study


def _values(points, key):
    return [p["params"][key] for p in points]


def test_grid_is_the_cartesian_product_in_axis_order(tmp_path):
    path = write_study(tmp_path, axes={"grid": {"cluster.gpus": [2, 4, 8],
                                                "strategy.sharding": ["FULL_SHARD", "NO_SHARD"]}})
    points = load_study(path).points
    assert [(p["params"]["cluster.gpus"], p["params"]["strategy.sharding"]) for p in points] == [
        (g, s) for g in (2, 4, 8) for s in ("FULL_SHARD", "NO_SHARD")]
    # the values land in each point's scenario, next to the base scenario's own keys
    for p in points:
        assert p["scenario"]["cluster"]["gpus"] == p["params"]["cluster.gpus"]
        assert p["scenario"]["strategy"]["sharding"] == p["params"]["strategy.sharding"]
        assert p["scenario"]["strategy"]["name"] == "fsdp"
        assert p["scenario"]["model"] == TINY_SET["model"]
    assert [p["index"] for p in points] == list(range(6))


def test_zip_varies_lists_together_and_multiplies_the_grid(tmp_path):
    path = write_study(tmp_path, axes={
        "grid": {"strategy.sharding": ["FULL_SHARD", "NO_SHARD"]},
        "zip": {"cluster.gpus": [2, 4, 8], "training.micro_batch": [4, 2, 1]}})
    points = load_study(path).points
    assert len(points) == 2 * 3
    for p in points:
        assert p["params"]["cluster.gpus"] * p["params"]["training.micro_batch"] == 8
        assert p["scenario"]["training"]["micro_batch"] == p["params"]["training.micro_batch"]


def test_topology_keys_change_the_topology_not_the_scenario(tmp_path):
    path = write_study(tmp_path, base={"scenario": "quickstart", "set": {
        **TINY_SET, "cluster.topology": "dgx-a100-superpod", "cluster.nodes": 2}},
        axes={"grid": {"topology.params.oversubscription": [1, 2]}})
    points = load_study(path).points
    assert [p["topology"]["params"]["oversubscription"] for p in points] == [1, 2]
    assert all("topology" not in p["scenario"] for p in points)
    assert points[0]["id"] != points[1]["id"]


def test_point_identity_ignores_order_and_tracks_what_is_computed(tmp_path):
    a = load_study(write_study(tmp_path, "a", axes={"grid": {"cluster.gpus": [2, 4, 8]}}))
    b = load_study(write_study(tmp_path, "b", axes={"grid": {"cluster.gpus": [8, 2, 4]}}))
    assert {p["id"]: p["params"]["cluster.gpus"] for p in a.points} == \
        {p["id"]: p["params"]["cluster.gpus"] for p in b.points}
    c = load_study(write_study(tmp_path, "c", seed=7, axes={"grid": {"cluster.gpus": [2]}}))
    assert c.points[0]["id"] not in {p["id"] for p in a.points}
    assert c.points[0]["scenario"]["simulation"]["seed"] == 7


def test_axis_values_of_a_zip_only_study():
    from simulator.study.spec import Study
    study = Study.model_validate({"name": "z", "axes": {"zip": {"a.b": [1, 2], "c": [3, 4]}}})
    assert axis_values(study) == [{"a.b": 1, "c": 3}, {"a.b": 2, "c": 4}]


BAD = [
    ({"axes": {"grid": {"cluster.nodez": [1]}}}, "axes.grid.cluster.nodez", "unknown key"),
    ({"axes": {"grid": {"bogus.key": [1]}}}, "axes.grid.bogus.key", "unknown key"),
    ({"axes": {"grid": {"cluster.gpus": []}}}, "axes.grid.cluster.gpus", "empty list"),
    ({"axes": {}}, "axes", "no axis"),
    ({"axes": {"grid": {"cluster.gpus": [2, "two"]}}}, "axes.grid.cluster.gpus", "'two'"),
    ({"axes": {"zip": {"cluster.gpus": [2, 4], "training.micro_batch": [1]}}}, "axes.zip",
     "equal lengths"),
    ({"axes": {"grid": {"cluster.gpus": [2]}}, "colour": "red"}, "colour", "unknown key"),
    ({"command": "teleport"}, "command", "unknown command"),
    ({"plots": [{"kind": "line", "x": "gpus", "y": "speed"}]}, "plots[0].y", "'speed'"),
    ({"plots": [{"kind": "pie", "x": "gpus"}]}, "plots[0]", "pie"),
    ({"questions": [{"kind": "effect", "ask": "?", "axis": "cluster.nodes",
                     "metric": "mfu"}]}, "questions[0].axis", "unknown axis"),
    ({"axes": {"grid": {"cluster.gpus": [2, 16]}}}, "axes.grid.cluster.gpus", "16"),
    ({"axes": {"grid": {"model": ["gpt2-small", "gpt-9"]}}}, "axes.grid.model", "gpt-9"),
    ({"axes": {"grid": {"cluster.links.ib-ndr.bw": ["100 Gb/s"]}}},
     "axes.grid.cluster.links.ib-ndr.bw", "ib-ndr"),
    ({"base": {"scenario": "quickstart", "set": {**TINY_SET, "cluster.nodes": 2,
                                                 "cluster.topology": "dgx-a100-superpod"}},
      "axes": {"grid": {"cluster.links.ib-hdr.bw": ["200 Gb/s", "fast"]}}},
     "axes.grid.cluster.links.ib-hdr.bw", "'fast'"),
    ({"axes": {"grid": {"topology.params.bogus": [1]}}}, "axes.grid.topology.params.bogus",
     "bogus"),
    ({"axes": {"grid": {"strategy.sharding": ["FULL_SHARD", "QUARTER_SHARD"]}}},
     "axes.grid.strategy.sharding", "QUARTER_SHARD"),
    ({"axes": {"grid": {"cluster.gpus": [2, 2]}}}, "axes", "same scenario"),
    ({"axes": {"grid": {"cluster": [{}], "cluster.gpus": [2]}}}, "axes.grid.cluster",
     "same key"),
    ({"options": {"trials": 3}}, "options", "no options"),
    ({"base": {"scenario": "quickstart", "set": {"training.flavour": 1}}},
     "base.set.training.flavour", "unknown key"),
    ({"base": {"scenario": "no-such-scenario"}}, "base.scenario", "no-such-scenario"),
]


@pytest.mark.parametrize("fields, field, words", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_study_is_one_error_naming_file_and_field(tmp_path, fields, field, words):
    path = write_study(tmp_path, **fields)
    with pytest.raises(ConfigError) as info:
        load_study(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {field}: "), message
    assert words in message
    assert "\n" not in message


def test_cli_bad_study_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys):
    path = write_study(tmp_path, axes={"grid": {"cluster.gpus": [2, "two"]}})
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        main(["study", str(path), "--out", str(out)])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("clustersim: error: ") and "\n" not in err
    assert str(path) in err and "axes.grid.cluster.gpus" in err
    assert not out.exists()


def test_shipped_studies_load(tmp_path):
    from simulator.study.spec import TOPOLOGY_PREFIX
    study = load_study("scaling-linearity")
    gpus = [p["params"]["cluster.nodes"] * 8 for p in study.points]
    assert len(gpus) >= 8 and gpus[0] == 8 and gpus[-1] >= 1024
    assert resolve_study("switch-bandwidth").is_file()
    assert TOPOLOGY_PREFIX == "topology."


def test_zipped_axes_name_a_point_by_their_first_distinct_key():
    """Zipped keys vary together: a sentence names a point by the first of them whose values
    tell the points apart (all of them when none does), every grid key besides."""
    from simulator.study.spec import Axes, Study
    axes = Axes(grid={"cluster.nodes": [1, 2]},
                zip={"training.micro_batch": [1, 1, 2], "training.grad_accum": [8, 4, 2],
                     "training.seq_len": [512, 1024, 2048]})
    study = Study(name="s", command="run", base={"scenario": "quickstart"}, axes=axes)
    assert study.naming_keys() == ["cluster.nodes", "training.grad_accum"]
    same = Axes(zip={"training.micro_batch": [1, 1], "training.seq_len": [512, 512]})
    study = Study(name="s", command="run", base={"scenario": "quickstart"}, axes=same)
    assert study.naming_keys() == ["training.micro_batch", "training.seq_len"]


def test_a_point_out_of_memory_is_never_the_best():
    """A run that does not fit is no answer to "which is best", whatever its numbers: the
    best question leaves it out and names it; with nothing that fits it says so."""
    import pandas as pd
    from simulator.study.answers import answer
    from simulator.study.spec import Axes, BestQuestion, Study
    study = Study(name="s", command="run", base={"scenario": "quickstart"},
                  axes=Axes(grid={"cluster.topology": ["a", "b", "c"]}),
                  labels={"cluster.topology": "server"})
    rows = pd.DataFrame({"cluster.topology": ["a", "b", "c"],
                         "tokens_per_s": [300.0, 200.0, 100.0],
                         "oom": [True, False, False]})
    q = BestQuestion(kind="best", ask="fastest?", metric="tokens_per_s", goal="max")
    text = answer(q, rows, study)
    assert "is 200 with server b" in text and "next comes server c" in text
    assert "(left out, out of memory: server a)" in text
    none = answer(q, rows.assign(oom=True), study)
    assert none == "Every point the question picks runs out of memory, so none is the best."
