"""Nothing a user keeps is written over (issue 21, item 4): every command that writes to a
path the user names goes through :mod:`simulator.outpaths`, which refuses a foreign
non-empty folder, an existing file without --overwrite, and a symbolic link to nothing
(main wrote through it and created whatever it pointed at; with --overwrite the link itself
is now replaced: tests/test_safe_writes.py)."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.outpaths import MARK, prepare_out_dir, writable_file
from test_cli import run_main


@pytest.fixture
def dangling(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "nowhere.json")
    return link


@pytest.fixture
def foreign(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "report.md").write_text("my notes\n")
    return folder


def test_writable_file_refuses_existing_files_links_and_folders(tmp_path, dangling):
    assert writable_file(tmp_path / "new.json") == tmp_path / "new.json"
    (tmp_path / "old.json").write_text("{}")
    with pytest.raises(ConfigError, match="file exists; refusing to overwrite it"):
        writable_file(tmp_path / "old.json", option="-o")
    assert writable_file(tmp_path / "old.json", overwrite=True)
    with pytest.raises(ConfigError, match="symbolic link to a missing file"):
        writable_file(dangling)
    assert writable_file(dangling, overwrite=True) == dangling
    with pytest.raises(ConfigError, match="is a folder"):
        writable_file(tmp_path, overwrite=True)


def test_prepare_out_dir_refuses_a_link_to_nothing_and_a_foreign_folder(tmp_path, foreign):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(ConfigError, match="symbolic link to a missing folder"):
        prepare_out_dir(link)
    assert not (tmp_path / "gone").exists()
    with pytest.raises(ConfigError, match="not empty and was not written by clustersim"):
        prepare_out_dir(foreign)
    ours = prepare_out_dir(tmp_path / "new")
    assert (ours / MARK).is_file() and prepare_out_dir(ours) == ours


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_trace_refuses_a_dangling_link_unless_overwrite(capsys, dangling, tmp_path):
    code, _, err = run_main(capsys, "trace", "-o", str(dangling))
    assert code == 2
    assert "symbolic link to a missing file" in _one_line(err) and str(dangling) in err
    assert not (tmp_path / "nowhere.json").exists()       # main wrote 216 kB there
    code, _, err = run_main(capsys, "trace", "-o", str(dangling), "--overwrite")
    assert code == 0, err
    assert not (tmp_path / "nowhere.json").exists()       # the link is replaced (issue 42)
    assert not dangling.is_symlink() and dangling.stat().st_size > 0


def test_import_refuses_a_dangling_link(capsys, dangling):
    code, _, err = run_main(capsys, "import", "pytorch", "x.json", "-o", str(dangling))
    assert code == 2 and "symbolic link to a missing file" in _one_line(err)


@pytest.mark.parametrize("command", [
    ("validate", "traces"), ("validate", "collectives", "--split", "validation"),
    ("validate", "training"), ("validate", "gpu"), ("validate", "captured"),
    ("run",), ("reliability", "--trials", "1"), ("compare",)])
def test_every_out_folder_refuses_a_foreign_non_empty_folder(capsys, foreign, command):
    # main replaced report.md in such a folder for validate collectives and traces.
    code, _, err = run_main(capsys, *command, "--out", str(foreign))
    assert code == 2
    assert "not empty and was not written by clustersim" in _one_line(err)
    assert (foreign / "report.md").read_text() == "my notes\n"
    assert sorted(p.name for p in foreign.iterdir()) == ["report.md"]


def test_study_out_refuses_a_foreign_non_empty_folder(capsys, foreign, tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text("name: s\ncommand: run\nbase: {scenario: quickstart}\n"
                     "axes: {grid: {training.seq_len: [512]}}\n")
    code, _, err = run_main(capsys, "study", str(study), "--out", str(foreign))
    assert code == 2 and "not empty and was not written by clustersim" in err
    assert sorted(p.name for p in foreign.iterdir()) == ["report.md"]


def test_validate_all_out_file_needs_overwrite(capsys, tmp_path, dangling):
    report = tmp_path / "REPORT.md"
    report.write_text("mine\n")
    code, _, err = run_main(capsys, "validate", "all", "--only", "captured", "--out",
                            str(report))
    assert code == 2 and "refusing to overwrite" in _one_line(err)
    assert report.read_text() == "mine\n"
    code, _, err = run_main(capsys, "validate", "all", "--only", "captured", "--out",
                            str(dangling))
    assert code == 2 and "symbolic link to a missing file" in _one_line(err)


@pytest.mark.parametrize("suite,option", [("collectives", "--write-calibration"),
                                          ("training", "--write-fitted")])
def test_write_calibration_and_fitted_refuse_a_dangling_link(capsys, dangling, suite, option):
    code, _, err = run_main(capsys, "validate", suite, "--calibrate", option, str(dangling))
    assert code == 2 and "symbolic link to a missing file" in _one_line(err)
    assert option in err
