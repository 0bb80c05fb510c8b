"""`clustersim import` / `replay` / `validate traces`, and the A100 trace report's numbers."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from importer_fixtures import gloo_step, write
from simulator.validation import known_misses as km
from simulator.validation.traces import validate as vt
from simulator.validation.traces.report import write_report
from test_cli import run_main
from test_importers import A100
from test_importers_tf import xspace


def test_import_then_replay_round_trip(capsys, tmp_path):
    out = tmp_path / "a100.json.gz"
    code, text, err = run_main(capsys, "import", "pytorch", str(A100), "-o", str(out))
    assert code == 0, err
    assert "2 ranks, 1 rank class(es) (one file stands for every rank)" in text
    code, text, err = run_main(capsys, "replay", str(out), "--format", "json",
                               "--out", str(tmp_path / "run"))
    assert code == 0, err
    m = json.loads(text)
    assert m["world_size"] == 2 and len(m["collectives"]) == 7
    assert abs(m["iteration_time_s"] / m["recorded_iteration_s"] - 1) <= vt.STEP_GATE
    names = {p.name for p in (tmp_path / "run").iterdir()}
    assert {"timeline.json", "ops.csv", "gantt.png", "collectives.csv"} <= names
    timeline = json.loads((tmp_path / "run" / "timeline.json").read_text())
    threads = {e["args"]["name"] for e in timeline["traceEvents"]
               if e.get("name") == "thread_name"}
    assert {"host", "cuda:7", "nccl:0"} <= threads


def test_a_profile_says_na_for_what_it_cannot_give_until_its_model_is_named(capsys,
                                                                            tmp_path):
    bare, named = tmp_path / "bare.json", tmp_path / "named.json"
    assert run_main(capsys, "import", "pytorch", str(A100), "-o", str(bare))[0] == 0
    code, text, err = run_main(capsys, "replay", str(bare))
    assert code == 0, err
    rows = dict(line.split(None, 1) for line in text.splitlines() if line[:1].isalpha())
    assert rows["mfu"] == "n/a (the trace has no model FLOPs: import --model)"
    assert rows["samples_per_s"].startswith("n/a (the trace has no batch size")
    assert rows["peak_memory_gib"] == "n/a (the trace records no memory)"
    code, text, _ = run_main(capsys, "replay", str(bare), "--format", "json")
    m = json.loads(text)
    assert m["mfu"] is None and m["tokens_per_s"] is None and m["iteration_time_s"] > 0
    # named: 2 ranks of GPT-2 small at 1,024 tokens, 16 samples a step
    code, _, err = run_main(capsys, "import", "pytorch", str(A100), "-o", str(named),
                            "--model", "gpt2-small", "--global-batch", "16", "--seq-len",
                            "1024")
    assert code == 0, err
    code, text, _ = run_main(capsys, "replay", str(named), "--format", "json")
    m = json.loads(text)
    from simulator.models import load_model, model_flops_per_sample
    flops = model_flops_per_sample(load_model("gpt2-small"), 1024) * 16
    assert m["samples_per_s"] == pytest.approx(16 / m["iteration_time_s"])
    assert m["tokens_per_s"] == pytest.approx(16 * 1024 / m["iteration_time_s"])
    assert m["tflops_per_gpu"] == pytest.approx(flops / m["iteration_time_s"] / 2 / 1e12)
    code, _, err = run_main(capsys, "import", "pytorch", str(A100), "-o",
                            str(tmp_path / "x.json"), "--model", "gpt2-small",
                            "--global-batch", "16")
    assert code == 2 and "--seq-len" in err and "transformer" in err
    code, _, err = run_main(capsys, "import", "pytorch", str(A100), "-o",
                            str(tmp_path / "y.json"), "--global-batch", "16")
    assert code == 2 and "--model and --global-batch together" in err


def test_import_refuses_to_overwrite_and_names_bad_files(capsys, tmp_path):
    out = tmp_path / "t.json"
    out.write_text("{}")
    src = write(tmp_path / "r0.json", gloo_step(0))
    code, _, err = run_main(capsys, "import", "pytorch", src, "-o", str(out))
    assert code == 2 and "refusing to overwrite" in err
    code, text, err = run_main(capsys, "import", "pytorch", src, "-o", str(out), "--overwrite")
    assert code == 0, err
    png = tmp_path / "plot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 30)
    code, _, err = run_main(capsys, "import", "pytorch", str(png), "-o", str(tmp_path / "x"))
    assert code == 2
    assert err.strip() == f"clustersim: error: {png}: not a trace: the file is a PNG image"


def test_tensorflow_import_with_sizes_and_table_replay(capsys, tmp_path):
    pb = tmp_path / "w0.xplane.pb"
    pb.write_bytes(xspace())
    out = tmp_path / "tf.json"
    code, _, err = run_main(capsys, "import", "tensorflow", str(pb), "-o", str(out))
    assert code == 2 and "--collective-bytes" in err
    code, _, err = run_main(capsys, "import", "tensorflow", str(pb), "-o", str(out),
                            "--collective-bytes", "CollectiveReduceV2=16K")
    assert code == 0, err
    code, text, err = run_main(capsys, "replay", str(out))
    assert code == 0, err
    assert "recorded_iteration_s" in text and "collectives           1," in text
    code, _, err = run_main(capsys, "import", "tensorflow", str(pb), "-o", str(out),
                            "--overwrite", "--collective-bytes", "CollectiveReduceV2")
    assert code == 2 and "expected NAME=SIZE" in err


def test_replay_on_too_small_a_topology_is_an_error(capsys, tmp_path):
    files = [write(tmp_path / f"r{r}.json", gloo_step(r)) for r in (0, 1)]
    out = tmp_path / "g.json"
    assert run_main(capsys, "import", "pytorch", *files, "-o", str(out))[0] == 0
    code, _, err = run_main(capsys, "replay", str(out), "--topology", "hgx-a100-pcie",
                            "--nccl", "auto")
    assert code == 0, err
    data = json.loads(out.read_text())
    data["world_size"] = 64
    data["classes"][1]["ranks"] = list(range(1, 64))
    out.write_text(json.dumps(data))
    code, _, err = run_main(capsys, "replay", str(out))
    assert code == 2 and "has only 8 GPUs" in err


# ---------------------------------------------------------------- A100 validation
@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("traces")
    results = vt.validate()
    write_report(results, out)
    return results, out


def _md_table(text: str, header_start: str) -> pd.DataFrame:
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[i:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return pd.DataFrame(rows[2:], columns=rows[0])


def test_report_recorded_durations_are_the_raw_nccl_kernels(report):
    """Recompute the recorded column from the raw trace, independently of the importer."""
    _, out = report
    table = _md_table((out / "report.md").read_text(), "| step | op | collective")
    raw = json.load(gzip.open(A100))["traceEvents"]
    steps = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in raw
             if str(e.get("name", "")).startswith("ProfilerStep#")}
    expected = []
    for n, (a, b) in sorted(steps.items()):
        expected += [f"{e['dur']:.1f}" for e in sorted(raw, key=lambda e: e.get("ts", 0))
                     if e.get("cat") == "kernel" and "nccl" in e["name"] and a <= e["ts"] < b]
    assert table["recorded (us)"].tolist() == expected


def test_report_errors_recompute_from_its_own_columns(report):
    results, out = report
    table = _md_table((out / "report.md").read_text(), "| step | op | collective")
    rec = table["recorded (us)"].astype(float)
    sim = table["simulated RING/LL (us)"].astype(float)
    err = table["error"].str.rstrip("%").astype(float) / 100
    assert (sim / rec - 1).round(2).tolist() == pytest.approx(err.round(2).tolist(), abs=0.011)
    steps = _md_table((out / "report.md").read_text(), "| step | recorded step")
    s = vt.summarize(results)
    steady = steps[steps.step == f"ProfilerStep#{s['steady_step']}"].iloc[0]
    got = float(steady["simulated (ms)"]) / float(steady["recorded iteration (ms)"]) - 1
    assert f"{100 * got:+.1f}%" == steady["error"]


def test_step_time_gate(report):
    s = vt.summarize(report[0])
    assert abs(s["step_error"]) <= vt.STEP_GATE


def test_nccl_kernel_duration_goal(report):
    """A strict xfail while validation/known_misses.yaml records it (one list)."""
    error = vt.summarize(report[0])["median_abs_error"]
    reason = km.load().get("traces/a100/nccl-kernels")
    if reason is None:
        assert error <= vt.COLLECTIVE_GOAL
    else:
        assert error > vt.COLLECTIVE_GOAL, "now within the goal: remove the known-miss record"
        pytest.xfail(f"median |error| {error:.1%} > {vt.COLLECTIVE_GOAL:.0%}: {reason}")


def test_committed_report_is_current(report):
    _, out = report
    committed = Path(vt.default_root()) / vt.REPORT
    fresh = (out / vt.REPORT).read_text()
    assert re.sub(r"\s+", " ", committed.read_text()) == re.sub(r"\s+", " ", fresh)


def test_validate_traces_command(capsys, tmp_path):
    code, text, err = run_main(capsys, "validate", "traces", "--out", str(tmp_path))
    assert code == 3, err          # the NCCL kernel goal is a known miss: exit 3, not 0
    assert "known miss: traces/a100/nccl-kernels" in text
    assert "step time error" in text and (tmp_path / "report.md").is_file()
    code, _, err = run_main(capsys, "validate", "traces", "--root", str(tmp_path / "none"))
    assert code == 2 and "no a100/nccl_data.json.gz" in err
