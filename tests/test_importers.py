"""PyTorch (Kineto) importer: grouping, collectives, dependencies, files and their errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from importer_fixtures import gloo_step, gpu_step, kernel, write
from simulator.errors import ConfigError
from simulator.importers import import_trace
from simulator.importers.jsonstream import read_chrome_trace
from simulator.trace_replay import replay_trace, with_recorded_collectives
from simulator.trace.io import trace_to_dict

US = 1e-6


def ops_by(trace, **match):
    return [op for op in trace.classes[0].ops
            if all(getattr(op, k) == v for k, v in match.items())]


@pytest.fixture
def gpu_trace(tmp_path):
    return import_trace("pytorch", [write(tmp_path / "r0.json", gpu_step())])


def test_one_file_stands_for_every_rank_of_the_job(gpu_trace):
    assert gpu_trace.world_size == 2
    assert [c.ranks for c in gpu_trace.classes] == [(0, 1)]
    assert gpu_trace.communicators["pg:0"].groups == ((0, 1),)
    assert gpu_trace.meta["step"] == "ProfilerStep#1"
    assert gpu_trace.meta["recorded_step_s"] == pytest.approx(1000 * US)


def test_nccl_kernel_becomes_a_sized_collective_with_recorded_choice(gpu_trace):
    (coll,) = ops_by(gpu_trace, kind="collective")
    assert coll.collective == "all_reduce"
    assert coll.size_bytes == 1000 * 4                 # 1000 Float elements
    assert coll.comm == "pg:0" and coll.stream == "nccl:0"
    assert (coll.attrs["algorithm"], coll.attrs["protocol"]) == ("ring", "LL")
    assert coll.attrs["recorded_s"] == pytest.approx(200 * US)


def test_sizes_come_from_record_param_comms_when_the_kernel_has_none(tmp_path):
    doc = gpu_step()
    for e in doc["traceEvents"]:
        if "nccl" in e["name"]:
            e["args"] = {k: v for k, v in e["args"].items() if k in ("stream", "correlation")}
        if e["name"] == "record_param_comms":
            e["args"].update({"In msg nelems": 50, "Out msg nelems": 100, "dtype": "BFloat16",
                              "Process Group Name": "7", "Process Group Ranks": "[0, 1]"})
    t = import_trace("pytorch", [write(tmp_path / "r.json", doc)])
    (coll,) = ops_by(t, kind="collective")
    assert (coll.size_bytes, coll.comm) == (100 * 2, "pg:7")    # larger buffer x 2 bytes
    assert t.communicators["pg:7"].groups == ((0, 1),)


def test_a_kernel_found_through_its_ac2g_flow_belongs_to_the_step(tmp_path):
    """Launched at 990 us (inside the step), run at 1005 us (after it): with the launch call
    missing, the ac2g flow still places the launch in the step."""
    doc = gpu_step()
    doc["traceEvents"] += [
        kernel("late_kernel", 1005, 10, 77),
        {"ph": "s", "id": 77, "pid": 100, "tid": 1, "ts": 990, "cat": "ac2g", "name": "ac2g"}]
    names = [op.name for op in import_trace("pytorch", [write(tmp_path / "a.json", doc)])
             .classes[0].ops]
    assert "late_kernel" in names
    doc["traceEvents"].pop()                                   # no flow: launch unknown
    names = [op.name for op in import_trace("pytorch", [write(tmp_path / "b.json", doc)])
             .classes[0].ops]
    assert "late_kernel" not in names


def test_kernels_group_per_layer_with_a_paced_tail(gpu_trace):
    forward = [op for op in ops_by(gpu_trace, phase="forward") if op.stream == "cuda:7"]
    # two forward kernels: a head (all but the last) and a tail (the last), busy time only
    assert [op.duration_s for op in forward] == pytest.approx([100 * US, 20 * US])
    assert [op.attrs["kernels"] for op in forward] == [1, 1]
    host = ops_by(gpu_trace, stream="host")
    assert {op.kind for op in host} == {"delay"}          # GPU trace: host time is overhead
    assert {"forward", "backward", "optimizer"} <= {op.phase for op in host}


def test_dependencies_follow_stream_waits_launches_and_syncs(gpu_trace):
    ops = {op.id: op for op in gpu_trace.classes[0].ops}
    (coll,) = ops_by(gpu_trace, kind="collective")
    backward = [op for op in ops.values() if op.stream == "cuda:7" and op.phase == "backward"]
    first_bwd, overlapping = backward[0], backward[-1]
    assert first_bwd.id in coll.deps                      # waited for via cudaStreamWaitEvent
    assert coll.id not in overlapping.deps                # launched after, ran alongside
    (opt,) = [op for op in ops.values() if op.stream == "cuda:7" and op.phase == "optimizer"]
    assert coll.id in opt.deps                            # the optimizer waits for the grads
    (wait,) = [op for op in ops.values() if op.name.startswith("wait:")]
    assert opt.id in wait.deps                            # cudaStreamSynchronize
    # the host took 30 us in the sync; the kernel it waited for ended at 950, the call at 990
    assert wait.duration_s == pytest.approx(30 * US)
    for op in ops.values():                               # contract: deps listed earlier
        assert all(d < op.id for d in op.deps)


def test_replaying_recorded_times_gives_back_the_recorded_step(gpu_trace):
    result = replay_trace(with_recorded_collectives(gpu_trace), "dgx-a100")
    assert result.metrics.iteration_time_s == pytest.approx(1000 * US)
    assert gpu_trace.meta["recorded_iteration_s"] == pytest.approx(1000 * US)


def test_gzip_and_plain_files_import_the_same(tmp_path):
    plain = import_trace("pytorch", [write(tmp_path / "a.json", gpu_step())])
    packed = import_trace("pytorch", [write(tmp_path / "a.json.gz", gpu_step())])
    for t in (plain, packed):
        t.meta.pop("files")
    assert trace_to_dict(plain) == trace_to_dict(packed)


def test_import_is_deterministic(tmp_path):
    files = [write(tmp_path / f"r{r}.json", gloo_step(r)) for r in (0, 1)]
    a, b = (trace_to_dict(import_trace("pytorch", files)) for _ in range(2))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


# ------------------------------------------------------------------------- gloo, CPU
@pytest.fixture
def gloo_trace(tmp_path):
    files = [write(tmp_path / f"r{r}.json", gloo_step(r)) for r in (0, 1)]
    return import_trace("pytorch", files)


def test_gloo_collectives_on_cpu_ranks(gloo_trace):
    assert [c.ranks for c in gloo_trace.classes] == [(0,), (1,)]
    for cls in gloo_trace.classes:
        (coll,) = [op for op in cls.ops if op.kind == "collective"]
        assert (coll.collective, coll.size_bytes) == ("all_reduce", 256 * 4)
        assert coll.stream == "gloo:0#0" and coll.comm == "pg:0"
        assert {op.kind for op in cls.ops if op.stream == "host"} == {"compute", "delay"}
    labels = {op.layer for op in gloo_trace.classes[0].ops}
    assert "FSDP::pre_forward (0)" in labels


def test_host_waits_for_the_gloo_collective(gloo_trace):
    ops = gloo_trace.classes[0].ops
    (coll,) = [op for op in ops if op.kind == "collective"]
    (wait,) = [op for op in ops if op.name.startswith("wait:")]
    assert coll.id in wait.deps
    assert wait.duration_s == pytest.approx(5 * US)       # resumed 5 us after it ended
    # the 105 us the host sat idle is not host time: host compute adds up to the rest
    host = sum(op.duration_s for op in ops if op.stream == "host")
    assert host == pytest.approx((1000 - 105 + 5) * US)


def test_gloo_replay_with_recorded_times_gives_back_the_step(gloo_trace):
    result = replay_trace(with_recorded_collectives(gloo_trace), "dgx-a100")
    assert result.metrics.iteration_time_s == pytest.approx(1000 * US)


def test_all_gather_size_is_the_gathered_buffer(tmp_path):
    doc = gloo_step(0)
    for e in doc["traceEvents"]:
        if e["name"] == "gloo:all_reduce":
            e["name"] = "gloo:all_gather"
    t = import_trace("pytorch", [write(tmp_path / "g.json", doc)])
    (coll,) = ops_by(t, kind="collective")
    assert (coll.collective, coll.size_bytes) == ("all_gather", 256 * 4 * 2)


def test_ranks_issuing_different_collectives_are_refused(tmp_path):
    files = [write(tmp_path / "r0.json", gloo_step(0, collectives=2)),
             write(tmp_path / "r1.json", gloo_step(1, collectives=1))]
    with pytest.raises(ConfigError, match="different numbers of collectives"):
        import_trace("pytorch", files)


def test_missing_rank_files_are_named(tmp_path):
    doc = gloo_step(0)
    doc["distributedInfo"]["world_size"] = 4
    other = gloo_step(1)
    other["distributedInfo"]["world_size"] = 4
    files = [write(tmp_path / "r0.json", doc), write(tmp_path / "r1.json", other)]
    with pytest.raises(ConfigError, match=r"no file for rank\(s\) 2, 3"):
        import_trace("pytorch", files)


def test_collective_without_size_asks_for_one(tmp_path):
    doc = gloo_step(0)
    for e in doc["traceEvents"]:
        e["args"].pop("Input Dims", None)
    path = write(tmp_path / "n.json", doc)
    with pytest.raises(ConfigError, match="--collective-bytes all_reduce=SIZE"):
        import_trace("pytorch", [path])
    t = import_trace("pytorch", [path], collective_bytes={"all_reduce": 4096})
    assert ops_by(t, kind="collective")[0].size_bytes == 4096


def test_unknown_step_lists_the_steps(tmp_path):
    path = write(tmp_path / "s.json", gpu_step())
    with pytest.raises(ConfigError, match=r"no ProfilerStep#7 .*steps: 1\)"):
        import_trace("pytorch", [path], step=7)


# ------------------------------------------------------------------- files and errors
def _cut_gzip(tmp_path):
    raw = gzip.compress(json.dumps(gpu_step()).encode())
    (tmp_path / "cut.json.gz").write_bytes(raw[: len(raw) // 2])
    return "cut.json.gz", "truncated gzip"


@pytest.mark.parametrize("make", [
    lambda d: ("empty.json", b"", "empty file"),
    lambda d: ("img.json", b"\x89PNG\r\n\x1a\n" + b"\0" * 50, "a PNG image"),
    lambda d: ("notes.txt", b"hello, this is text", "not a JSON trace"),
    lambda d: ("cut.json", json.dumps(gpu_step()).encode()[:900], "truncated JSON"),
    lambda d: ("other.json", b'{"name": "not a trace", "values": [1, 2]}',
               "without a traceEvents"),
    lambda d: ("bad.json", b'{"traceEvents": [{"ph": "X"}, }', "corrupt JSON"),
    lambda d: ("tf.json", json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 1,
                                                       "dur": 1}]}).encode(),
               "not a PyTorch profiler trace"),
])
def test_bad_files_give_one_clear_error_naming_the_file(tmp_path, make):
    name, data, message = make(tmp_path)
    (tmp_path / name).write_bytes(data)
    with pytest.raises(ConfigError, match=message) as exc:
        import_trace("pytorch", [tmp_path / name])
    assert str(tmp_path / name) in str(exc.value) and "\n" not in str(exc.value)


def test_cut_gzip_and_missing_file(tmp_path):
    name, message = _cut_gzip(tmp_path)
    with pytest.raises(ConfigError, match=message):
        import_trace("pytorch", [tmp_path / name])
    with pytest.raises(ConfigError, match="no such file"):
        import_trace("pytorch", [tmp_path / "absent.json"])


def test_events_are_streamed_not_loaded_whole(tmp_path, monkeypatch):
    """Events reach the callback while the document is still being parsed: the file below
    is corrupt at its end, yet its first events arrive before the error; json.load is
    never used."""
    import simulator.importers.jsonstream as js
    monkeypatch.setattr(json, "load", lambda *a, **k: pytest.fail("json.load used"))
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("json.loads used"))
    body = ",".join(json.dumps({"ph": "X", "name": f"e{i}", "ts": i, "dur": 1})
                    for i in range(2000))
    path = tmp_path / "big.json.gz"
    with gzip.open(path, "wt") as fh:
        fh.write('{"traceEvents": [' + body + ", oops")
    seen = []
    with pytest.raises(ConfigError):
        js.read_chrome_trace(path, lambda e: seen.append(e["name"]))
    assert seen[:3] == ["e0", "e1", "e2"] and len(seen) == 2000
    header = read_chrome_trace(write(tmp_path / "ok.json", gpu_step()), lambda e: None,
                               ["distributedInfo"])
    assert header["distributedInfo"]["world_size"] == 2


# ------------------------------------------------------------------------ real trace
A100 = Path(__file__).resolve().parents[1] / "validation" / "traces" / "a100" / \
    "nccl_data.json.gz"


def test_real_a100_trace_collectives_match_the_raw_kernel_arguments():
    trace = import_trace("pytorch", [A100])
    assert trace.meta["step"] == "ProfilerStep#5"          # steady state of steps 4, 5, 6
    raw = json.load(gzip.open(A100))["traceEvents"]
    step = next(e for e in raw if e.get("name") == "ProfilerStep#5")
    a, b = step["ts"], step["ts"] + step["dur"]
    width = {"Float": 4, "Long": 8}
    expected = sorted((e["args"]["Collective name"], e["args"]["In msg nelems"]
                       * width[e["args"]["dtype"]])
                      for e in raw if e.get("cat") == "kernel" and "nccl" in e["name"]
                      and a <= e["ts"] < b)
    names = {"allreduce": "all_reduce", "broadcast": "broadcast"}
    got = sorted((op.collective, op.size_bytes) for op in ops_by(trace, kind="collective"))
    assert got == sorted((names[n], s) for n, s in expected)
