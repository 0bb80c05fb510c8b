"""The plot of the training validation report: throughput ratio and scaling efficiency,
measured against simulated, per case."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simulator.outpaths import save_figure
from simulator.validation.training.schema import SCALING_THRESHOLD, THROUGHPUT_THRESHOLD


def _throughput_bars(ax, g: pd.DataFrame, y: np.ndarray) -> None:
    """Simulated / measured throughput per case, with the gate's bounds."""
    ratio = (g["simulated"] / g["measured"]).to_numpy(dtype=float)
    ax.barh(y - 0.2, np.ones(len(g)), 0.4, color="0.6", label="measured (= 1)")
    ax.barh(y + 0.2, ratio, 0.4, color=["C0" if s == "calibration" else "C1"
                                        for s in g["split"]], label="simulated")
    for lim in (1 - THROUGHPUT_THRESHOLD, 1 + THROUGHPUT_THRESHOLD):
        ax.axvline(lim, color="red", ls="--", lw=1)
    for yi, r in zip(y, ratio):
        ax.text(r, yi + 0.2, f" {r:.2f}", va="center", fontsize=7)
    ax.set_xlim(0, max(2.0, float(np.nanmax(ratio)) * 1.12) if len(g) else 2.0)


def _scaling_bars(ax, g: pd.DataFrame, y: np.ndarray) -> None:
    """Measured and simulated scaling efficiency per case."""
    ax.barh(y - 0.2, g["measured"], 0.4, color="0.6", label="measured")
    ax.barh(y + 0.2, g["simulated"], 0.4, color="C1", label="simulated")
    for yi, m, v in zip(y, g["measured"], g["simulated"]):
        ax.text(m, yi - 0.2, f" {m:.3f}", va="center", fontsize=7)
        ax.text(v, yi + 0.2, f" {v:.3f}", va="center", fontsize=7)
    ax.set_xlim(0.5, 1.1)


def _plot(df: pd.DataFrame, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    thr = df[df["error_kind"] == "relative"]
    sc = df[df["error_kind"] == "points"]
    fig = Figure(figsize=(12, 0.9 + 0.32 * max(len(thr), len(sc), 4)))
    FigureCanvasAgg(fig)
    ax_t, ax_s = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for ax, g, title in ((ax_t, thr, "throughput: simulated / measured"),
                         (ax_s, sc, "scaling efficiency (N GPUs / (N x 1 GPU))")):
        y = np.arange(len(g))
        labels = [f"{c} [{s[:3]}]" for c, s in zip(g["case"], g["split"])]
        if ax is ax_t:
            _throughput_bars(ax, g, y)
        else:
            _scaling_bars(ax, g, y)
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9, pad=22)
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2,
                  frameon=False)
    fig.suptitle(f"Training validation (blue: calibration, orange: validation; red lines: "
                 f"+-{THROUGHPUT_THRESHOLD:.0%} gate; gate on scaling: "
                 f"+-{100 * SCALING_THRESHOLD:.0f} points)", fontsize=9)
    fig.subplots_adjust(left=0.17, right=0.98, bottom=0.08, top=0.86, wspace=0.65)
    save_figure(fig, path, dpi=80)
