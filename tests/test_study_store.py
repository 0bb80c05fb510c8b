"""A study's stored results: a part that cannot be used is moved aside with one warning line
and its point runs again (results identical to a clean run), parts are stamped, a killed
write is never taken for a part, and one run at a time holds an output folder."""

import json
import os
import shutil
import signal
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from study_helpers import register, start_study, write_study

from simulator.cli import main
from simulator.study import load_study
from simulator.study.parts import PART_VERSION, STAMP_KEY, part_name, read_part, write_part
from simulator.study.store import finished_parts

NOT_RESULTS = ["wall_s", "worker"]
VALUES = [1, 2, 4]                      # probe: value = micro_batch x 8 GPUs


@pytest.fixture(autouse=True)
def _test_commands():
    register()


def _study(folder, name="tiny", values=VALUES):
    return write_study(folder, name, command="probe",
                       axes={"grid": {"training.micro_batch": values}})


def _cli(path, out, capsys, *extra, workers=1):
    with pytest.raises(SystemExit) as info:
        main(["study", str(path), "--out", str(out), "--workers", str(workers),
              "--no-progress", *extra])
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def _results(out):
    return pd.read_parquet(out / "results.parquet").drop(columns=NOT_RESULTS)


@pytest.fixture
def clean(tmp_path, capsys):
    """A finished study, its clean results, and the part of its first point."""
    path = _study(tmp_path)
    out = tmp_path / "clean"
    assert _cli(path, out, capsys)[0] == 0
    pid = load_study(path).points[0]["id"]
    return path, out, _results(out), out / "parts" / part_name(pid, "ok")


def _other_studys_part(tmp_path, capsys):
    """The part of a point of another study (micro_batch 5 instead of 1)."""
    other = _study(tmp_path, "other", [5])
    assert _cli(other, tmp_path / "other-out", capsys)[0] == 0
    return next((tmp_path / "other-out" / "parts").glob("*.ok.parquet")).read_bytes()


def _stamped(part: Path, **changes) -> bytes:
    """The part re-written with its stamp or its columns changed."""
    frame = pd.read_parquet(part)
    stamp = json.loads(pq.read_schema(part).metadata[STAMP_KEY])
    tmp = part.with_name("rewritten.parquet")
    columns = changes.pop("columns", None)
    if columns is not None:
        frame = frame.rename(columns=columns)
    stamp.update(changes)
    write_part(tmp, frame, stamp["point"], stamp["status"])
    if "version" in changes:                # write_part stamps this version: re-stamp
        table = pq.read_table(tmp)
        meta = {**table.schema.metadata, STAMP_KEY: json.dumps(stamp).encode()}
        pq.write_table(table.replace_schema_metadata(meta), tmp)
    data = tmp.read_bytes()
    tmp.unlink()
    return data


BAD_PARTS = {
    # name: (the bad file's bytes from the good part and the tmp folder, the reason)
    "empty part": (lambda part, tmp, cap: b"", "cannot be read as Parquet (Parquet file size "
                   "is 0 bytes)"),
    "truncated part": (lambda part, tmp, cap: part.read_bytes()[: part.stat().st_size // 2],
                       "cannot be read as Parquet (Parquet magic bytes not found in footer"),
    "text file named like a part": (lambda part, tmp, cap: b"point,value\n1,8\n",
                                    "cannot be read as Parquet (Parquet magic bytes"),
    "valid Parquet of the wrong shape": (
        lambda part, tmp, cap: _parquet_bytes(tmp, pd.DataFrame({"a": [1, 2, 3],
                                                                 "b": ["x", "y", "z"]})),
        "carries no clustersim part stamp"),
    "part of another study": (lambda part, tmp, cap: _other_studys_part(tmp, cap),
                              "holds point '"),
    "part without a stamp (older clustersim)": (
        lambda part, tmp, cap: _parquet_bytes(tmp, pd.read_parquet(part)),
        "carries no clustersim part stamp"),
    "another part version": (lambda part, tmp, cap: _stamped(part, version=PART_VERSION + 1),
                             f"is part version {PART_VERSION + 1}; this clustersim reads "
                             f"version {PART_VERSION}"),
    "stamped with another status": (lambda part, tmp, cap: _stamped(part, status="error"),
                                    "holds a point with status 'error', not 'ok'"),
    "columns of another command": (lambda part, tmp, cap: _stamped(part, columns={
        "value": "tokens_per_s"}), "does not have the columns of this study's command: "
        "1 unknown (tokens_per_s), 1 missing (value)"),
}


def _parquet_bytes(tmp, frame):
    path = tmp / "plain.parquet"
    frame.to_parquet(path, index=False)
    return path.read_bytes()


@pytest.mark.parametrize("case", list(BAD_PARTS))
def test_bad_part_is_moved_aside_with_one_line_and_its_point_runs_again(
        case, clean, tmp_path, capsys):
    path, clean_out, clean_table, good = clean
    make, reason = BAD_PARTS[case]
    bad = make(good, tmp_path, capsys)
    out = tmp_path / "resumed"
    shutil.copytree(clean_out, out)
    part = out / "parts" / good.name
    part.write_bytes(bad)
    code, stdout, stderr = _cli(path, out, capsys)
    assert code == 0
    [line] = stderr.splitlines()
    assert line.startswith(f"clustersim: warning: {part}: {reason}")
    assert line.endswith(f"; moved to {out / 'parts' / '.bad' / good.name}, its point runs "
                         f"again")
    assert (out / "parts" / ".bad" / good.name).read_bytes() == bad      # nothing destroyed
    assert "ran 1 point(s) (0 failed), 2 finished before" in stdout
    pd.testing.assert_frame_equal(_results(out), clean_table, check_exact=True)
    assert list(_results(out)["value"]) == [v * 8 for v in VALUES]
    # the recomputed part is good: the next run warns about nothing and runs nothing
    code, stdout, stderr = _cli(path, out, capsys)
    assert (code, stderr) == (0, "")
    assert "ran 0 point(s) (0 failed), 3 finished before" in stdout


def test_a_second_bad_part_of_the_same_name_keeps_the_first(clean, tmp_path, capsys):
    path, out, _, good = clean
    for content in (b"first", b"second"):
        good.write_bytes(content)
        assert _cli(path, out, capsys)[0] == 0
    bad = out / "parts" / ".bad"
    assert (bad / good.name).read_bytes() == b"first"
    assert (bad / f"{good.name}.1").read_bytes() == b"second"


def test_a_bad_ok_part_falls_back_to_a_good_error_part(tmp_path, capsys):
    path = write_study(tmp_path, command="probe", axes={"grid": {"training.micro_batch": [3]}})
    out = tmp_path / "out"
    assert _cli(path, out, capsys)[0] == 1                      # probe refuses 3
    error_part = next((out / "parts").glob("*.error.parquet"))
    ok_part = error_part.with_name(error_part.name.replace(".error.", ".ok."))
    ok_part.write_bytes(b"")
    code, stdout, stderr = _cli(path, out, capsys)
    assert code == 1 and stderr.count("clustersim: warning:") == 1
    assert "ran 1 point(s) (1 failed), 0 finished before" in stdout   # an error is retried


def test_parts_of_points_the_study_no_longer_has_are_left_alone(clean, tmp_path, capsys):
    path, out, clean_table, _ = clean
    stray = out / "parts" / part_name("f" * 16, "ok")
    stray.write_text("not read")
    code, stdout, stderr = _cli(path, out, capsys)
    assert (code, stderr) == (0, "")
    assert stray.read_text() == "not read"
    pd.testing.assert_frame_equal(_results(out), clean_table, check_exact=True)


def test_fresh_keeps_the_parts_set_aside(clean, capsys):
    path, out, _, good = clean
    good.write_bytes(b"")
    assert _cli(path, out, capsys)[0] == 0
    assert _cli(path, out, capsys, "--fresh")[0] == 0
    assert (out / "parts" / ".bad" / good.name).read_bytes() == b""
    assert len(finished_parts(out)) == 3


# ------------------------------------------------------------------ writing a part
def test_a_part_is_stamped_and_read_back_as_written(tmp_path):
    frame = pd.DataFrame([{"point": "p1", "index": 0, "status": "ok", "error": "",
                           "value": 8, "wall_s": 0.5, "worker": "here:1"}])
    path = tmp_path / part_name("p1", "ok")
    write_part(path, frame, "p1", "ok")
    stamp = json.loads(pq.read_schema(path).metadata[STAMP_KEY])
    assert stamp == {"version": PART_VERSION, "point": "p1", "status": "ok"}
    pd.testing.assert_frame_equal(read_part(path, "p1", "ok", ("value",)), frame)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]    # no temporary file left


def test_a_write_killed_half_way_is_never_taken_for_a_part(clean, tmp_path, capsys):
    """What a killed write leaves is its temporary file: not a part, removed by the next
    run, and its point runs again."""
    path, out, clean_table, good = clean
    half = good.read_bytes()[: good.stat().st_size // 2]
    good.unlink()
    tmp = good.with_name(f".{good.name}.0123abcd.tmp")
    tmp.write_bytes(half)
    assert finished_parts(out).get(good.name.split(".")[0]) is None
    code, stdout, stderr = _cli(path, out, capsys)
    assert (code, stderr) == (0, "") and "ran 1 point(s)" in stdout
    assert not tmp.exists()
    pd.testing.assert_frame_equal(_results(out), clean_table, check_exact=True)


# ------------------------------------------------------------------ one run at a time
def test_a_second_run_on_the_same_folder_is_refused_until_the_first_ends(tmp_path, capsys):
    n = 40
    path = write_study(tmp_path, command="slow",
                       axes={"grid": {"training.micro_batch": list(range(1, n + 1))}})
    out = tmp_path / "out"
    proc = start_study(path, out, workers=1, parts=1)
    try:
        assert finished_parts(out), "the first run must have started"
        rc, stdout, stderr = _cli(path, out, capsys)
        assert rc == 2 and len(finished_parts(out)) < n
        assert stderr == (f"clustersim: error: {out}: --out: is in use by another clustersim "
                          f"study (pid {proc.pid}); wait for it to end, or choose another "
                          f"--out\n")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    # kill -9 released the lock: the next run resumes
    rc, stdout, stderr = _cli(path, out, capsys, workers=2)
    assert rc == 0 and stderr == ""
    assert sorted(pd.read_parquet(out / "results.parquet")["value"]) == list(range(1, n + 1))
