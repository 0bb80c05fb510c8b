"""The fine-tuning validation (validation/finetune/, simulator/validation/finetune.py): the
rows map to the scenario the split declares, the committed results meet the issue's goal
(median |error| <= 7% per vendor and per GPU, every row within 20%), and one cheap row
simulated now gives the committed number."""

from __future__ import annotations

import csv

import pytest

from simulator.validation.finetune import (ROOT, load_split, mlperf_rows, scenario_of,
                                           simulate_row, summary)

SPLIT = load_split()
ROWS = mlperf_rows()


def _results() -> list[dict]:
    with open(ROOT / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_the_split_fits_nothing_and_names_existing_rows():
    assert SPLIT["calibration"] == []
    for systems in SPLIT["validation"].values():
        for system in systems:
            assert system in ROWS and ROWS[system]["tp"]      # a config gave its parallelism
    # every LoRA row with a config file is either validated or excluded with a reason
    validated = {s for v in SPLIT["validation"].values() for s in v}
    assert set(ROWS) == validated | set(SPLIT["excluded"])


def test_a_row_becomes_the_mlperf_reference_setup():
    scn = scenario_of(ROWS["eos_n8_ngc24.09_nemo"], SPLIT)
    assert scn["training"]["finetune"] == {"mode": "lora", "rank": 16, "alpha": 32,
                                           "dropout": 0.1, "target_modules": ["attention"],
                                           "base_precision": "fp8"}
    assert scn["training"]["global_batch"] == 8 and scn["training"]["seq_len"] == 8192
    assert scn["cluster"] == {"topology": "dgx-h100-superpod", "nodes": 8}
    s = scn["strategy"]
    assert (s["tensor_model_parallel_size"], s["context_parallel_size"]) == (4, 2)
    assert s["cuda_graph_impl"] == "transformer_engine" and s["sequence_parallel"]
    four = scenario_of(ROWS["XE8640x4H100-SXM-80GB"], SPLIT)["cluster"]
    assert four["gpus"] == 4 and four["nodes"] == 1
    h200 = scenario_of(ROWS["ND_H200_v5_n64_nemo"], SPLIT)["cluster"]
    assert h200["topology_set"] == {"params.node.gpu": "H200-SXM"} and h200["nodes"] == 64


def test_committed_results_meet_the_goal_per_gpu_and_vendor():
    rows = [r for r in _results() if r["error"] and r["reported_only"] != "True"]
    validated = sum(len(v) for v in SPLIT["validation"].values())
    assert len(rows) == validated
    for s in summary([{**r, "error": float(r["error"])} for r in rows]):
        assert s["median_abs"] <= SPLIT["gates"]["median_abs_error_per_vendor"], s
    assert max(abs(float(r["error"])) for r in rows) <= SPLIT["gates"]["worst_abs_error"]


def test_one_row_simulated_now_gives_the_committed_number():
    row = simulate_row(ROWS["b200_preview_nemo"], SPLIT)
    committed = next(r for r in _results() if r["system"] == "b200_preview_nemo")
    assert row["simulated_s"] == pytest.approx(float(committed["simulated_s"]), abs=1e-4)
