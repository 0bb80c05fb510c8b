"""The committed captures (validation/traces/): every run listed has readable traces, the
recorded iteration times follow from the recorded step times, and the capture-machine fits in
capture_machine.yaml follow from the rows of capture_machine.csv. Needs neither torch nor
tensorflow: Kineto traces are plain JSON and xplane.pb is walked at the protobuf wire level.
"""

import csv
import gzip
import json
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml

TRACES = Path(__file__).resolve().parents[1] / "validation" / "traces"
CAPTURED = TRACES / "captured"
RATES = ("10gbit", "1gbit", "200mbit")
JOBS_2R = ("torch-ddp", "torch-fsdp2", "tf-mwms")
RUN_COLUMNS = {"job", "framework", "strategy", "ranks", "bandwidth", "latency_s", "steps",
               "iter_time_mean_s", "iter_time_median_s", "iter_time_std_s", "date", "machine",
               "loadavg_1m_before", "loadavg_1m_mean", "trace_files"}


def _rows(name):
    with open(TRACES / name, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def runs():
    return _rows("captured_runs.csv")


@pytest.fixture(scope="module")
def machine_rows():
    return _rows("capture_machine.csv")


@pytest.fixture(scope="module")
def machine_yaml():
    return yaml.safe_load((TRACES / "capture_machine.yaml").read_text())


def test_runs_cover_every_job_and_bandwidth(runs):
    assert RUN_COLUMNS <= set(runs[0])
    have = {(r["job"], int(r["ranks"]), r["bandwidth"]) for r in runs}
    for job in JOBS_2R:
        for rate in RATES:
            assert (job, 2, rate) in have, f"missing run {job} 2 ranks {rate}"
    for job in ("torch-ddp", "torch-fsdp2"):
        assert any(j == job and n == 4 for j, n, _ in have), f"missing 4-rank {job}"
    assert len({r["run_id"] for r in runs}) == len(runs)


def _varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(buf):
    """(field number, wire type, value) of one protobuf message, at the wire level."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, i = _varint(buf, i)
        elif wt == 1:
            val, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            val, i = buf[i:i + n], i + n
        elif wt == 5:
            val, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"bad wire type {wt}")
        if i > len(buf):
            raise ValueError("truncated message")
        yield num, wt, val


def _xplane_names(raw: bytes) -> list[str]:
    """Plane names of an XSpace (field 1: planes; XPlane field 2: name)."""
    names = []
    for num, wt, val in _fields(raw):
        if num == 1 and wt == 2:
            names += [v.decode() for n, w, v in _fields(val) if n == 2 and w == 2]
    return names


def _check_kineto(path, rank, ranks, profiled_steps):
    doc = json.loads(gzip.decompress(path.read_bytes()))
    info = doc["distributedInfo"]
    assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", rank, ranks)
    names = [e.get("name", "") for e in doc["traceEvents"]]
    steps = {n for n in names if n.startswith("ProfilerStep#")}
    assert len(steps) == profiled_steps, (path, sorted(steps))
    assert any(n.startswith("gloo:") for n in names)
    assert any(n.startswith("aten::mm") or n.startswith("aten::addmm") for n in names)
    assert doc.get("record_shapes") in (True, 1, "1", None) or any(
        "Input Dims" in e.get("args", {}) for e in doc["traceEvents"])


def _check_xplane(path):
    raw = gzip.decompress(path.read_bytes())
    assert "/host:CPU" in _xplane_names(raw), path
    assert b"CollectiveReduceV2" in raw or b"Collective" in raw


def test_every_run_has_its_traces(runs):
    total = 0
    for r in runs:
        files = [TRACES / f for f in r["trace_files"].split(";")]
        assert len(files) == int(r["ranks"]), r["run_id"]
        for i, f in enumerate(sorted(files)):
            assert f.is_file(), f
            size = f.stat().st_size
            assert 10_000 < size < 1_500_000, (f, size)
            total += size
            if r["framework"] == "pytorch":
                assert f.name == f"rank{i}.pt.trace.json.gz"
                _check_kineto(f, i, int(r["ranks"]), int(r["profiled_steps"]))
            else:
                assert f.name == f"worker{i}.xplane.pb.gz"
                _check_xplane(f)
    assert total < 8_000_000, f"captured traces are {total / 1e6:.1f} MB; trim them"


def test_iteration_times_follow_from_step_times(runs):
    for r in runs:
        steps = json.loads((CAPTURED / r["run_id"] / "steps.json").read_text())
        r0 = steps["ranks"][0]
        timed = [t for t, k in zip(r0["step_s"], r0["step_kind"]) if k == "timed"]
        assert len(timed) == int(r["steps"]) >= 3
        assert float(r["iter_time_mean_s"]) == pytest.approx(statistics.fmean(timed), rel=1e-4)
        assert float(r["iter_time_median_s"]) == pytest.approx(statistics.median(timed),
                                                               rel=1e-4)
        assert float(r["iter_time_std_s"]) == pytest.approx(statistics.stdev(timed), rel=1e-3,
                                                            abs=1e-6)
        assert 0.1 < float(r["iter_time_mean_s"]) < 60
        assert float(r["loadavg_1m_before"]) >= 0


def test_slower_links_give_slower_iterations(runs):
    t = {(r["job"], int(r["ranks"]), r["bandwidth"]): float(r["iter_time_median_s"])
         for r in runs}
    for job in JOBS_2R:
        assert t[(job, 2, "200mbit")] > t[(job, 2, "10gbit")], job


def test_readme_documents_the_capture():
    text = (CAPTURED / "README.md").read_text()
    for needle in ("capture.py all", "taskset", "load average", *RATES, "lscpu"):
        assert needle in text, needle


def _wls(points):
    """Independent re-fit: minimise sum((a + b x - t)^2 / t) with numpy."""
    x, t = np.array(points, dtype=float).T
    w = 1 / np.sqrt(t)
    A = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(A, t * w, rcond=None)
    return a, b


def test_collective_fits_match_the_csv(machine_rows, machine_yaml):
    coll = [r for r in machine_rows if r["kind"] == "collective"]
    groups = {}
    for r in coll:
        groups.setdefault((r["bandwidth"], int(r["ranks"]), r["op"]), []).append(r)
    for rate in RATES:
        for n in (2, 4):
            for op in ("all_reduce", "all_gather", "reduce_scatter"):
                assert (rate, n, op) in groups, (rate, n, op)
    for (rate, n, op), rs in groups.items():
        assert len(rs) >= 4
        fit = machine_yaml["collectives"][rate][f"ranks_{n}"][op]
        factor = {"all_reduce": 2 * (n - 1) / n}.get(op, (n - 1) / n)
        assert float(rs[0]["wire_factor"]) == pytest.approx(factor)
        a, b = _wls([(factor * int(r["size_bytes"]), float(r["time_s"])) for r in rs])
        assert fit["alpha_s"] == pytest.approx(a, rel=1e-4, abs=1e-9), (rate, n, op)
        assert fit["beta_s_per_byte"] == pytest.approx(b, rel=1e-4), (rate, n, op)
        assert fit["bw_bytes_per_s"] == pytest.approx(1 / b, rel=1e-4)
        assert fit["sizes_bytes"] == sorted(int(r["size_bytes"]) for r in rs)


def test_shaped_links_limit_large_collectives(machine_yaml):
    """The fitted bandwidth never beats the link (a real cap), and the slowest link is the
    one the large messages feel most."""
    for rate, entry in machine_yaml["collectives"].items():
        for key, ops in entry.items():
            if not key.startswith("ranks_"):
                continue
            for op, fit in ops.items():
                assert fit["bw_bytes_per_s"] < 1.1 * entry["link_bytes_per_s"], (rate, key, op)
    slow = machine_yaml["collectives"]["200mbit"]["ranks_2"]["all_reduce"]["bw_bytes_per_s"]
    fast = machine_yaml["collectives"]["10gbit"]["ranks_2"]["all_reduce"]["bw_bytes_per_s"]
    assert fast > 5 * slow


def test_cpu_rates_match_the_csv(machine_rows, machine_yaml):
    for fw in ("pytorch", "tensorflow"):
        assert "solo" in machine_yaml["cpu"][fw] and "2proc_1percore" in machine_yaml["cpu"][fw]
        for mode, summary in machine_yaml["cpu"][fw].items():
            rs = [r for r in machine_rows if r["framework"] == fw and r["mode"] == mode]
            mm = [r for r in rs if r["kind"] == "compute"
                  and not r["op"].startswith(("attn_scores", "attn_values"))]
            ew = [r for r in rs if r["kind"] == "elementwise"]
            assert len(mm) == 15 and len(ew) >= 4
            gflops = sum(float(r["flops"]) for r in mm) / sum(float(r["time_s"]) for r in mm)
            gbs = sum(float(r["bytes"]) for r in ew) / sum(float(r["time_s"]) for r in ew)
            assert summary["matmul_gflop_per_s"] == pytest.approx(gflops / 1e9, rel=1e-3)
            assert summary["elementwise_gbyte_per_s"] == pytest.approx(gbs / 1e9, rel=1e-3)
            assert 1 < summary["matmul_gflop_per_s"] < 1000
