"""Validation cases recorded as known misses, and the status and exit code they lead to.

``validation/known_misses.yaml`` maps a case id (``captured/replay/<run>``,
``training/<case>``...) to why it misses its bound. A miss is never silently passed:

* ``pass``: within its bound; ``not gated``: reported only (calibration split, goals);
* ``known miss``: out of bound and recorded, listed with its number and reason;
* ``FAIL``: out of bound and not recorded (a regression, or a new case);
* ``XPASS``: recorded but now within bound: the record is stale and must go (as a strict
  xfail).

Exit code of ``clustersim validate``: 0 when every gated case passes, 3 when the only cases
out of bound are known misses, 1 on any FAIL or XPASS (2 stays the usage-error code).
"""

from __future__ import annotations

from pathlib import Path

from simulator.errors import ConfigError
from simulator.validation.paths import DATA
from simulator.yamlio import read_yaml

FILE = DATA / "known_misses.yaml"
EXIT_OK, EXIT_FAIL, EXIT_KNOWN = 0, 1, 3


def load(path: Path | None = None) -> dict[str, str]:
    """{case id: reason}.

    :raises ConfigError: a malformed file.
    """
    path = Path(path) if path is not None else FILE
    if not path.is_file():
        return {}
    data = read_yaml(path, "known misses") or {}
    misses = data.get("misses", {}) if isinstance(data, dict) else None
    if not isinstance(misses, dict) or not all(isinstance(v, str) and v.strip()
                                               for v in misses.values()):
        raise ConfigError("expected 'misses: {case id: reason}' with a reason for each",
                          source=str(path))
    return {str(k): " ".join(v.split()) for k, v in misses.items()}


def status(case: str, ok: bool | None, known: dict[str, str]) -> str:
    """The status of one case (see the module doc)."""
    if ok is None:
        return "not gated"
    if ok:
        return "XPASS" if case in known else "pass"
    return "known miss" if case in known else "FAIL"


def with_status(df, known: dict[str, str] | None = None):
    """``df`` (columns ``case``, ``ok``: True, False or None/NaN when not gated) with
    ``status`` and ``reason`` columns added (a copy); ``known`` defaults to :func:`load`."""
    known = load() if known is None else known
    df = df.copy()
    df["status"] = [status(c, None if ok is None or ok != ok else bool(ok), known)
                    for c, ok in zip(df.case, df.ok)]
    df["reason"] = [known.get(c, "") for c in df.case]
    return df


def exit_code(statuses) -> int:
    statuses = list(statuses)
    if any(s in ("FAIL", "XPASS") for s in statuses):
        return EXIT_FAIL
    return EXIT_KNOWN if "known miss" in statuses else EXIT_OK


__all__ = ["EXIT_FAIL", "EXIT_KNOWN", "EXIT_OK", "FILE", "exit_code", "load", "status",
           "with_status"]
