"""Plots of the collective validation report: busbw and time per table, and the per-table
error overview."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.outpaths import save_figure
from simulator.validation.collectives.schema import BUSBW_THRESHOLD, GOAL, TIME_THRESHOLD


def _figure(w=7.0, h=4.0, ncols=1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(w, h))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols)
    return fig, axes


def _size_label(v: float, _pos=None) -> str:
    n = int(round(v))
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g}{unit}"
    return f"{n}"


def _log_axes(ax, sizes) -> None:
    """log2 size axis with plain labels (mathtext tick labels are slow to lay out)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator
    lo = int(math.floor(math.log2(max(min(sizes), 1))))
    hi = int(math.ceil(math.log2(max(sizes))))
    step = max(1, math.ceil((hi - lo) / 8))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([2.0 ** e for e in range(lo, hi + 1, step)]))
    ax.xaxis.set_major_formatter(FuncFormatter(_size_label))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(2.0 ** (lo - 0.5), 2.0 ** (hi + 0.5))


def _plot_table(g: pd.DataFrame, tid: str, path: Path) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    fig, (ax_b, ax_t) = _figure(11, 4, 2)
    for i, (op, h) in enumerate(g.groupby("op", sort=False)):
        h = h.sort_values("size_bytes")
        color = f"C{i}"
        mb = h[h["meas_busbw_GBps"] > 0]
        ax_b.plot(mb["size_bytes"], mb["meas_busbw_GBps"], "o-", color=color,
                  label=f"{op} measured")
        ax_b.plot(h["size_bytes"], h["sim_busbw_GBps"], "x--", color=color,
                  label=f"{op} simulated")
        ax_t.plot(h["size_bytes"], h["meas_time_us"], "o-", color=color, label=f"{op} measured")
        ax_t.plot(h["size_bytes"], h["sim_time_us"], "x--", color=color,
                  label=f"{op} simulated")
    sizes = g["size_bytes"].tolist()
    for ax in (ax_b, ax_t):
        _log_axes(ax, sizes)
        ax.set_xlabel("size (bytes, log2)")
        ax.grid(True, alpha=0.3)
    ax_b.set_ylabel("busbw (GB/s)")
    ax_b.set_title(f"{tid}: busbw (o measured, x simulated)", fontsize=9)
    ax_b.legend(fontsize=7)
    ax_t.set_yscale("log")
    ax_t.yaxis.set_major_locator(LogLocator(base=10))
    ax_t.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax_t.yaxis.set_minor_formatter(NullFormatter())
    ax_t.set_ylabel("time (us, log)")
    ax_t.set_title(f"{tid}: time", fontsize=9)
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.13, top=0.91, wspace=0.25)
    save_figure(fig, path, dpi=80)


def _plot_overview(summary: pd.DataFrame, path: Path) -> None:
    fig, (ax_b, ax_t) = _figure(12, 5, 2)
    y = np.arange(len(summary))
    colors = ["C0" if s == "calibration" else "C1" for s in summary["split"]]
    labels = [f"{t} [{s[:3]}]" for t, s in zip(summary["table_id"], summary["split"])]
    for ax, col, thr, name in ((ax_b, "busbw_med", BUSBW_THRESHOLD, "median |busbw err|, >= 1 MiB"),
                               (ax_t, "time_med", TIME_THRESHOLD, "median |time err|, <= 64 KiB")):
        vals = np.nan_to_num(summary[col].astype(float).to_numpy() * 100, nan=0.0)
        ax.barh(y, vals, color=colors)
        ax.axvline(thr * 100, color="red", ls="--", lw=1, label=f"threshold {thr:.0%}")
        if col == "busbw_med":
            ax.axvline(GOAL * 100, color="green", ls=":", lw=1, label=f"goal {GOAL:.0%}")
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f"{name} (%)")
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(fontsize=7)
    ax_t.set_yticklabels([])
    fig.suptitle("Per-table error (blue: calibration, orange: validation; 0 = no points)",
                 fontsize=9)
    fig.subplots_adjust(left=0.2, right=0.98, bottom=0.1, top=0.92, wspace=0.05)
    save_figure(fig, path, dpi=80)
