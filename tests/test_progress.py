"""Progress on stderr: silent unless the CLI turns it on, one line per stage off a terminal,
nothing with --quiet, never on stdout."""

from __future__ import annotations

import pytest

from simulator import progress
from test_cli import run_main


@pytest.fixture(autouse=True)
def _off():
    yield
    progress.configure(False)


def test_library_calls_are_silent_by_default(capsys):
    progress.stage("x")
    assert list(progress.track(range(3), 3, "d")) == [0, 1, 2]
    assert capsys.readouterr() == ("", "")


def test_off_a_terminal_a_bar_is_a_line_when_it_starts_and_one_when_it_ends(capsys):
    progress.configure(True)
    assert list(progress.track(["a", "b"], 2, "capacity", "strategy")) == ["a", "b"]
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 2
    assert lines[0] == "clustersim: capacity: 2 strategy(s) to run"
    assert lines[1] == "clustersim: capacity: 2/2 done"


def test_quiet_silences_a_long_command(capsys):
    code, out, err = run_main(capsys, "capacity", "--strategies", "ddp")
    assert code == 0 and "clustersim: capacity: 1/1 done" in err
    code, quiet_out, err = run_main(capsys, "capacity", "--strategies", "ddp", "--quiet")
    assert code == 0 and err == "" and quiet_out == out
