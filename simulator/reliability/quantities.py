"""Units of the reliability section: durations with days, failure rates with their basis.

A duration is ``"10 min"``, ``"24 h"`` or ``"30 d"`` (:func:`simulator.units.parse_time`
plus days). A failure rate names what it counts per: ``"6.5 per 1000 node-days"``,
``"0.3 per 1000 gpu-days"``, ``"1 per 50000 link-hours"``, ``"1.2 per day"`` (the whole job),
``"3 per week"``, ``"2 per month"`` (a month is 365/12 days).
A bare number is refused: a rate without its basis is ambiguous by three orders of magnitude.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from simulator.units import UnitError, parse_time

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_DAY_S = 86400.0
_MONTH_S = 365.0 / 12 * _DAY_S          # a month is a twelfth of the 365-day year
_PERIODS = {"s": 1.0, "min": 60.0, "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
            "d": _DAY_S, "day": _DAY_S, "days": _DAY_S, "week": 7 * _DAY_S,
            "weeks": 7 * _DAY_S, "month": _MONTH_S, "months": _MONTH_S,
            "year": 365.0 * _DAY_S, "years": 365.0 * _DAY_S}
NOUNS = ("node", "gpu", "nic", "link", "switch", "job")
_RATE_RE = re.compile(
    rf"^\s*{_NUMBER}\s*(?:per|/)\s*(?:{_NUMBER}\s*)?(?:({'|'.join(NOUNS)})[- ])?"
    rf"({'|'.join(_PERIODS)})\s*$", re.IGNORECASE)
_DAYS_RE = re.compile(rf"^\s*{_NUMBER}\s*(d|day|days)\s*$")
RATE_EXAMPLE = "'6.5 per 1000 node-days', '0.3 per 1000 gpu-days' or '1.2 per day'"


@dataclass(frozen=True)
class Rate:
    """``per_s`` events per second per unit of ``basis`` (a component noun, or ``job``)."""

    per_s: float
    basis: str
    text: str

    def __str__(self) -> str:
        return self.text


def _text(value, what: str, needs: str) -> None:
    """Refuse a negative value, then anything that is not a string (a bare number)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if (number and value < 0) or (isinstance(value, str) and value.strip().startswith("-")):
        raise UnitError(f"{what} must be >= 0")
    if not isinstance(value, str):
        raise UnitError(f"{what} of {value!r} needs {needs}")


def parse_duration(value) -> float:
    """Seconds from ``"90 s"``, ``"10 min"``, ``"2 h"`` or ``"30 d"``.

    :raises UnitError: for a bare number, a negative value or an unknown unit.
    """
    _text(value, "a duration", "a unit, e.g. '90 s', '10 min' or '30 d'")
    m = _DAYS_RE.match(value)
    if m:
        return _finite(float(m.group(1)) * _DAY_S, value)
    try:
        seconds = parse_time(value)
    except UnitError:
        raise UnitError(f"cannot read duration {value!r}; write e.g. '90 s', '10 min', "
                        f"'24 h' or '30 d'") from None
    return _finite(seconds, value)


def _finite(x: float, text: str) -> float:
    """``x`` if finite: ``1e400 h`` overflows to infinity, which no loop can reach."""
    if not math.isfinite(x):
        raise UnitError(f"{text!r} is past the largest number a float holds")
    return x


def parse_rate(value) -> Rate:
    """A :class:`Rate` from ``"<n> per <m> <noun>-<period>"`` (noun optional: the job).

    :raises UnitError: for a bare number, a negative rate or an unreadable text.
    """
    _text(value, "a failure rate", f"its basis, e.g. {RATE_EXAMPLE}")
    m = _RATE_RE.match(value)
    if not m:
        raise UnitError(f"cannot read rate {value!r}; write e.g. {RATE_EXAMPLE}")
    count, per, noun, period = m.groups()
    per_units = float(per) if per is not None else 1.0
    if per_units <= 0:
        raise UnitError(f"the '{per}' in rate {value!r} must be > 0")
    seconds = _finite(per_units * _PERIODS[period.lower()], value)
    return Rate(_finite(float(count), value) / seconds, (noun or "job").lower(), value.strip())


def format_duration(seconds: float) -> str:
    """``5400 -> '1.50 h'``: seconds, minutes, hours or days, whichever reads best."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * _DAY_S:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / _DAY_S:.2f} d"
