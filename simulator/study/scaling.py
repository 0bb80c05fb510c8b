"""The ``scaling`` question: speedup and efficiency against the ideal (proportional to
``x``), the doubling step into the knee (the first point whose efficiency, or whose gain
over the point before against linear, is below ``threshold``) and its cause, read from the
knee's row and the row before: which share of the step grew (exposed communication or
waiting), the phase whose exposed time grew most, and the busiest links and how busy they
are while communicating."""

from __future__ import annotations

import json
import math

import pandas as pd

from .format import fmt, label, num, phase, pin_axes, x_text
from .spec import ScalingQuestion, Study


def scaling_curve(ok: pd.DataFrame, x: str, metric: str) -> pd.DataFrame:
    """Rows sorted by ``x`` with ``speedup``, ``ideal``, ``efficiency`` and
    ``step_efficiency`` (the gain over the row before / the size ratio; NaN first) columns."""
    rows = ok.assign(_x=pd.to_numeric(ok[x])).sort_values("_x", kind="stable")
    rows = rows.drop_duplicates("_x")
    base = rows.iloc[0]
    rows = rows.assign(speedup=rows[metric] / base[metric], ideal=rows["_x"] / base["_x"])
    step = (rows["speedup"] / rows["speedup"].shift(1)) / (rows["_x"] / rows["_x"].shift(1))
    return rows.assign(efficiency=rows["speedup"] / rows["ideal"], step_efficiency=step)


def knee_index(curve: pd.DataFrame, threshold: float) -> int | None:
    """Position of the first point whose efficiency (against the first point) or whose
    step efficiency (its gain over the point before / the size ratio) is below
    ``threshold``. The step rule finds the knee after a superlinear start, e.g. FSDP's
    per-GPU optimizer step shrinking as the GPU count grows."""
    eff, step = list(curve["efficiency"]), list(curve["step_efficiency"])
    return next((i for i in range(1, len(eff)) if min(eff[i], step[i]) < threshold), None)


def scaling_answer(q: ScalingQuestion, ok: pd.DataFrame, study: Study) -> str:
    ok, note = pin_axes(ok, study, {q.x}, {})
    curve = scaling_curve(ok, q.x, q.metric)
    if len(curve) < 2:
        return f"Only one value of {label(study, q.x)} finished; nothing to compare."
    unit = "GPUs" if q.x == "gpus" else ""
    xs = [num(v) for v in curve["_x"]]
    knee = knee_index(curve, q.threshold)
    a, b = (knee - 1, knee) if knee else (len(curve) - 2, len(curve) - 1)
    step = xs[b] / xs[a]
    gain = curve["speedup"].iloc[b] / curve["speedup"].iloc[a]
    verb = "Doubling" if math.isclose(step, 2) else f"Going ({step:.3g}x)"
    text = f"{verb} from {x_text(xs[a], unit)} to {x_text(xs[b], unit)} gives {gain:.2f}x"
    if knee is not None:
        eff = curve["efficiency"].iloc[knee]
        cause = scaling_cause(curve.iloc[knee - 1], curve.iloc[knee], q)
        if eff < q.threshold:
            text += (f"; efficiency drops below {q.threshold:.0%} at {x_text(xs[knee], unit)} "
                     f"({eff:.1%}) because {cause}")
        else:
            text += (f" ({curve['step_efficiency'].iloc[knee]:.1%} of linear): scaling "
                     f"stops being linear at {x_text(xs[knee], unit)}, though efficiency against "
                     f"{x_text(xs[0], unit)} is still {eff:.1%}, because {cause}")
    else:
        low = int(curve["efficiency"].values.argmin())
        links = _links_clause(curve.iloc[-1], "at " + x_text(xs[-1], unit))
        text += (f"; efficiency stays at or above {q.threshold:.0%} up to "
                 f"{x_text(xs[-1], unit)} (lowest {curve['efficiency'].iloc[low]:.1%} at "
                 f"{x_text(xs[low], unit)})" + (f"; {links}" if links else ""))
    total = curve["speedup"].iloc[-1]
    text += (f". Overall, {x_text(xs[0], unit)} to {x_text(xs[-1], unit)} ({xs[-1] / xs[0]:.3g}x) "
             f"gives {total:.3g}x {label(study, q.metric)}, "
             f"{curve['efficiency'].iloc[-1]:.1%} efficiency")
    return text + note + "."


def scaling_cause(prev: pd.Series, knee: pd.Series, q: ScalingQuestion) -> str:
    """Why efficiency fell between two rows, from their breakdowns and link facts."""
    def share(row, column):
        t = row.get("iteration_time_s")
        return row.get(column, 0.0) / t if t and column in row else 0.0
    comm = (share(prev, "exposed_comm_s"), share(knee, "exposed_comm_s"))
    wait = (share(prev, "wait_s"), share(knee, "wait_s"))
    if wait[1] - wait[0] > comm[1] - comm[0] and wait[1] > wait[0]:
        return (f"time waiting on other ranks grows from {wait[0]:.1%} to {wait[1]:.1%} of "
                f"the step")
    if comm[1] <= comm[0]:
        a, b = (fmt("compute_s", row.get("compute_s")) for row in (prev, knee))
        return f"compute per GPU does not shrink in proportion ({a} to {b})"
    grows = f"exposed communication grows from {comm[0]:.1%} to {comm[1]:.1%} of the step"
    util = knee.get("busiest_link_util")
    if util is None or pd.isna(util):
        return grows
    if util >= q.saturated:
        return (f"the {knee['busiest_link']} ({knee['busiest_link_type']}) saturate during the "
                f"{phase(knee['busiest_phase'])} phase ({util:.0%} busy while "
                f"communicating); {grows}")
    return (f"{grows}, most of it in the {phase(_grew_most(prev, knee))} phase, while the "
            f"busiest links ({knee['busiest_link']}, {knee['busiest_link_type']}) are only "
            f"{util:.0%} busy while communicating: latency, not bandwidth, grows")


def _grew_most(prev: pd.Series, knee: pd.Series) -> str:
    def shares(row):
        t = row["iteration_time_s"]
        return {k: v / t for k, v in json.loads(row.get("exposed_by_phase") or "{}").items()}
    p, k = shares(prev), shares(knee)
    return max(k, key=lambda key: k[key] - p.get(key, 0.0), default="")


def _links_clause(row: pd.Series, where: str) -> str:
    if "busiest_link" not in row or not row["busiest_link"]:
        return ""
    return (f"{where} the busiest links are the {row['busiest_link']} "
            f"({row['busiest_link_type']}), {row['busiest_link_util']:.0%} busy while "
            f"communicating, most loaded in the {phase(row['busiest_phase'])} phase")
