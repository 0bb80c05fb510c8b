"""Writes that cannot be redirected or lost (issue 42): every output file is written to a
hidden temporary file beside it and renamed into place (:mod:`simulator.outpaths`), so

* a symbolic link where an output was is replaced, never written through: after a normal
  ``--out`` run, replacing the outputs by links to a user's files and running again changed
  the user's files (main: ``run`` 11 of 11, ``reliability`` 9/9, ``compare`` 7/7, ``plan``
  4/4; ``study --fresh`` wrote its parts into a linked ``parts/`` and deleted what was there);
* a write that fails or is killed leaves the previous file as it was (main: ``trace -o
  good.json --overwrite`` killed as it starts writing left ``good.json`` at 0 bytes) and no
  temporary file;
* a name a study file spells (``plots[].file``) stays inside ``--out``: main wrote
  ``../../x`` and absolute paths outside it, and a missing folder was a traceback.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
from pathlib import Path

import pandas as pd
import pytest

from simulator.errors import ConfigError
from simulator.outpaths import (atomic_write_text, atomic_writer, confined, real_folder,
                                save_figure)
from study_helpers import register, write_study
from test_cli import run_main
from test_importers import A100

SMALL = ["--set", "training.seq_len=1024", "--set", "training.micro_batch=1"]
TINY = [*SMALL, "--set", "model=gpt2-small", "--set", "cluster.gpus=4"]
RELIABILITY = {
    "name": "rel-small", "model": "llama-2-7b",
    "cluster": {"topology": "dgx-a100-superpod", "nodes": 16},
    "strategy": {"name": "fsdp"},
    "reliability": {"job": {"duration": "10 d", "iteration_time": "5 s"},
                    "failures": {"software": {"rate": "2 per day"}},
                    "checkpoint": {"interval": "20 min"}, "search": {"points": 3}},
}


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


def _temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob(".*.tmp")]


def hijack(out: Path, users: Path) -> dict[Path, str]:
    """Replace every file under ``out`` by a symbolic link to a user's file of its own
    (``users/f<n>``, holding ``mine <n>``); returns each user file and its content."""
    users.mkdir()
    owned = {}
    for n, path in enumerate(sorted(p for p in out.rglob("*") if p.is_file())):
        mine = users / f"f{n}"
        mine.write_text(f"mine {n}\n")
        path.unlink()
        path.symlink_to(mine)
        owned[mine] = f"mine {n}\n"
    assert len(owned) >= 2
    return owned


def assert_untouched(owned: dict[Path, str], out: Path) -> None:
    changed = [p.name for p, text in owned.items() if p.read_text() != text]
    assert changed == [], f"{len(changed)} of {len(owned)} user files written through links"
    links = [str(p.relative_to(out)) for p in out.rglob("*") if p.is_symlink()]
    assert links == [], "outputs left as links"


# ----------------------------------------------------------------------------- unit
def test_a_link_at_the_name_is_replaced_not_followed(tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_text("mine\n")
    out = tmp_path / "out.json"
    out.symlink_to(mine)
    atomic_write_text(out, "{}\n")
    assert mine.read_text() == "mine\n"
    assert not out.is_symlink() and out.read_text() == "{}\n"


def test_a_write_killed_mid_way_leaves_the_previous_file_and_no_temporary(tmp_path):
    path = tmp_path / "good.csv"
    path.write_text("the previous good file\n")
    with pytest.raises(KeyboardInterrupt):
        with atomic_writer(path, text=True) as f:
            f.write("half of the new")
            f.flush()
            raise KeyboardInterrupt
    assert path.read_text() == "the previous good file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.csv"]


def test_a_written_file_has_a_new_files_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644


def test_a_folder_where_a_file_goes_is_one_line(tmp_path):
    (tmp_path / "summary.json").mkdir()
    with pytest.raises(ConfigError, match="is a folder where clustersim writes a file"):
        atomic_write_text(tmp_path / "summary.json", "{}")
    assert _temporaries(tmp_path) == []


def test_a_figure_is_saved_in_its_suffixs_format(tmp_path):
    import matplotlib.pyplot as plt
    fig, _ = plt.subplots()
    save_figure(fig, tmp_path / "a.png", dpi=20)
    save_figure(fig, tmp_path / "a.svg")
    plt.close(fig)
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (tmp_path / "a.svg").read_bytes()[:400]


@pytest.mark.parametrize("name,why", [
    ("../../x.png", "'..' is not allowed"),
    ("a/../../x.png", "'..' is not allowed"),
    ("/tmp/x.png", "not an absolute path"),
    ("sub/x.png", "folder 'sub' does not exist in the output folder"),
    ("link/x.png", "folder 'link' in the output folder is a symbolic link"),
    ("", "must name a file"),
    ("real/", "must name a file"),
])
def test_confined_refuses_names_that_leave_the_folder(tmp_path, name, why):
    out = tmp_path / "out"
    (out / "real").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (out / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError) as info:
        confined(out, name, "plots[0].file", "s.yaml")
    assert str(info.value).startswith("s.yaml: plots[0].file: ") and why in str(info.value)
    assert confined(out, "real/x.png", "f", "s") == out / "real" / "x.png"
    assert confined(out, "./x.png", "f", "s") == out / "x.png"


def test_real_folder_replaces_a_link_and_refuses_a_file(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("keep\n")
    (tmp_path / "parts").symlink_to(theirs)
    folder = real_folder(tmp_path / "parts")
    assert folder.is_dir() and not folder.is_symlink() and list(folder.iterdir()) == []
    assert (theirs / "keep.txt").read_text() == "keep\n"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file where clustersim keeps a folder"):
        real_folder(tmp_path / "file")


# --------------------------------------------------------------- every --out command
def _study(tmp_path: Path) -> str:
    register()
    return str(write_study(tmp_path, "tiny", command="probe",
                           axes={"grid": {"training.micro_batch": [1, 2]}},
                           plots=[{"kind": "line", "x": "training.micro_batch",
                                   "y": "value", "file": "value"}]))


def _reliability(tmp_path: Path) -> str:
    import yaml
    path = tmp_path / "rel.yaml"
    path.write_text(yaml.safe_dump(RELIABILITY))
    return str(path)


COMMANDS = {
    "run": lambda tmp, capsys: ["run", *SMALL, "-q"],
    "compare": lambda tmp, capsys: ["compare", *TINY, "--strategies", "fsdp-full,ddp",
                            "--no-capacity", "--no-scaling", "--price-per-gpu-hour", "2",
                            "-q"],
    "reliability": lambda tmp, capsys: ["reliability", _reliability(tmp), "--trials", "4",
                                "--workers", "1", "-q"],
    "plan": lambda tmp, capsys: ["plan", *SMALL[:2], "--global-batch", "16", "--replay", "1",
                         "--max-tp", "2", "--max-pp", "1", "--max-micro-batch", "2", "-q"],
    "study": lambda tmp, capsys: ["study", _study(tmp), "--workers", "1", "--no-progress"],
    "replay": lambda tmp, capsys: ["replay", _imported(tmp, capsys)],
}


def _imported(tmp_path: Path, capsys) -> str:
    trace = tmp_path / "a100.json.gz"
    if not trace.exists():
        assert run_main(capsys, "import", "pytorch", str(A100), "-o", str(trace))[0] == 0
    return str(trace)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_rerunning_into_outputs_replaced_by_links_leaves_the_users_files(capsys, tmp_path,
                                                                         name):
    args, out = COMMANDS[name](tmp_path, capsys), tmp_path / "out"
    code, _, err = run_main(capsys, *args, "--out", str(out))
    assert code == 0, err
    owned = hijack(out, tmp_path / "user")
    again = ["--fresh"] if name == "study" else []
    code, _, err = run_main(capsys, *args, "--out", str(out), *again)
    assert code == 0, err
    assert_untouched(owned, out)
    assert _temporaries(out) == []


def test_study_fresh_replaces_a_linked_parts_folder(capsys, tmp_path):
    args, out = COMMANDS["study"](tmp_path, capsys), tmp_path / "out"
    assert run_main(capsys, *args, "--out", str(out))[0] == 0
    theirs = tmp_path / "theirs"
    (out / "parts").rename(theirs)                  # the parts, now a user's folder
    (theirs / "notes.txt").write_text("mine\n")
    (out / "parts").symlink_to(theirs)
    kept = {p.name: p.read_bytes() for p in theirs.iterdir()}
    code, _, err = run_main(capsys, *args, "--out", str(out), "--fresh")
    assert code == 0, err
    assert {p.name: p.read_bytes() for p in theirs.iterdir()} == kept   # main deleted them
    parts = out / "parts"
    assert parts.is_dir() and not parts.is_symlink()
    assert len(list(parts.glob("*.ok.parquet"))) == 2


def test_study_lock_file_that_is_a_link_is_replaced(capsys, tmp_path):
    args, out = COMMANDS["study"](tmp_path, capsys), tmp_path / "out"
    assert run_main(capsys, *args, "--out", str(out))[0] == 0
    mine = tmp_path / "mine.txt"
    mine.write_text("mine\n")
    (out / ".study.lock").unlink()
    (out / ".study.lock").symlink_to(mine)
    assert run_main(capsys, *args, "--out", str(out))[0] == 0
    assert mine.read_text() == "mine\n"                 # main truncated it to a pid
    assert not (out / ".study.lock").is_symlink()


# ------------------------------------------------------------------- trace / import -o
@pytest.mark.parametrize("command", [
    lambda tmp, capsys: ["trace", "--set", "model=gpt2-small", *SMALL],
    lambda tmp, capsys: ["import", "pytorch", str(A100)],
], ids=["trace", "import"])
def test_overwrite_replaces_a_link_and_not_the_file_it_points_to(capsys, tmp_path, command):
    mine = tmp_path / "mine.json"
    mine.write_text("my file\n")
    out = tmp_path / "out.json"
    out.symlink_to(mine)
    code, _, err = run_main(capsys, *command(tmp_path, capsys), "-o", str(out), "--overwrite")
    assert code == 0, err
    assert mine.read_text() == "my file\n"
    assert not out.is_symlink() and json.loads(out.read_text())["format"] == \
        "clustersim-trace"


def test_trace_chakra_overwrite_replaces_links(capsys, tmp_path):
    args = ["trace", "--set", "model=gpt2-small", *SMALL, "--set", "cluster.gpus=2",
            "--format", "chakra", "-o", str(tmp_path / "t")]
    assert run_main(capsys, *args)[0] == 0
    owned = hijack(tmp_path, tmp_path / "user")
    assert run_main(capsys, *args, "--overwrite")[0] == 0
    assert all(p.read_text() == text for p, text in owned.items())
    assert all(not p.is_symlink() for p in tmp_path.glob("t.*.et"))


def _half_then_killed(real):
    """``real`` (a writer method taking the data first) made to write half of its data,
    then be killed."""
    def write(self, data):
        real(self, data[: len(data) // 2])
        raise KeyboardInterrupt
    return write


def test_a_killed_trace_write_keeps_the_previous_trace(capsys, tmp_path, monkeypatch):
    good = tmp_path / "good.json.gz"
    args = ["trace", "--set", "model=gpt2-small", *SMALL, "-o", str(good)]
    assert run_main(capsys, *args)[0] == 0
    before = good.read_bytes()
    monkeypatch.setattr(gzip.GzipFile, "write", _half_then_killed(gzip.GzipFile.write))
    code, _, err = run_main(capsys, *args, "--overwrite")
    assert code == 130 and "interrupted" in _one_line(err)
    assert good.read_bytes() == before                   # main: a truncated file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.json.gz"]


def test_a_killed_run_out_write_keeps_the_previous_outputs(capsys, tmp_path, monkeypatch):
    out = tmp_path / "out"
    args = ["run", *SMALL, "-q", "--out", str(out)]
    assert run_main(capsys, *args)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = pd.DataFrame.to_csv

    def killed(self, path_or_buf=None, **kw):          # the serialiser dies half-way
        text = real(self, None, **kw)
        if isinstance(path_or_buf, (str, Path)):
            path_or_buf = open(path_or_buf, "w")
        path_or_buf.write(text[: len(text) // 2])
        path_or_buf.flush()
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", killed)
    code, _, err = run_main(capsys, *args)
    assert code == 130, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# --------------------------------------------------------------- study plots[].file
@pytest.mark.parametrize("file,why", [
    ("../../x", "'..' is not allowed (got '../../x')"),
    ("ABSOLUTE", "not an absolute path"),
    ("sub/x.png", "folder 'sub' does not exist in the output folder"),
])
def test_a_study_plot_file_outside_out_is_one_line_and_nothing_is_written(
        capsys, tmp_path, file, why):
    register()
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    file = str(tmp_path / "x") if file == "ABSOLUTE" else file
    study = write_study(work, "tiny", command="probe",
                        axes={"grid": {"training.micro_batch": [1]}},
                        plots=[{"kind": "line", "x": "training.micro_batch", "y": "value",
                                "file": file}])
    before = sorted(tmp_path.rglob("*"))
    code, _, err = run_main(capsys, "study", str(study), "--out", str(work / "out"),
                            "--no-progress")
    assert code == 2
    line = _one_line(err)
    assert f"{study}: plots[0].file: " in line and why in line, line
    assert sorted(tmp_path.rglob("*")) == before            # main wrote tmp_path/x.png


def test_two_plots_with_one_file_are_refused(capsys, tmp_path):
    register()
    plot = {"kind": "line", "x": "training.micro_batch", "y": "value", "file": "v"}
    study = write_study(tmp_path, "tiny", command="probe",
                        axes={"grid": {"training.micro_batch": [1]}},
                        plots=[plot, {**plot, "file": "v.png"}])
    code, _, err = run_main(capsys, "study", str(study), "--out", str(tmp_path / "o"))
    assert code == 2 and "plots[1].file: 'v.png' is also plots[0]'s file" in _one_line(err)
