"""The ``best`` question: the best point for a metric (per value of a column), the points
tied with it, and the next one with the gap."""

from __future__ import annotations

import pandas as pd

from .format import (TIE, at, change, describe, describe_many, fmt, fmt_axis, groups, label,
                     sentence)
from .points import cell
from .spec import BestQuestion, Study


MAX_TIED_NAMED = 3


def best_answer(q: BestQuestion, ok: pd.DataFrame, study: Study,
                keys: tuple[str, ...]) -> str:
    for column, values in q.among.items():
        ok = ok[ok[column].isin([cell(v) for v in values])]
    if ok.empty:
        return "No finished point has the values the question picks."
    fits, over = _fitting(ok)
    if fits.empty:
        return "Every point the question picks runs out of memory, so none is the best."
    ok = fits
    ident = [c for c in study.naming_keys() if c in ok and c != q.per
             and not (q.per and ok.groupby(q.per)[c].nunique().max() < 2)]
    ident += [c for c in keys if c in ok and c not in ident]
    word = "lowest" if q.goal == "min" else "highest"
    name = label(study, q.metric)
    ranked = [(v, g.sort_values(q.metric, ascending=q.goal == "min", kind="stable"))
              for v, g in groups(ok, q.per)]
    winners = {describe(g.iloc[0], ident, study) for _, g in ranked}
    left_out = _left_out(over, ident, study)
    if q.per and len(ranked) > 1 and len(winners) == 1:
        return sentence(_same_winner(q, ranked, ident, study, word)
                        + _among_clause(q, ranked, ident, study) + left_out)
    clauses = []
    for value, group in ranked:
        best = group.iloc[0]
        where = f"{at(study, q.per, value)}, " if q.per else ""
        clauses.append(f"{where}the {word} {name} is {fmt(q.metric, best[q.metric])} with "
                       f"{describe(best, ident, study)}" + _runner_up(q, group, ident, study))
    return sentence("; ".join(clauses) + _among_clause(q, ranked, ident, study) + left_out)


def _fitting(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows whose run fits in memory, and those that ran out of it (an ``oom`` column
    true): a run that does not fit is no answer to "which is best", whatever its numbers."""
    if "oom" not in rows:
        return rows, rows.iloc[0:0]
    over = rows["oom"].map(lambda v: str(v).lower() == "true")     # bool, or read as text
    return rows[~over], rows[over]


def _left_out(over: pd.DataFrame, ident: list[str], study: Study) -> str:
    """The clause naming the points left out for running out of memory, if any."""
    if over.empty:
        return ""
    return f" (left out, out of memory: {describe_many(over, ident, study)})"


def _among_clause(q: BestQuestion, ranked: list, ident: list[str], study: Study) -> str:
    """With ``among`` (the question names what it compares), every one of them with its
    number and gap to the best, in the last ``per`` group (the largest size): a question
    that asks about MultiWorkerMirroredStrategy gets MultiWorkerMirroredStrategy's answer."""
    if not q.among:
        return ""
    value, group = ranked[-1]
    best, seen, parts = group.iloc[0], {describe(group.iloc[0], ident, study)}, []
    for _, row in group.iloc[1:].iterrows():
        name = describe(row, ident, study)
        if name not in seen:
            seen.add(name)
            parts.append(f"{name} {fmt(q.metric, row[q.metric])} "
                         f"({change(best[q.metric], row[q.metric], q.metric)})")
    if not parts:
        return ""
    where = f" {at(study, q.per, value)}" if q.per else ""
    return f"; against it{where}: " + ", ".join(parts)


def _split_ties(q: BestQuestion, ranked: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    v = ranked[q.metric].iloc[0]
    close = (ranked[q.metric] - v).abs() <= TIE * abs(v)
    return ranked[close], ranked[~close]


def _runner_up(q: BestQuestion, ranked: pd.DataFrame, ident: list[str], study: Study) -> str:
    tied, rest = _split_ties(q, ranked)
    v, text = ranked[q.metric].iloc[0], ""
    if 1 < len(tied) <= MAX_TIED_NAMED + 1:
        others = describe_many(tied.iloc[1:], ident, study)
        text = f" (tied within {TIE:.1%} with {others})"
    elif len(tied) > 1:
        text = f" ({len(tied)} points are within {TIE:.1%} of it)"
    if len(rest):
        nxt = rest.iloc[0]
        text += (f"; next comes {describe(nxt, ident, study)} with "
                 f"{fmt(q.metric, nxt[q.metric])} ({change(v, nxt[q.metric], q.metric)})")
    return text


def _same_winner(q: BestQuestion, ranked: list, ident: list[str], study: Study,
                 word: str) -> str:
    """One clause when the same point wins in every ``per`` group."""
    best = [g.iloc[0] for _, g in ranked]
    values = [b[q.metric] for b in best]
    a, b = fmt_axis(ranked[0][0]), fmt_axis(ranked[-1][0])
    span = f"size from {a} to {b} GPUs" if q.per == "gpus" else \
        f"{label(study, q.per)} from {a} to {b}"
    text = (f"{describe(best[0], ident, study)} gives the {word} {label(study, q.metric)} "
            f"at every {span} ({fmt(q.metric, values[0])} to {fmt(q.metric, values[-1])})")
    gaps = []
    for _, g in ranked:
        tied, rest = _split_ties(q, g)
        if len(rest):
            gaps.append((describe(rest.iloc[0], ident, study),
                         change(g[q.metric].iloc[0], rest[q.metric].iloc[0], q.metric)))
    tied_with = {describe(r, ident, study) for _, g in ranked
                 for _, r in _split_ties(q, g)[0].iloc[1:].iterrows()}
    if tied_with:
        text += f", tied within {TIE:.1%} with {' and '.join(sorted(tied_with))}"
    if gaps:
        names = list(dict.fromkeys(n for n, _ in gaps))
        text += (f"; next comes {' or '.join(names)}, {gaps[0][1]} at "
                 f"{at(study, q.per, ranked[0][0], bare=True)} and {gaps[-1][1]} at "
                 f"{at(study, q.per, ranked[-1][0], bare=True)}")
    return text
