"""MLPerf Training v4.1 GPT-3 175B rows of the parallel suite (``mlperf.py``,
``cases.yaml`` ``mlperf_gpt3``): each submission runs with its own layout and global batch,
on its system's topology, with CUDA graphs where its config set them; a row the table and
``cases.yaml`` cannot place is refused in one line naming the field; the error is the step
time's."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from simulator.errors import ConfigError
from simulator.validation.parallel import cases, mlperf
from simulator.validation.parallel.report import mlperf_summary


def _rows():
    spec = cases.load()
    return spec, mlperf.gpt3_rows(cases.default_root(), spec)


def test_each_submission_runs_its_layout_and_batch():
    spec, rows = _rows()
    assert len(rows) == 6
    for row in rows:
        scn = mlperf.scenario_of(row, spec, mlperf.case_id(row))
        s, t = scn["strategy"], scn["training"]
        tp, pp = s["tensor_model_parallel_size"], s["pipeline_model_parallel_size"]
        dp = int(row["gpus"]) // (tp * pp)
        # the logged global batch: whole micro-batches of every data-parallel rank
        assert t["micro_batch"] * t["grad_accum"] * dp == int(row["global_batch"])
        assert scn["cluster"]["nodes"] == int(row["nodes"])
        graphs = "LAYER_CUDA_GRAPH" in str(row["cuda_graph"])
        assert (s.get("cuda_graph_impl") == "transformer_engine") == graphs
        assert t["precision"] == "fp8" and t["fp8_recipe"] == "delayed"


def test_the_11616_gpu_row_takes_tp_and_pp_from_its_config_name():
    spec, rows = _rows()
    (row,) = [r for r in rows if int(r["gpus"]) == 11616]
    assert str(row["tp"]).strip() == "" and str(row["pp"]).strip() == ""
    s = mlperf.scenario_of(row, spec, "x")["strategy"]
    # config_DGXH100_1452x8x6x4x6_mbs1_cg.sh: NNODES x GPUS x MINIBS x TP x PP
    assert (s["tensor_model_parallel_size"], s["pipeline_model_parallel_size"]) == (4, 6)
    assert 1452 * 8 // (4 * 6) * 6 == int(row["global_batch"])


@pytest.mark.parametrize("change, field", [
    ({"layouts": {}}, "tp"),
    ({"topologies": {}}, "system"),
])
def test_a_row_it_cannot_place_is_refused_in_one_line(change, field):
    spec, rows = _rows()
    (row,) = [r for r in rows if int(r["gpus"]) == 11616]
    spec = spec.model_copy(update={"mlperf_gpt3": spec.mlperf_gpt3.model_copy(update=change)})
    with pytest.raises(ConfigError) as info:
        mlperf.scenario_of(row, spec, "x")
    assert info.value.field == field and "\n" not in str(info.value)
    assert "eos-dfw_n1452" in str(info.value)


def test_rows_compare_the_step_time():
    spec, rows = _rows()
    times = {"parallel/mlperf/gpt3/eos_n64_ngc24.09_nemo": 10.0}

    def fake(scn, case):
        if case in times:
            return SimpleNamespace(oom=False, iteration_time_s=times[case],
                                   peak_memory_gib=60.0)
        return SimpleNamespace(oom=True, iteration_time_s=math.nan, peak_memory_gib=90.0)

    out = {r["case"]: r for r in mlperf.mlperf_rows(cases.default_root(), spec, fake)}
    row = out["parallel/mlperf/gpt3/eos_n64_ngc24.09_nemo"]
    measured = [r for r in rows if r["system"] == "eos_n64_ngc24.09_nemo"][0]
    assert row["measured"] == float(measured["median_step_time_s"])
    assert row["error"] == pytest.approx((10.0 - row["measured"]) / row["measured"])
    oom = out["parallel/mlperf/gpt3/eos_n32_ngc24.09_nemo"]
    assert math.isnan(oom["error"]) and "simulated out of memory" in oom["note"]
    clause = mlperf_summary(pd.DataFrame(list(out.values())))
    assert "1 of 6 submissions compared" in clause
    assert f"{100 * abs(row['error']):.1f}%" in clause
