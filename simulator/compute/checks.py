"""Checks of ``compute.yaml`` values: keys, fractions, times, sources (ConfigError naming
the file and the dotted field)."""

from __future__ import annotations

import math
from typing import Any

from simulator.errors import ConfigError
from simulator.units import UnitError, parse_time

def check_keys(entry: Any, allowed: set, required: set, src: str, where: str | None) -> None:
    if not isinstance(entry, dict):
        raise ConfigError("must be a mapping", source=src, field=where)
    unknown = sorted(map(str, set(entry) - allowed))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)}; valid: "
                          f"{', '.join(sorted(allowed))}", source=src, field=where)
    missing = sorted(required - set(entry))
    if missing:
        raise ConfigError(f"missing key(s) {', '.join(missing)}", source=src, field=where)


def check_fraction(value: Any, src: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 < value <= 1:
        raise ConfigError(f"must be a number in (0, 1], got {value!r}", source=src, field=where)
    return float(value)


def check_time(value: Any, src: str, where: str) -> float:
    try:
        seconds = parse_time(value)
    except UnitError as exc:
        raise ConfigError(str(exc), source=src, field=where) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"must be >= 0, got {value!r}", source=src, field=where)
    return seconds


def check_source(value: Any, src: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("source must be a non-empty string", source=src,
                          field=f"{where}.source")
    return value.strip()
