"""Where the validation data live: the repository's ``validation/`` folder, one sub-folder per
suite (``collectives``, ``training``, ``traces``, ``gpu``, ``reliability``)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "validation"


def data_dir(suite: str) -> Path:
    """``validation/<suite>`` of the repository holding ``simulator``."""
    return DATA / suite
