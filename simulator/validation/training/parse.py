"""Published numbers as the sources print them: ``"7,248 img/s"``, ``"7.72 x"``, ``"128 and
256"`` (a value per precision), parsed for ``measurements.csv``."""

from __future__ import annotations

import math
import re
from typing import Any


def parse_number(text: Any) -> float:
    """A published number as a float: ``"7,248 img/s"`` -> 7248, ``"7.72 x"`` -> 7.72,
    ``317`` -> 317; ``"N/A"``, ``"-"`` or empty -> NaN.

    :raises ValueError: when the text holds no number or more than one.
    """
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return float("nan")
    s = str(text).strip()
    if s in ("", "-", "N/A", "n/a", "NA"):
        return float("nan")
    nums = re.findall(r"[-+]?\d[\d,]*(?:\.\d+)?", s)
    if len(nums) != 1:
        raise ValueError(f"expected one number in {text!r}, found {len(nums)}")
    return float(nums[0].replace(",", ""))


def pair(text: Any) -> tuple[str, str]:
    """``"128 and 256"`` -> ("128", "256") (TF32, AMP); a single value serves both."""
    s = "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)
    parts = [p.strip() for p in re.split(r"\band\b|,", s) if p.strip()]
    if len(parts) == 2:
        return parts[0], parts[1]
    if len(parts) <= 1:
        v = parts[0] if parts else ""
        return v, v
    raise ValueError(f"expected 'A and B', got {text!r}")


__all__ = ["pair", "parse_number"]
