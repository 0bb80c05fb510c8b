"""The output folder of ``clustersim compare --out``: ``compare.csv``, ``compare.json`` and
PNG charts (iteration time, memory, cost).

The folder is guarded like ``clustersim run --out`` (:func:`prepare_out_dir`): a non-empty
folder that clustersim did not write is refused, so no user file is overwritten; each file
is written whole and renamed into place (:func:`simulator.outpaths.atomic_writer`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..outpaths import atomic_write_text, prepare_out_dir, save_figure  # noqa: E402
from .report import records, to_csv, to_json  # noqa: E402
from .results import Comparison  # noqa: E402


# ----------------------------------------------------------------------------- folder
def write_outputs(out: Path | str, cmp: Comparison,
                  accuracy: dict[str, dict] | None = None) -> list[Path]:
    """``compare.csv``, ``compare.json`` (with ``accuracy``, see :func:`.report.to_json`),
    ``iteration_time.png``, ``memory.png`` and ``cost.png`` in ``out`` (guarded, module
    doc); returns the paths."""
    out = prepare_out_dir(out)
    recs = records(cmp)
    ok = [r for r in recs if r["status"] == "ok"]
    files = {"compare.csv": lambda p: atomic_write_text(p, to_csv(cmp) + "\n"),
             "compare.json": lambda p: atomic_write_text(p, to_json(cmp, accuracy) + "\n"),
             "iteration_time.png": lambda p: _plot_time(ok, p),
             "memory.png": lambda p: _plot_memory(ok, cmp.cluster["gpu_memory_gib"], p),
             "cost.png": lambda p: _plot_cost(ok, cmp.budget is not None, p)}
    for name, write in files.items():
        write(out / name)
    return [out / n for n in files]


def _bars(ok: list[dict], parts: list[tuple[str, str, callable]], xlabel: str, path: Path,
          title: str, line: float | None = None) -> None:
    """Stacked horizontal bars, one per strategy. When one bar dwarfs the others (over 10x
    the median) the axis stops at 3x the median and each longer bar is drawn shrunk to the
    axis, every part in proportion (hatched), with its real total written on it: its
    make-up stays visible (tf-ps is mostly communication, not compute)."""
    fig = bar_figure(ok, parts, xlabel, title, line)
    save_figure(fig, path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def bar_figure(ok: list[dict], parts: list[tuple[str, str, callable]], xlabel: str,
               title: str, line: float | None = None):
    """The figure of :func:`_bars`."""
    fig, ax = plt.subplots(figsize=(7, 0.8 + 0.45 * max(len(ok), 1)))
    names = [r["strategy"] + (" (OOM)" if r["oom"] else "") for r in ok]
    values = [[value(r) or 0.0 for r in ok] for _, _, value in parts]
    totals = [sum(col) for col in zip(*values)] if values else []
    mid = sorted(totals)[len(totals) // 2] if totals else 0.0
    limit = 3 * max(mid, line or 0.0) if mid > 0 and max(totals) > 10 * mid else None
    scale = [min(1.0, limit / t) if limit and t > 0 else 1.0 for t in totals]
    left = [0.0] * len(ok)
    for (label, color, _), vals in zip(parts, values):
        vals = [v * k for v, k in zip(vals, scale)]
        ax.barh(names, vals, left=left, color=color, label=label,
                hatch=["//" if k < 1 else "" for k in scale])
        left = [a + b for a, b in zip(left, vals)]
    if limit:
        ax.set_xlim(0, limit)
        for y, (total, k) in enumerate(zip(totals, scale)):
            if k < 1:
                ax.text(limit, y, f" {total:,.3g} (shrunk {1 / k:,.0f}x) →", ha="right",
                        va="center", fontsize=8, color="white")
    if line is not None:
        ax.axvline(line, color="red", ls="--", label="GPU memory")
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


TIME_PARTS = [("compute", "tab:blue", lambda r: r["compute_s"]),
              ("exposed comm", "tab:red", lambda r: r["exposed_comm_s"]),
              ("wait", "tab:gray", lambda r: r["wait_s"])]


def _plot_time(ok: list[dict], path: Path) -> None:
    _bars(ok, TIME_PARTS, "seconds per iteration", path, "iteration time per strategy")


def _plot_memory(ok: list[dict], capacity_gib: float, path: Path) -> None:
    _bars(ok, [("peak memory per GPU", "tab:green", lambda r: r["peak_memory_gib"])],
          "GiB", path, "peak memory per GPU (past the red line: out of memory)", capacity_gib)


def _plot_cost(ok: list[dict], budget: bool, path: Path) -> None:
    ok = [r for r in ok if r["per_iteration_usd"] is not None]
    if budget and all(r["training_usd"] is not None for r in ok):
        parts = [("GPU time computing", "tab:blue",
                  lambda r: r["training_usd"] - r["comm_wait_usd"]),
                 ("GPU time waiting on comm", "tab:red", lambda r: r["comm_wait_usd"]),
                 ("migration", "tab:purple", lambda r: r["migration_usd"])]
        unit = "USD for the budget"
    else:
        parts = [("GPU time computing", "tab:blue",
                  lambda r: r["per_thousand_samples_usd"] * (1 - r["comm_wait_share"])),
                 ("GPU time waiting on comm", "tab:red",
                  lambda r: r["per_thousand_samples_usd"] * r["comm_wait_share"])]
        unit = "USD per 1,000 samples"
    _bars(ok, parts, unit, path, "cost breakdown per strategy")
