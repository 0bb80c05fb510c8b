"""Where the validation data live: the repository's ``validation/`` folder, one sub-folder per
suite (``collectives``, ``training``, ``traces``, ``gpu``, ``reliability``...), or, in an
installed wheel, its copy inside the package (``simulator/_shipped/validation``, the data
files only: ``setup.py``).

A checkout's suites rewrite their reports beside their data (the project's own, committed);
from a wheel they go to :data:`WHEEL_REPORTS` in the current folder instead, never into the
installed package (:func:`default_report`)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHECKOUT = REPO / "validation"
PACKAGED = Path(str(resources.files("simulator"))) / "_shipped" / "validation"
MARKER = "known_misses.yaml"                    # in every copy of the data
IN_CHECKOUT = (CHECKOUT / MARKER).is_file()
DATA = CHECKOUT if IN_CHECKOUT else PACKAGED
WHEEL_REPORTS = Path("validation-report")


def data_dir(suite: str) -> Path:
    """``validation/<suite>`` of the repository holding ``simulator`` (or of the wheel)."""
    return DATA / suite


def default_report(default: Path) -> Path:
    """Where a report whose default place is ``default`` goes: there in a checkout; from a
    wheel, a place inside the installed data moves to ``validation-report/`` of the current
    folder (same sub-path)."""
    default = Path(default)
    if IN_CHECKOUT or not default.resolve().is_relative_to(PACKAGED.resolve()):
        return default
    return WHEEL_REPORTS / default.resolve().relative_to(PACKAGED.resolve())
