"""Numbers, axis values, column names and the pieces of sentences, as a report writes them."""

from __future__ import annotations

import math
import re

import pandas as pd

from .points import cell
from .spec import Study

LABELS = {
    "gpus": "GPUs", "samples_per_s": "throughput (samples/s)",
    "tokens_per_s": "throughput (tokens/s)", "tokens_per_s_per_gpu": "tokens/s per GPU",
    "iteration_time_s": "iteration time", "exposed_comm_s": "exposed communication",
    "comm_s": "communication time", "mfu": "MFU", "tflops_per_gpu": "TFLOP/s per GPU",
    "peak_memory_gib": "peak memory per GPU", "exposed_comm_share": "exposed communication share",
    "busiest_link": "busiest links", "busiest_link_util": "busiest link busy while communicating",
    "ettr_mean": "ETTR",
}
_FRACTION = re.compile(r"(^|_)(mfu|util|utilization|share|efficiency|ettr|goodput|fraction)($|_)")
_LEADING_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")


def label(study: Study, column: str) -> str:
    """The study's label for ``column``, else a built-in one, else the column name."""
    return study.labels.get(column, LABELS.get(column, column))


def fmt(column: str, value) -> str:
    """A value of ``column`` with its unit: seconds, percentages, GiB or a plain number."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, str):
        return value
    v = float(value)
    if is_fraction(column):
        return f"{v:.1%}"
    if column.endswith("_s") and not column.endswith("_per_s"):
        return duration(v)
    if column.endswith("_gib"):
        return f"{v:.1f} GiB"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def is_fraction(column: str) -> bool:
    """Whether ``column`` holds a fraction (MFU, utilisation, ETTR...), shown in percent."""
    return bool(_FRACTION.search(column))


def duration(seconds: float) -> str:
    """``0.457`` -> ``457 ms``; ``1800`` -> ``30 min``; ``90000`` -> ``25 h``."""
    v = abs(seconds)
    for limit, scale, unit in ((1, 1e-3, "ms"), (120, 1, "s"), (7200, 60, "min"),
                               (172800, 3600, "h")):
        if v < limit:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 86400:,.3g} d"


def fmt_axis(value) -> str:
    """An axis value as written in the study (``4`` rather than ``4.0``)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def numeric(values: pd.Series) -> pd.Series | None:
    """Numbers for axis values: numbers as they are, ``"400 Gb/s"`` as 400; None when a
    value has no leading number."""
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        return values.astype(float)
    out = []
    for v in values:
        m = _LEADING_NUMBER.match(str(v))
        if not m:
            return None
        out.append(float(m.group(1)))
    return pd.Series(out, index=values.index)


def ordered(rows: pd.DataFrame, column: str) -> list:
    """The distinct values of ``column``: ascending when numbers, else in study order."""
    values = list(dict.fromkeys(rows.sort_values("index", kind="stable")[column]))
    if pd.api.types.is_numeric_dtype(rows[column]):
        values.sort()
    return values


def phase(key: str) -> str:
    """``reduce_scatter (backward)`` -> ``reduce-scatter (backward)``."""
    return str(key).replace("_", "-") if key else "communication"


def pin_axes(ok: pd.DataFrame, study: Study, free: set[str],
             at: dict) -> tuple[pd.DataFrame, str]:
    """Rows with every other axis that varies independently of the ``free`` columns at
    ``at`` or its first value in the study, and a note saying so. An axis that the free columns
    determine (``cluster.nodes`` for ``gpus``) is left alone."""
    notes = []
    free_cols = [c for c in free if c in ok]
    for axis in study.axis_keys():
        if axis in free or axis not in ok or ok[axis].nunique() < 2:
            continue
        if free_cols and ok.groupby(free_cols)[axis].nunique().max() < 2:
            continue
        value = cell(at[axis]) if axis in at else ok.sort_values("index")[axis].iloc[0]
        ok = ok[ok[axis] == value]
        notes.append(f"{label(study, axis)} {fmt_axis(value)}")
    return ok, (f" (with {', '.join(notes)})" if notes else "")


# ----------------------------------------------------------------- sentences
TIE = 0.005          # relative difference under which two points count as equal


def change(y0: float, y1: float, column: str = "") -> str:
    """``y0`` to ``y1`` as a relative change, a ratio, or percentage points for fractions."""
    if is_fraction(column):
        return f"{(y1 - y0) * 100:+.1f} points"
    if not y0:
        return "from 0"
    r = y1 / y0
    return f"{r - 1:+.1%}" if 0.5 <= r <= 2 else f"{r:.3g}x"


def sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def at(study: Study, column: str, value, bare: bool = False) -> str:
    """``at 64 GPUs`` / ``at link speed 400 Gb/s`` (without ``at`` when ``bare``)."""
    text = f"{fmt_axis(value)} GPUs" if column == "gpus" else \
        f"{label(study, column)} {fmt_axis(value)}"
    return text if bare else f"at {text}"


def describe_many(rows: pd.DataFrame, columns: list[str], study: Study) -> str:
    """``checkpoint interval 5 min, 20 min and 40 min`` (one column) or each row."""
    parts = ([fmt_axis(v) for v in rows[columns[0]]] if len(columns) == 1
             else [describe(r, columns, study) for _, r in rows.iterrows()])
    text = parts[-1] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"{label(study, columns[0])} {text}" if len(columns) == 1 else text


def describe(row: pd.Series, columns: list[str], study: Study) -> str:
    return ", ".join(f"{label(study, c)} {fmt_axis(row[c])}" for c in columns) or "it"


def groups(ok: pd.DataFrame, per: str | None):
    if not per:
        return [(None, ok)]
    return [(v, ok[ok[per] == v]) for v in ordered(ok, per)]


def num(v):
    return int(v) if float(v).is_integer() else float(v)


def x_text(v, unit: str) -> str:
    text = f"{v:,}" if isinstance(v, int) else f"{v:g}"
    return f"{text} {unit}".strip()
