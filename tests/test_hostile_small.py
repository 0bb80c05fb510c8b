"""The smaller refusals of issue 42: values a scenario, a --set, a study, a profile or a
command option cannot mean are one line naming the file and the field, exit 2; never a
traceback, a MemoryError or a silent default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from importer_fixtures import gpu_step
from simulator.importers.xplane import XSPACE
from test_cli import run_main

ROOT = Path(__file__).resolve().parents[1]


def one_line(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("clustersim: error: "), err
    assert len(err) < 500, err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize("setting, words", [
    ("simulation.seed=-1", ["simulation.seed", "greater than or equal to 0"]),
    ("cluster.nodes=!!int 1e3", ["cluster.nodes", "tag"]),
    ("training.seq_len=" + "1" + "0" * 56, ["training.seq_len", "16777216"]),
    ("training.micro_batch=" + "9" * 30, ["training.micro_batch"]),
])
def test_set_values_that_cannot_be_meant(capsys, setting, words):
    one_line(*run_main(capsys, "run", "quickstart", "--set", setting)[::2], *words)


def test_num_packs_past_the_bound_is_refused_before_building(capsys):
    code, out, err = run_main(capsys, "run", "resnet50-tf-mirrored-8gpu", "--set",
                              f"strategy.num_packs={2 ** 63}")
    one_line(code, err, "strategy.num_packs", "65536")


def test_a_huge_seq_len_in_the_file(capsys, tmp_path):
    text = (ROOT / "scenarios/quickstart.yaml").read_text()
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("seq_len: 4096", "seq_len: " + "1" + "0" * 56))
    assert "0" * 56 in path.read_text()
    one_line(*run_main(capsys, "run", str(path))[::2], str(path), "training.seq_len")


def test_a_long_list_in_a_refusal_is_not_repeated(capsys):
    code, _, err = run_main(capsys, "run", "quickstart", "--set",
                            "training.seq_len=[" + ",".join(["12345"] * 1000) + "]")
    one_line(code, err, "training.seq_len")


def test_a_study_axis_the_scenario_overrides(capsys, tmp_path):
    path = tmp_path / "st.yaml"
    path.write_text("name: n\ncommand: run\nbase: {scenario: llama2-7b-fsdp-128gpu}\n"
                    "axes:\n  grid: {topology.params.nodes: [16, 1000000]}\n")
    code, _, err = run_main(capsys, "study", str(path), "--out", str(tmp_path / "o"))
    one_line(code, err, str(path), "axes.grid.topology.params.nodes", "cluster.nodes")


@pytest.mark.parametrize("batch", ["0", "-3"])
def test_plan_global_batch_below_one(capsys, batch):
    one_line(*run_main(capsys, "plan", "quickstart", "--global-batch", batch)[::2],
             "--global-batch")


def test_a_profile_with_no_op_is_refused(capsys, tmp_path):
    path = tmp_path / "k.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel"}]}))
    code, _, err = run_main(capsys, "import", "pytorch", str(path), "-o",
                            str(tmp_path / "o.json"))
    one_line(code, err, str(path), "no GPU kernel")
    assert not (tmp_path / "o.json").exists()


def test_a_kernel_of_fifty_days_is_refused(capsys, tmp_path):
    doc = gpu_step()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["dur"] = 53 * 86_400e6
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    code, _, err = run_main(capsys, "import", "pytorch", str(path), "-o",
                            str(tmp_path / "o.json"))
    one_line(code, err, str(path), ".dur", "one day")


def test_an_xplane_event_of_fifty_three_days(capsys, tmp_path):
    space = XSPACE()
    plane = space.planes.add(id=1, name="/host:CPU")
    plane.event_metadata[1].name = "train_step"
    line = plane.lines.add(id=1, name="main", timestamp_ns=1)
    line.events.add(metadata_id=1, offset_ps=0, duration_ps=53 * 86_400 * 10 ** 12)
    path = tmp_path / "w.xplane.pb"
    path.write_bytes(space.SerializeToString())
    assert len(path.read_bytes()) < 80
    code, _, err = run_main(capsys, "import", "tensorflow", str(path), "-o",
                            str(tmp_path / "o.json"))
    one_line(code, err, str(path), "duration_ps", "one day")


def test_a_model_that_is_a_device(capsys, tmp_path):
    text = (ROOT / "scenarios/quickstart.yaml").read_text()
    path = tmp_path / "s.yaml"
    path.write_text("\n".join("model: /dev/zero" if line.startswith("model:") else line
                              for line in text.splitlines()) + "\n")
    one_line(*run_main(capsys, "run", str(path))[::2], "/dev/zero", "device")


def test_a_checkpoint_interval_shorter_than_a_step(capsys):
    code, _, err = run_main(capsys, "reliability", "quickstart", "-q", "--set",
                            "reliability.checkpoint.interval=1 ns")     # known after a step
    one_line(code, err, "reliability.checkpoint.interval", "shorter than one training step")
