"""The study runner: results as points finish, failures recorded, resume after a crash,
the same numbers from every executor, Dask (a real local cluster), and its bad input."""

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from study_helpers import (descendants, register, start_study, still_running, study_command,
                           write_study)

from simulator.cli import main
from simulator.errors import ConfigError
from simulator.study import load_study, run_study
from simulator.study.commands import BASE_COLUMNS, RUN_COLUMNS
from simulator.study.executors import CONNECT_TIMEOUT_S, make_executor
from simulator.study.store import finished_parts

NOT_RESULTS = ["wall_s", "worker"]          # where and how long, not what was computed


@pytest.fixture(autouse=True)
def _test_commands():
    register()


def _run(path, out, **kw):
    return run_study(load_study(path), out, progress=False, **kw)


def test_run_study_writes_table_and_report(tmp_path):
    path = write_study(tmp_path, axes={"grid": {"cluster.gpus": [2, 4]}},
                       questions=[{"kind": "best", "ask": "Which GPU count is fastest?",
                                   "metric": "samples_per_s", "goal": "max"}],
                       plots=[{"kind": "line", "x": "gpus", "y": "samples_per_s"}])
    run = _run(path, tmp_path / "out", workers=1)
    table = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert len(table) == 2 and set(table["status"]) == {"ok"}
    assert set(RUN_COLUMNS) | set(BASE_COLUMNS) <= set(table.columns)
    assert list(table["gpus"]) == [2, 4]
    csv = pd.read_csv(tmp_path / "out" / "results.csv")
    assert list(csv["point"]) == list(table["point"])
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Which GPU count is fastest?" in report
    assert any(p.suffix == ".png" and p.exists() for p in run.files)
    assert (run.ran, run.failed, run.skipped) == (2, 0, 0)


def test_failing_point_is_recorded_and_the_rest_still_run(tmp_path, capsys):
    path = write_study(tmp_path, command="probe",
                       axes={"grid": {"training.micro_batch": [1, 3, 2]}})
    run = _run(path, tmp_path / "out", workers=1)
    table = run.table.set_index("training.micro_batch")
    assert table.loc[3, "status"] == "error"
    assert "probe refuses micro_batch 3" in table.loc[3, "error"]
    assert list(table.loc[[1, 2], "status"]) == ["ok", "ok"]
    assert list(table.loc[[1, 2], "value"]) == [1 * 8, 2 * 8]
    assert "probe refuses" in (tmp_path / "out" / "report.md").read_text()
    # a rerun retries the failed point only; the CLI says so with exit code 1
    with pytest.raises(SystemExit) as info:
        main(["study", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    assert info.value.code == 1
    assert "ran 1 point(s) (1 failed), 2 finished before" in capsys.readouterr().out


def test_resume_skips_finished_points_whatever_their_order(tmp_path):
    out = tmp_path / "out"
    first = _run(write_study(tmp_path, command="probe",
                             axes={"grid": {"training.micro_batch": [1, 2]}}), out, workers=1)
    assert first.ran == 2
    again = _run(write_study(tmp_path, command="probe",
                             axes={"grid": {"training.micro_batch": [4, 2, 1]}}), out, workers=1)
    assert (again.ran, again.skipped) == (1, 2)
    assert list(again.table["training.micro_batch"]) == [4, 2, 1]
    assert list(again.table["value"]) == [32, 16, 8]
    fresh = _run(write_study(tmp_path, command="probe",
                             axes={"grid": {"training.micro_batch": [4, 2, 1]}}), out,
                 workers=1, resume=False)
    assert (fresh.ran, fresh.skipped) == (3, 0)


def test_seed_reaches_every_point(tmp_path):
    run = _run(write_study(tmp_path, command="probe", seed=11,
                           axes={"grid": {"training.micro_batch": [1, 2]}}),
               tmp_path / "out", workers=1)
    assert list(run.table["seed_seen"]) == [11, 11]


def test_killed_study_resumes_without_losing_or_repeating_points(tmp_path):
    n = 12
    path = write_study(tmp_path, command="slow",
                       axes={"grid": {"training.micro_batch": list(range(1, n + 1))}})
    out = tmp_path / "out"
    proc = start_study(path, out, workers=1, parts=3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = finished_parts(out)
    assert 3 <= len(before) < n, "the study must be killed mid-way"
    assert not (out / "results.parquet").exists()
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "parts").glob("*.parquet")}
    args, env = study_command(path, out, workers=1)
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"ran {n - len(before)} point(s) (0 failed), {len(before)} finished before" \
        in done.stdout
    table = pd.read_parquet(out / "results.parquet")
    assert sorted(table["value"]) == list(range(1, n + 1))
    assert table["point"].is_unique and len(table) == n
    assert all((out / "parts" / name).stat().st_mtime_ns == t for name, t in stamps.items())
    assert not list((out / "parts").glob(".*.tmp"))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_local_workers_end_when_the_study_is_killed(tmp_path):
    """kill -9 of a study running 2 local workers: within 10 s no process it started is
    left (workers, the forkserver and the resource tracker end with their parent)."""
    n = 80                                   # 80 x 0.25 s on 2 workers: 10 s of work
    path = write_study(tmp_path, command="slow",
                       axes={"grid": {"training.micro_batch": list(range(1, n + 1))}})
    out = tmp_path / "out"
    proc = start_study(path, out, workers=2, parts=4)
    started = {}
    try:
        started = descendants(proc.pid)
        assert len(finished_parts(out)) >= 4 and len(started) >= 2, "workers must be busy"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while still_running(started) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert still_running(started) == [], "processes of the killed study are left"
        assert len(finished_parts(out)) < n
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in still_running(started):
            os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------ executors
@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, protocol="tcp")
    yield cluster
    cluster.close()


def test_same_results_from_every_executor_and_worker_count(tmp_path, dask_cluster):
    path = write_study(tmp_path, axes={"grid": {"cluster.gpus": [1, 2, 4, 8]}})
    host, port = dask_cluster.scheduler_address.removeprefix("tcp://").rsplit(":", 1)
    runs = {
        "serial": _run(path, tmp_path / "serial", workers=1),
        "2 processes": _run(path, tmp_path / "local2", workers=2),
        "dask": _run(path, tmp_path / "dask", executor=f"dask://{host}:{port}"),
    }
    assert runs["dask"].executor.startswith("dask")
    tables = {k: r.table.drop(columns=NOT_RESULTS) for k, r in runs.items()}
    assert set(tables["serial"]["status"]) == {"ok"}
    for name, table in tables.items():
        pd.testing.assert_frame_equal(table, tables["serial"], check_exact=True, obj=name)
    assert tables["serial"]["iteration_time_s"].nunique() == 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_scheduler_fails_fast_and_writes_nothing(tmp_path):
    path = write_study(tmp_path)
    out = tmp_path / "out"
    start = time.monotonic()
    with pytest.raises(ConfigError, match="cannot reach the Dask scheduler"):
        _run(path, out, executor=f"dask://127.0.0.1:{_free_port()}")
    assert time.monotonic() - start < CONNECT_TIMEOUT_S + 3
    assert not out.exists()


@pytest.mark.parametrize("spec, workers, field", [
    ("dask:/host:1", None, "--executor"), ("ray://x:1", None, "--executor"),
    ("dask://host:99999", None, "--executor"), ("dask://host:8786", 4, "--workers")])
def test_bad_executor_options(spec, workers, field):
    with pytest.raises(ConfigError) as info:
        make_executor(spec, workers, 3)
    assert info.value.field == field


# ------------------------------------------------------------------ output folder
def test_refuses_a_folder_of_someone_elses_files(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    with pytest.raises(ConfigError, match="not empty"):
        _run(write_study(tmp_path, command="probe"), out, workers=1)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_refuses_another_studys_results_unless_fresh(tmp_path):
    out = tmp_path / "out"
    _run(write_study(tmp_path, "one", command="probe"), out, workers=1)
    other = write_study(tmp_path, "two", command="probe")
    with pytest.raises(ConfigError, match="'one'"):
        _run(other, out, workers=1)
    run = _run(other, out, workers=1, resume=False)
    assert run.ran == 2 and len(finished_parts(out)) == 2
