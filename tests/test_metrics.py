"""Metrics and output files from replayed traces."""

import json

import pytest

from simulator.engine import replay
from simulator.errors import ConfigError
from simulator.metrics import compute_metrics
from simulator.metrics.tables import layer_breakdown
from simulator.metrics.outputs import chrome_trace, write_outputs
from simulator.metrics.summary import union_length
from simulator.trace import Communicator, Op, RankClass, Trace
from conftest import make_model, star_graph
from test_engine import TeraflopGPU, comp


def test_union_length_merges_overlaps():
    assert union_length([(0, 2), (1, 3), (5, 6)]) == 4
    assert union_length([(0, 5), (1, 2)]) == 5
    assert union_length([]) == 0


@pytest.fixture
def overlapped(ideal_constants):
    # compute 1 s on "compute" while a 16 GiB all_reduce runs on "comm", then 1 s more
    # compute that depends on the all_reduce.
    model = make_model(star_graph(4), ideal_constants)
    comm = {"world": Communicator("world", ((0, 1, 2, 3),))}
    ops = [Op(0, "comm", "collective", "ar", collective="all_reduce", size_bytes=1 << 34,
              comm="world", layer="block.0", phase="backward"),
           comp(1, 1e12, layer="block.0", phase="backward"),
           comp(2, 1e12, deps=(0,), layer="head", phase="optimizer")]
    meta = {"global_batch": 8, "tokens_per_sample": 1000, "model_flops_per_iteration": 8e12}
    trace = Trace(4, [RankClass("all", (0, 1, 2, 3), ops, static_memory_bytes=1 << 30)], comm,
                  meta)
    return model, replay(trace, model, TeraflopGPU(), capacity_bytes=2 << 30)


def test_breakdown_adds_up_and_splits_hidden_from_exposed(overlapped):
    _, tl = overlapped
    m = compute_metrics(tl, world_size=4, peak_flops=2e12)
    ar = next(r for r in tl.records if r.name == "ar")
    assert m.compute_s == pytest.approx(2.0)
    assert m.comm_s == pytest.approx(ar.end_s)
    assert m.exposed_comm_s == pytest.approx(ar.end_s - 1.0)       # 1 s hidden under c1
    assert m.compute_s + m.exposed_comm_s + m.wait_s == pytest.approx(m.iteration_time_s)
    assert m.iteration_time_s == pytest.approx(ar.end_s + 1.0)
    assert m.samples_per_s == pytest.approx(8 / m.iteration_time_s)
    assert m.tokens_per_s_per_gpu == pytest.approx(8000 / m.iteration_time_s / 4)
    assert m.tflops_per_gpu == pytest.approx(8 / m.iteration_time_s / 4)
    assert m.mfu == pytest.approx(m.tflops_per_gpu * 1e12 / 2e12)
    assert m.peak_memory_gib == 1.0 and not m.oom


def test_host_work_is_wait_not_compute(ideal_constants):
    """A ``delay`` (CPU optimizer step, Horovod cycle wait, recorded host gap) keeps no GPU
    busy: it is wait time, and GPU utilization counts only kernels and copies."""
    model = make_model(star_graph(2), ideal_constants)
    ops = [comp(0, 1e12, phase="backward"),
           Op(1, "host", "delay", "cpu_optimizer", duration_s=0.5, deps=(0,), phase="optimizer"),
           comp(2, 1e12, deps=(1,), phase="forward")]
    trace = Trace(2, [RankClass("all", (0, 1), ops)], {}, {"global_batch": 2})
    m = compute_metrics(replay(trace, model, TeraflopGPU()), 2, 1e12)
    assert m.iteration_time_s == pytest.approx(2.5)
    assert m.compute_s == pytest.approx(2.0) and m.wait_s == pytest.approx(0.5)
    assert m.gpu_utilization == pytest.approx(0.8) and m.exposed_comm_s == 0


def test_layer_breakdown_groups_by_layer_and_phase(overlapped):
    _, tl = overlapped
    df = layer_breakdown(tl)
    row = df[(df.layer == "head") & (df.phase == "optimizer")]
    assert row.seconds.iloc[0] == pytest.approx(1.0)


def test_chrome_trace_has_a_track_per_stream_and_counters(overlapped):
    _, tl = overlapped
    doc = chrome_trace(tl, {"all": (0, 1, 2, 3)})
    json.dumps(doc)                                   # serialisable
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M"}
    assert {"rank 0 (all)", "rank 3 (all)", "compute", "comm"} <= names
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == 3 * 4     # a copy per rank
    big = chrome_trace(tl, {"all": (0, 1, 2, 3)}, expand_up_to=2)       # one per class
    assert "all: ranks 0-3" in {e["args"]["name"] for e in big["traceEvents"] if e["ph"] == "M"}
    assert sum(e["ph"] == "X" for e in big["traceEvents"]) == 3
    assert any(e["ph"] == "C" and e["name"] == "link utilisation" for e in doc["traceEvents"])


def test_outputs_are_written_and_foreign_folders_refused(overlapped, tmp_path):
    model, tl = overlapped
    m = compute_metrics(tl, 4, 2e12)
    files = write_outputs(tmp_path / "run", tl, m, model.cluster, {"name": "t"},
                          {"all": (0, 1, 2, 3)})
    assert {f.name for f in files} >= {"summary.json", "metrics.csv", "timeline.json",
                                       "breakdown.png", "memory.png", "gantt.png"}
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["metrics"][
        "iteration_time_s"] == pytest.approx(m.iteration_time_s)
    write_outputs(tmp_path / "run", tl, m, model.cluster, {}, {})     # ours: reusable
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("precious")
    with pytest.raises(ConfigError, match="--out: folder is not empty"):
        write_outputs(foreign, tl, m, model.cluster, {}, {})
    assert (foreign / "notes.txt").read_text() == "precious"


def test_critical_class_is_the_first_by_name_of_those_that_end_last():
    """The class whose last op ends latest, ties to the first name: what each class's own
    maximum end (from 0), then the first of the sorted classes at the largest, gives."""
    import random
    from types import SimpleNamespace

    from simulator.engine import OpRecord
    from simulator.metrics.summary import critical_class

    def reference(records):
        ends: dict = {}
        for r in records:
            ends[r.cls] = max(ends.get(r.cls, 0.0), r.end_s)
        return max(sorted(ends), key=lambda c: ends[c]) if ends else ""

    rng = random.Random(4)
    cases = [[], [("b", 0.0), ("a", 0.0)], [("z", 2.0), ("a", 1.0), ("m", 2.0)]]
    for _ in range(40):
        cases.append([(rng.choice("pqrs"), rng.choice([0.0, 0.5, 1.25, 3.0, 3.0]))
                      for _ in range(rng.randint(1, 30))])
    for case in cases:
        records = [OpRecord(c, i, "op", "compute", "compute", "", "", 0.0, 0.0, e)
                   for i, (c, e) in enumerate(case)]
        tl = SimpleNamespace(records=records)
        assert critical_class(tl) == reference(records), case
    assert critical_class(SimpleNamespace(records=[
        OpRecord("m", 0, "op", "compute", "compute", "", "", 0.0, 0.0, 2.0),
        OpRecord("a", 1, "op", "compute", "compute", "", "", 0.0, 0.0, 2.0)])) == "a"
