"""``report.md`` and the plots of a study, from its results table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..outpaths import atomic_write_text
from .answers import answer
from .scaling import scaling_curve
from .commands import COMMANDS
from .format import fmt, fmt_axis, label, pin_axes
from .plots import draw
from .page import write_page
from .points import LoadedStudy
from .spec import ScalingQuestion, plot_paths

MAX_TABLE_ROWS = 60
TRUST_ASK = "How far to trust these answers?"
KERNELS_ASK = "Why do the frameworks' compute times differ?"
KERNELS_LEAD = ("The same kernel costs the same under every strategy; the frameworks differ by "
                "their stacks' named mechanisms:")


def write_outputs(study: LoadedStudy, table: pd.DataFrame, out: Path) -> list[Path]:
    """Draw the plots and write ``report.md``; return every file of the results."""
    spec = study.spec
    ok = table[table["status"] == "ok"] if len(table) else table
    plots = []
    for p, path in zip(spec.plots, plot_paths(spec, out, study.source)):
        if draw(p, ok, spec, path) is not None:
            plots.append(path)
    report = atomic_write_text(out / "report.md", render_report(study, table, ok, plots))
    page = write_page(study, ok, plots, answers(study, ok), result_table(spec, ok), out)
    return [out / "results.parquet", out / "results.csv", *plots, report, page]


def answers(study: LoadedStudy, ok: pd.DataFrame) -> list[tuple[str, str]]:
    """(question, answer sentence) for every question of the study, then, for a compare
    study, the named mechanisms behind its frameworks' different compute times
    (:func:`kernel_lines`) and how far to trust the answers (:func:`trust_lines`)."""
    keys = COMMANDS[study.spec.command].keys
    kernels, trust = kernel_lines(ok), trust_lines(ok)
    return [(q.ask, answer(q, ok, study.spec, keys)) for q in study.spec.questions] + (
        [(KERNELS_ASK, f"{KERNELS_LEAD} {' '.join(kernels)}")] if kernels else []) + (
        [(TRUST_ASK, " ".join(trust))] if trust else [])


def kernel_lines(ok: pd.DataFrame) -> list[str]:
    """A compare study's kernel stacks, one sentence per stack naming its strategies (what
    ``clustersim compare`` prints as ``# kernels of ...``): the same kernels cost the same
    under every strategy, and these named mechanisms are what makes the frameworks'
    compute differ. None when every strategy runs one stack, or for other commands."""
    if "kernels" not in ok.columns or not len(ok):
        return []
    from ..compare.report import strategies_by_stack     # compare's modules: when used
    by = strategies_by_stack(zip(ok["kernels"].fillna(""), ok["strategy"]))
    if len(by) < 2:
        return []
    return [f"{', '.join(names)}: {stack}." for stack, names in by.items()]


def trust_lines(ok: pd.DataFrame) -> list[str]:
    """The trust sentence of a compare study's points (each point's held-out error of its
    strategies, :func:`simulator.compare.trust.trust_of`), one line per distinct sentence
    with the GPU counts it holds for; none for other commands."""
    if "trust" not in ok.columns or not len(ok):
        return []
    by_sentence: dict[str, list[int]] = {}
    for sentence, gpus in zip(ok["trust"], ok["gpus"]):
        if isinstance(sentence, str) and sentence:
            by_sentence.setdefault(sentence, []).append(int(gpus))
    return [f"At {_counts(sorted(set(g)))} GPUs: {s}" for s, g in by_sentence.items()]


def _counts(values: list[int]) -> str:
    text = [f"{v:,}" for v in values]
    return text[0] if len(text) == 1 else f"{', '.join(text[:-1])} and {text[-1]}"


def render_report(study: LoadedStudy, table: pd.DataFrame, ok: pd.DataFrame,
                  plots: list[Path]) -> str:
    spec = study.spec
    failed = table[table["status"] != "ok"] if len(table) else table
    missing = len(study.points) - len(table["point"].unique()) if len(table) else len(
        study.points)
    lines = [f"# Study: {spec.name}", ""]
    if spec.description:
        lines += [spec.description.strip(), ""]
    lines += [f"Command `{spec.command}` on the base scenario `{spec.base.scenario}`"
              + (f" with {_sets(spec.base.set)}" if spec.base.set else "")
              + f", seed {spec.seed}. Axes: {_axes(spec)}.",
              "",
              f"{len(study.points)} points: {len(ok['point'].unique()) if len(ok) else 0} "
              f"finished, {len(failed['point'].unique()) if len(failed) else 0} failed"
              + (f", {missing} not run yet" if missing else "") + ".", ""]
    lines += _extrapolated(ok)
    if spec.questions:
        lines += ["## Answers", ""]
        for q, (ask, text) in zip(spec.questions, answers(study, ok)):
            lines += [f"**{ask}**", "", text, ""] + _scaling_table(spec, q, ok)
    kernels = kernel_lines(ok)
    if kernels:
        lines += [f"## {KERNELS_ASK}", "", KERNELS_LEAD, ""] + [f"- {line}" for line in kernels] \
            + [""]
    trust = trust_lines(ok)
    if trust:
        lines += [f"## {TRUST_ASK}", ""] + [f"- {line}" for line in trust] + [""]
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    if len(failed):
        lines += ["## Failed points", "", "| point | values | error |", "|---|---|---|"]
        for _, row in failed.iterrows():
            values = ", ".join(f"{k}={fmt_axis(row[k])}" for k in spec.axis_keys())
            lines.append(f"| {row['point']} | {values} | {str(row['error']).replace('|', '/')} |")
        lines.append("")
    lines += ["## Results", "", "All columns: `results.parquet`, `results.csv`.", ""]
    lines += _table(spec, ok)
    return "\n".join(lines) + "\n"


def _extrapolated(ok: pd.DataFrame) -> list[str]:
    """A line saying which results were extrapolated from a few micro-steps, if any."""
    if "extrapolated" not in ok.columns:
        return []
    done = ok[ok["extrapolated"].fillna("").astype(str) != ""]
    if done.empty:
        return []
    how = set(done["extrapolated"])
    text = how.pop() if len(how) == 1 else "extrapolated from a few replayed micro-steps"
    return [f"{len(done)} of {len(ok)} results are of steps {text} (column `extrapolated`).",
            ""]


def result_table(spec, ok: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """(header, formatted rows) of the results shown in the reports: the axes, the columns
    the plots and questions use, the busiest link; at most :data:`MAX_TABLE_ROWS` rows."""
    wanted = []
    for item in (*spec.plots, *spec.questions):
        for name in ("x", "y", "z", "metric", "series", "per"):
            col = getattr(item, name, None)
            if col and col not in wanted:
                wanted.append(col)
    columns = [c for c in dict.fromkeys([*spec.axis_keys(), *wanted, "busiest_link",
                                         "busiest_link_util"]) if c in ok]
    if ok.empty or not columns:
        return [], []
    rows = [[fmt_axis(row[c]) if c in spec.axis_keys() else fmt(c, row[c]) for c in columns]
            for _, row in ok.head(MAX_TABLE_ROWS).iterrows()]
    return [label(spec, c) for c in columns], rows


def _table(spec, ok: pd.DataFrame) -> list[str]:
    header, rows = result_table(spec, ok)
    if not header:
        return []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    if len(ok) > MAX_TABLE_ROWS:
        lines.append(f"\n({len(ok) - MAX_TABLE_ROWS} more rows in results.csv)")
    return lines


def _scaling_table(spec, q, ok: pd.DataFrame) -> list[str]:
    """Speedup, ideal and efficiency per point under a scaling question's answer."""
    if not isinstance(q, ScalingQuestion) or ok.empty or q.metric not in ok or q.x not in ok:
        return []
    curve = scaling_curve(pin_axes(ok.dropna(subset=[q.x, q.metric]), spec, {q.x}, {})[0],
                          q.x, q.metric)
    lines = [f"| {label(spec, q.x)} | {label(spec, q.metric)} | speedup | ideal | efficiency |",
             "|---|---|---|---|---|"]
    for _, r in curve.iterrows():
        lines.append(f"| {fmt_axis(r[q.x])} | {fmt(q.metric, r[q.metric])} | "
                     f"{r['speedup']:.2f}x | {r['ideal']:.3g}x | {r['efficiency']:.1%} |")
    return lines + [""]


def _sets(sets: dict) -> str:
    return ", ".join(f"`{k}={v}`" for k, v in sets.items())


def _axes(spec) -> str:
    parts = [f"`{k}` ({len(v)} values)" for k, v in spec.axes.grid.items()]
    if spec.axes.zip:
        parts.append("zipped " + " + ".join(f"`{k}`" for k in spec.axes.zip)
                     + f" ({len(next(iter(spec.axes.zip.values())))} values)")
    return " x ".join(parts)
