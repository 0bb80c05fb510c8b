"""The ``effect`` question: how a metric moves along one axis (per value of another, or
with the other axes pinned), where most of the change is reached, and how the busiest links
respond."""

from __future__ import annotations

import json

import pandas as pd

from .format import at, change, fmt, fmt_axis, groups, label, ordered, pin_axes, sentence
from .spec import EffectQuestion, Study


MAX_CLAUSES = 3


def effect_answer(q: EffectQuestion, ok: pd.DataFrame, study: Study) -> str:
    ok, note = pin_axes(ok, study, {q.axis} | ({q.per} if q.per else set()), q.at)
    curves = [(v, _along(q, rows)) for v, rows in groups(ok, q.per)]
    curves = [(v, rows) for v, rows in curves if len(rows)]
    if not curves:
        return f"No finished point has every other axis at its first value{note}."
    if len(curves) <= MAX_CLAUSES:
        text = "; ".join(_effect_clause(q, rows, study, "" if v is None else
                                        f" {at(study, q.per, v)}")
                         for v, rows in curves)
    else:
        text = _effect_summary(q, curves, study)
    return sentence(text + note)


def _along(q: EffectQuestion, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` in the order of the axis values, one per value."""
    rows = rows.drop_duplicates(q.axis)
    return rows.set_index(q.axis).loc[ordered(rows, q.axis)].reset_index()


def _flat(y: list[float]) -> bool:
    return max(abs(v / y[0] - 1) for v in y) < 0.01 if y[0] else all(v == 0 for v in y)


def _effect_clause(q: EffectQuestion, rows: pd.DataFrame, study: Study, where: str) -> str:
    values, y = list(rows[q.axis]), rows[q.metric].astype(float).tolist()
    name, axis = label(study, q.metric), label(study, q.axis)
    first, last = fmt_axis(values[0]), fmt_axis(values[-1])
    if len(values) < 2:
        return f"{name} is {fmt(q.metric, y[0])}{where} (one value of {axis} finished)"
    if _flat(y):
        text = (f"{name} does not depend on {axis}{where}: it stays at "
                f"{fmt(q.metric, y[0])} (within 1%) from {first} to {last}")
    else:
        text = (f"{name} goes from {fmt(q.metric, y[0])} at {axis} {first} to "
                f"{fmt(q.metric, y[-1])} at {last}{where} ({change(y[0], y[-1], q.metric)})")
        reached = [i for i, v in enumerate(y) if abs(v - y[0]) >= 0.9 * abs(y[-1] - y[0])]
        if len(values) > 2 and reached and reached[0] < len(values) - 1:
            text += f", 90% of that change already at {fmt_axis(values[reached[0]])}"
    return text + _links_change(rows)


def _effect_summary(q: EffectQuestion, curves: list, study: Study) -> str:
    """One clause for many ``per`` groups: the largest and smallest change."""
    name, axis, per = label(study, q.metric), label(study, q.axis), label(study, q.per)
    rows0 = curves[0][1]
    first, last = fmt_axis(rows0[q.axis].iloc[0]), fmt_axis(rows0[q.axis].iloc[-1])
    per_values = [fmt_axis(v) for v, _ in curves]

    def rel(rows):
        y = rows[q.metric].astype(float).tolist()
        return max((abs(v / y[0] - 1) for v in y), default=0.0) if y[0] else float("inf")
    ranked = sorted(curves, key=lambda c: rel(c[1]), reverse=True)
    (vmax, big), (vmin, small) = ranked[0], ranked[-1]
    span = f"{per} from {per_values[0]} to {per_values[-1]}"
    if all(_flat(c[1][q.metric].astype(float).tolist()) for c in curves):
        return (f"{name} does not depend on {axis} at any {span}: from {first} to {last} "
                f"it moves by at most {rel(big):.1%} (at {per} {fmt_axis(vmax)})"
                + _links_change(big))

    def moved(v, rows):
        y0, y1 = rows[q.metric].iloc[0], rows[q.metric].iloc[-1]
        return (f"{change(y0, y1, q.metric)} at {per} {fmt_axis(v)} ({fmt(q.metric, y0)} to "
                f"{fmt(q.metric, y1)})")
    return (f"going from {axis} {first} to {last} changes {name} by {moved(vmax, big)} and "
            f"by {moved(vmin, small)}, the extremes over {span}" + _links_change(big))


def _links_change(rows: pd.DataFrame) -> str:
    """The busiest links at both ends of ``rows``, and the link role whose utilisation
    the axis changes most when that is another one."""
    if "busiest_link" not in rows or not rows["busiest_link"].iloc[0]:
        return ""
    a, b = rows.iloc[0], rows.iloc[-1]
    if a["busiest_link"] == b["busiest_link"]:
        text = (f"; the busiest links stay the {a['busiest_link']} "
                f"({a['busiest_link_util']:.0%} then {b['busiest_link_util']:.0%} busy "
                f"while communicating)")
    else:
        text = (f"; the busiest links move from the {a['busiest_link']} "
                f"({a['busiest_link_util']:.0%} busy while communicating) to the "
                f"{b['busiest_link']} ({b['busiest_link_util']:.0%})")
    ua = json.loads(a.get("link_util_by_role") or "{}")
    ub = json.loads(b.get("link_util_by_role") or "{}")
    role = max(ub, key=lambda r: (abs(ub[r] - ua.get(r, 0.0)), r), default=None)
    if role and role not in (a["busiest_link"], b["busiest_link"]) and \
            abs(ub[role] - ua.get(role, 0.0)) >= 0.01:
        text += (f", while the {role} go from {ua.get(role, 0.0):.0%} to {ub[role]:.0%} "
                 f"busy")
    return text
