"""Unit parsing at the boundary: YAML and the command line carry units, the code does not.

Inside the simulator every quantity is a float in SI base units with the unit in its name:
``*_s`` seconds, ``*_bytes`` bytes, ``*_bytes_per_s`` bytes per second, ``*_flops``.
Strings such as ``"200 Gb/s"``, ``"600 GB/s"``, ``"1.5 us"`` or ``"64K"`` are converted here,
and a number without a unit is refused where a unit is required.
"""

from __future__ import annotations

import re

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"

# Decimal prefixes for rates (networking convention: 1 Gb/s = 1e9 bit/s).
_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
# Binary prefixes for sizes, as nccl-tests uses them (-b 8 -e 8G means 8 GiB).
_BINARY = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "ps": 1e-12,
         "min": 60.0, "h": 3600.0}

_BW_RE = re.compile(rf"^\s*{_NUMBER}\s*([kKMGTP]?)(b|B|bit|byte)(?:/s|ps)\s*$")
_TIME_RE = re.compile(rf"^\s*{_NUMBER}\s*(s|ms|us|µs|ns|ps|min|h)\s*$")
_SIZE_RE = re.compile(rf"^\s*{_NUMBER}\s*([KMGT]?)(?:i?B)?\s*$")
_FLOPS_RE = re.compile(rf"^\s*{_NUMBER}\s*([kKMGTP]?)FLOP/?s\s*$", re.IGNORECASE)


class UnitError(ValueError):
    """A value is missing its unit or has one that cannot be read."""


def parse_bandwidth(text: str | float | int) -> float:
    """Return bytes per second from ``"200 Gb/s"`` (bits) or ``"600 GB/s"`` (bytes).

    :raises UnitError: for a bare number or an unknown unit.
    """
    if not isinstance(text, str):
        raise UnitError(f"bandwidth {text!r} needs a unit, e.g. '200 Gb/s' or '25 GB/s'")
    m = _BW_RE.match(text)
    if not m:
        raise UnitError(f"cannot read bandwidth {text!r}; write e.g. '200 Gb/s' or '25 GB/s'")
    value, prefix, unit = float(m.group(1)), m.group(2), m.group(3)
    factor = _DECIMAL[prefix]
    per_bit = unit in ("b", "bit")
    return value * factor / 8.0 if per_bit else value * factor


def parse_time(text: str | float | int) -> float:
    """Return seconds from ``"1.5 us"``, ``"10 ms"``, ``"2 h"``.

    :raises UnitError: for a bare number or an unknown unit.
    """
    if not isinstance(text, str):
        raise UnitError(f"time {text!r} needs a unit, e.g. '1.5 us' or '10 ms'")
    m = _TIME_RE.match(text)
    if not m:
        raise UnitError(f"cannot read time {text!r}; write e.g. '1.5 us' or '10 ms'")
    return float(m.group(1)) * _TIME[m.group(2)]


def parse_size(text: str | int) -> int:
    """Return bytes from ``8``, ``"64K"``, ``"1M"``, ``"8G"``, ``"4 GiB"`` (binary prefixes).

    A bare integer is a byte count, as in nccl-tests.

    :raises UnitError: for an unreadable or fractional byte count.
    """
    if isinstance(text, bool):
        raise UnitError(f"cannot read size {text!r}")
    if isinstance(text, int):
        return text
    if isinstance(text, float):
        if text.is_integer():
            return int(text)
        raise UnitError(f"size {text!r} is not a whole number of bytes")
    m = _SIZE_RE.match(str(text))
    if not m:
        raise UnitError(f"cannot read size {text!r}; write e.g. 8, 64K, 1M or 8G")
    value = float(m.group(1)) * _BINARY[m.group(2)]
    if not value.is_integer():
        raise UnitError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def parse_flops(text: str | float | int) -> float:
    """Return FLOP/s from ``"312 TFLOP/s"``.

    :raises UnitError: for a bare number or an unknown unit.
    """
    if not isinstance(text, str):
        raise UnitError(f"compute rate {text!r} needs a unit, e.g. '312 TFLOP/s'")
    m = _FLOPS_RE.match(text)
    if not m:
        raise UnitError(f"cannot read compute rate {text!r}; write e.g. '312 TFLOP/s'")
    return float(m.group(1)) * _DECIMAL[m.group(2)]


def format_size(size_bytes: int) -> str:
    """``1048576 -> '1M'``: the shortest exact binary-prefixed form."""
    for suffix, factor in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size_bytes >= factor and size_bytes % factor == 0:
            return f"{size_bytes // factor}{suffix}"
    return str(size_bytes)
