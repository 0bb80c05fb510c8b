"""Progress of long commands on stderr: a tqdm bar when stderr is a terminal, else one line
per stage (logs and CI stay readable), nothing when quiet. A single long step
(:func:`ticking`) is one line that counts its seconds on a terminal, shown only once it has
taken a second (nothing for a quick one), and one line off a terminal.

Library code calls :func:`stage` and :func:`bar`; both are silent until the command line
turns progress on (:func:`configure`; :func:`quiet_option` gives a command ``-q/--quiet``),
so tests and library users see nothing. Progress never
reaches stdout or an output file: results stay byte-identical whatever is shown.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time

import click

_STATE = {"enabled": False}


def configure(enabled: bool) -> None:
    """Turn progress on (the CLI, unless ``--quiet``) or off."""
    _STATE["enabled"] = bool(enabled)


def enabled() -> bool:
    """Whether progress is shown."""
    return _STATE["enabled"]


def stage(message: str) -> None:
    """One line, ``clustersim: MESSAGE``, on stderr (when progress is on)."""
    if _STATE["enabled"]:
        print(f"clustersim: {message}", file=sys.stderr, flush=True)


class _Lines:
    """A bar's stand-in off a terminal: a line when the stage starts and one when it ends
    (no wall time in either: the same run prints the same lines)."""

    def __init__(self, total: int, desc: str, unit: str, quiet: bool = False):
        self.total, self.desc, self.n, self.quiet, self.open = total, desc, 0, quiet, True
        if not quiet:
            stage(f"{desc}: {total} {unit}(s) to run")

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        """Ignored off a terminal (tqdm shows it on one)."""

    def close(self) -> None:
        if self.open and not self.quiet:
            stage(f"{self.desc}: {self.n}/{self.total} done")
        self.open = False


def bar(total: int, desc: str, unit: str = "item", show: bool = True):
    """A progress bar with ``update(n)``, ``set_postfix_str(text)`` and ``close()``: tqdm on
    a terminal, :class:`_Lines` otherwise, a silent one when progress is off or not ``show``."""
    if not (_STATE["enabled"] and show):
        return _Lines(total, desc, unit, quiet=True)
    if not sys.stderr.isatty():
        return _Lines(total, desc, unit)
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True,
                mininterval=0.5, bar_format="{desc}: {n_fmt}/{total_fmt} " + unit +
                "(s) |{bar}| [{elapsed}<{remaining}{postfix}]")


def track(iterable, total: int, desc: str, unit: str = "item"):
    """Yield from ``iterable``, advancing a :func:`bar` per item."""
    b = bar(total, desc, unit)
    try:
        for item in iterable:
            yield item
            b.update()
    finally:
        b.close()


TICK_S = 1.0       # a terminal's ticking line appears after, and updates every, TICK_S


@contextlib.contextmanager
def ticking(message: str):
    """Around one long step: on a terminal a single line ``clustersim: MESSAGE (N s)``
    rewritten in place every second from the first second on and erased at the end (a
    step quicker than a second shows nothing); off a terminal the one :func:`stage` line;
    nothing when progress is off."""
    if not _STATE["enabled"]:
        yield
        return
    if not sys.stderr.isatty():
        stage(message)
        yield
        return
    stream, done, start = sys.stderr, threading.Event(), time.monotonic()
    shown = []

    def tick():
        while not done.wait(TICK_S):
            stream.write(f"\rclustersim: {message} ({time.monotonic() - start:.0f} s)")
            stream.flush()
            shown.append(True)

    thread = threading.Thread(target=tick, name="clustersim-ticking", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if shown:
            stream.write("\r\033[K")          # the line erased: the answer follows
            stream.flush()


def quiet_option(command):
    """Decorate a click command (under ``@cli.command``) with ``-q/--quiet``: progress is on
    while it runs unless ``--quiet`` is given."""
    @click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
    @functools.wraps(command)
    def wrapper(*args, quiet: bool = False, **kwargs):
        configure(not quiet)
        try:
            return command(*args, **kwargs)
        finally:
            configure(False)
    return wrapper
