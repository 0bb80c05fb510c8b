"""benchmarks/bench_pipelines.py --increments (issue 43): whether a pipeline's step repeats,
as simulator/accum.py asks before it extrapolates, at micro-batch counts a user names; the
table's numbers are the full replays' at those counts and the line through them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = """name: pp2
model: gpt3-1.3b
training: {micro_batch: 1, seq_len: 512, global_batch: 160, precision: fp16}
cluster: {topology: dgx-a100-superpod, nodes: 2, gpus: 8}
strategy: {name: megatron, tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2}
"""


def test_increments_are_the_full_replays_and_the_line_through_them(tmp_path):
    path = tmp_path / "pp2.yaml"
    path.write_text(SCENARIO)
    full = 3.25
    out = subprocess.run([sys.executable, "benchmarks/bench_pipelines.py", "--cases",
                          str(path), "--increments", "4,5,6", "--full", str(full)],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    rows = [line.split("|")[1:-1] for line in out.splitlines()
            if line.startswith("| ") and line[2].isdigit()]
    assert "80 micro-batches" in out.splitlines()[0]          # 160 samples on DP2
    # each count replayed in full, as a user's run of that many micro-batches
    t = {k: run_setup(build_setup(load_scenario(path, [f"training.global_batch={2 * k}"]),
                                  extrapolate_steps=False)).metrics.iteration_time_s
         for k in (4, 5, 6)}
    assert [int(r[0]) for r in rows] == [4, 5, 6]
    assert [float(r[1]) for r in rows] == [pytest.approx(t[k], abs=1e-9) for k in (4, 5, 6)]
    assert float(rows[2][2]) == pytest.approx(t[6] - t[5], abs=1e-9)
    line = t[6] + (80 - 6) * (t[6] - t[5])
    assert rows[2][3].strip() == "(4, 5, 6)" and rows[2][4].strip() == "periodic"
    assert float(rows[2][5]) == pytest.approx(line, abs=1e-6)
    assert rows[2][6].strip() == f"{(line - full) / full:+.4%}"
    assert rows[0][3].strip() == rows[1][3].strip() == ""     # no window of three yet


def test_increments_take_one_case():
    done = subprocess.run([sys.executable, "benchmarks/bench_pipelines.py", "--increments",
                           "4,5"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "--increments takes one case" in done.stderr
