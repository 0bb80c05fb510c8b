"""`run`'s one long step (issue 47: a 16 s run printed one static line): on a terminal a
single line that counts its seconds in place and is erased at the end, nothing for a step
quicker than a second; off a terminal one line; nothing with --quiet."""

from __future__ import annotations

import io
import time

from simulator import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def on_a_terminal(monkeypatch, tick_s: float, seconds: float) -> str:
    """What a ticking step of ``seconds`` writes to a terminal (patched inside the test:
    pytest sets its own sys.stderr again between a fixture and the test)."""
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    monkeypatch.setattr(progress, "TICK_S", tick_s)
    progress.configure(True)
    try:
        with progress.ticking("run: simulating one iteration on 8 GPUs"):
            time.sleep(seconds)
    finally:
        progress.configure(False)
        monkeypatch.undo()
    return tty.getvalue()


def test_a_long_step_is_one_line_rewritten_in_place(monkeypatch):
    text = on_a_terminal(monkeypatch, 0.05, 0.3)
    ticks = text.split("\r")[1:-1]
    assert len(ticks) >= 2 and "\n" not in text            # one line, rewritten
    assert all(t.startswith("clustersim: run: simulating one iteration on 8 GPUs (")
               and t.endswith(" s)") for t in ticks)
    assert text.endswith("\r\033[K")                        # erased before the answer


def test_a_quick_step_shows_nothing(monkeypatch):
    assert on_a_terminal(monkeypatch, 5.0, 0.0) == ""


def test_off_a_terminal_one_line_and_none_when_quiet(capsys):
    progress.configure(True)
    try:
        with progress.ticking("run: x"):
            pass
    finally:
        progress.configure(False)
    assert capsys.readouterr().err == "clustersim: run: x\n"
    with progress.ticking("run: x"):
        pass
    assert capsys.readouterr().err == ""
