"""A study's PNG plots: lines with the ideal or an anchor marked (and the knee, for
scaling), heat maps for two axes."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..outpaths import save_figure  # noqa: E402
from .scaling import knee_index, scaling_curve  # noqa: E402
from matplotlib.ticker import PercentFormatter  # noqa: E402

from .format import fmt, fmt_axis, is_fraction, label, numeric, ordered, pin_axes  # noqa: E402
from .spec import HeatmapPlot, LinePlot, Study  # noqa: E402


def draw(plot, ok: pd.DataFrame, study: Study, path: Path) -> Path | None:
    """Draw ``plot`` from the finished rows ``ok``; None when there is nothing to draw."""
    needed = [c for c in (plot.x, plot.y, getattr(plot, "z", None)) if c]
    if any(c not in ok for c in needed):
        return None
    ok = ok.dropna(subset=needed)
    if ok.empty:
        return None
    if isinstance(plot, HeatmapPlot):
        return heatmap(plot, ok, study, path)
    return line(plot, ok, study, path)


def line(p: LinePlot, ok: pd.DataFrame, study: Study, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ok, note = pin_axes(ok, study, {p.x, p.series} - {None}, p.at)
    xs = numeric(ok[p.x])
    ticks = ordered(ok, p.x)
    # "400 Gb/s" plots at 400 unless the numbers disagree with the study's order ("1 h")
    categorical = xs is None or list(numeric(pd.Series(ticks))) != sorted(numeric(
        pd.Series(ticks)))
    ok = ok.assign(_x=[ticks.index(v) for v in ok[p.x]] if categorical else xs)
    groups = [(None, ok)] if not p.series else [(v, ok[ok[p.series] == v])
                                                 for v in ordered(ok, p.series)]
    for n, (value, rows) in enumerate(groups):
        rows = rows.sort_values("_x", kind="stable").drop_duplicates("_x")
        color = f"C{n % 10}"
        name = label(study, p.y) if value is None else f"{label(study, p.series)} {fmt_axis(value)}"
        ax.plot(rows["_x"], rows[p.y], "o-", color=color, label=name)
        if p.ideal == "linear" and len(rows) > 1:
            curve = scaling_curve(rows, "_x", p.y)
            ax.plot(curve["_x"], curve["ideal"] * curve[p.y].iloc[0], "--", color=color,
                    alpha=0.6, label="ideal (linear)" if n == 0 else None)
            k = knee_index(curve, p.knee) if p.knee else None
            if k is not None:
                kx, eff = curve["_x"].iloc[k], curve["efficiency"].iloc[k]
                what = (f"{eff:.1%} of ideal" if eff < p.knee
                        else f"last step {curve['step_efficiency'].iloc[k]:.1%} of linear")
                ax.axvline(kx, color="red", ls=":", lw=1)
                ax.annotate(f"knee: {what} at {fmt_axis(kx)}",
                            (kx, curve[p.y].iloc[k]), textcoords="offset points",
                            xytext=(-6, 8), ha="right", color="red", fontsize=8)
        elif n == 0:
            _anchor(ax, p, rows, ticks, categorical, study)
    ax.set_xscale("log" if p.log_x and not categorical else "linear")
    if categorical:
        ax.set_xticks(range(len(ticks)), [fmt_axis(t) for t in ticks])
    elif p.log_x or not pd.api.types.is_numeric_dtype(ok[p.x]):
        names = dict(zip(ok["_x"], ok[p.x]))        # "400 Gb/s" at 400
        at_x = sorted(names)
        text = not pd.api.types.is_numeric_dtype(ok[p.x])
        ax.set_xticks(at_x, [fmt_axis(names[v]) for v in at_x], minor=False,
                      rotation=45 if text else 0, ha="right" if text else "center")
        ax.minorticks_off()
    ax.set_yscale("log" if p.log_y else "linear")
    if is_fraction(p.y):
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel(label(study, p.x))
    ax.set_ylabel(label(study, p.y) + (" (s)" if _seconds(p.y) else ""))
    ax.set_title((p.title or f"{study.name}: {label(study, p.y)}") + note, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def _seconds(column: str) -> bool:
    return column.endswith("_s") and not column.endswith("_per_s")


def _anchor(ax, p: LinePlot, rows: pd.DataFrame, ticks: list, categorical: bool,
            study: Study) -> None:
    """A horizontal reference at the anchor point's value (default: the first x)."""
    anchor = p.anchor if p.anchor is not None else ticks[0]
    match = rows[rows[p.x].astype(str) == str(anchor)]
    if match.empty:
        return
    y = match[p.y].iloc[0]
    ax.axhline(y, color="gray", ls="--", lw=1,
               label=f"anchor: {fmt(p.y, y)} at {label(study, p.x)} {fmt_axis(anchor)}")
    ax.plot([match["_x"].iloc[0]], [y], "s", color="black", ms=7)


def heatmap(p: HeatmapPlot, ok: pd.DataFrame, study: Study, path: Path) -> Path:
    xs, ys = ordered(ok, p.x), ordered(ok, p.y)
    grid = np.full((len(ys), len(xs)), np.nan)
    for _, row in ok.iterrows():
        grid[ys.index(row[p.y]), xs.index(row[p.x])] = row[p.z]
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(xs), 1.2 + 0.55 * len(ys)))
    im = ax.imshow(grid, aspect="auto", cmap="viridis", origin="lower")
    fig.colorbar(im, ax=ax, label=label(study, p.z) + (" (s)" if _seconds(p.z) else ""))
    if grid.size <= 400:
        lo, hi = np.nanmin(grid), np.nanmax(grid)
        for (r, c), v in np.ndenumerate(grid):
            if np.isfinite(v):
                light = hi > lo and (v - lo) / (hi - lo) > 0.6
                ax.text(c, r, fmt(p.z, v), ha="center", va="center", fontsize=7,
                        color="black" if light else "white")
    ax.set_xticks(range(len(xs)), [fmt_axis(v) for v in xs], rotation=45, ha="right")
    ax.set_yticks(range(len(ys)), [fmt_axis(v) for v in ys])
    ax.set_xlabel(label(study, p.x))
    ax.set_ylabel(label(study, p.y))
    ax.set_title(p.title or f"{study.name}: {label(study, p.z)}", fontsize=10)
    save_figure(fig, path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
