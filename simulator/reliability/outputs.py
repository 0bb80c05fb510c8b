"""Files of ``clustersim reliability --out DIR``: JSON, CSV tables and three PNG plots.

The folder is prepared as ``clustersim run`` does (:func:`prepare_out_dir`): a non-empty
folder that clustersim did not write is refused, so nothing a user wrote is overwritten; each
file is written whole and renamed into place (:func:`simulator.outpaths.atomic_writer`).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from simulator.metrics.outputs import plt
from simulator.outpaths import atomic_write_csv, atomic_write_text, prepare_out_dir, save_figure

from .config import CLASSES
from .report import as_dict
from .results import CATEGORIES
from .study import Study

DAY = 86400.0


def write_outputs(st: Study, out: Path | str) -> list[Path]:
    """Write every file into ``out``; return their paths."""
    out = prepare_out_dir(out)
    files = {
        "summary.json": lambda p: atomic_write_text(p, json.dumps(
            {"results": as_dict(st), "scenario": st.scenario.model_dump(mode="json")},
            indent=2, default=str)),
        "trials.csv": lambda p: atomic_write_csv(trials_table(st), p, index=False),
        "recoveries.csv": lambda p: atomic_write_csv(pd.DataFrame(
            [{"trial": t, **asdict(e)} for t, r in enumerate(st.results) for e in r.episodes]
        ), p, index=False),
        "timeline.png": lambda p: plot_timeline(st, p),
        "recovery_cdf.png": lambda p: plot_recovery_cdf(st, p),
    }
    if st.search:
        files["interval_search.csv"] = lambda p: atomic_write_csv(pd.DataFrame(
            [asdict(c) for c in st.search.candidates]), p, index=False)
        files["ettr_vs_interval.png"] = lambda p: plot_ettr_vs_interval(st, p)
    paths = []
    for name, write in files.items():
        write(out / name)
        paths.append(out / name)
    return paths


def trials_table(st: Study) -> pd.DataFrame:
    rows = []
    for t, r in enumerate(st.results):
        rows.append({"trial": t, "wall_s": r.wall_s, "ettr": r.ettr, "iterations": r.iterations,
                     **{f"{c}_s": v for c, v in zip(CATEGORIES, r.seconds)},
                     **{f"failures_{c}": n for c, n in zip(CLASSES, r.failures)},
                     "interrupts": r.interrupts, "checkpoints": r.checkpoints,
                     "events": r.events, "completed": r.completed})
    return pd.DataFrame(rows)


def plot_timeline(st: Study, path: Path) -> None:
    """Progress of trial 0 against wall time, down periods shaded, failures marked."""
    r = st.results[0]
    fig, ax = plt.subplots(figsize=(9, 4))
    base = st.plan.t_base
    if r.timeline:
        ts = [t / DAY for t, _, _ in r.timeline]
        ps = [P * base / DAY for _, P, _ in r.timeline]
        ax.plot(ts, ps, color="tab:blue", lw=1.2, label="trained (days of healthy compute)")
        for (t0, _, down), (t1, _, _) in zip(r.timeline, r.timeline[1:]):
            if down:
                ax.axvspan(t0 / DAY, t1 / DAY, color="tab:red", alpha=0.25, lw=0)
        fails = [e.t0_s / DAY for e in r.episodes]
        ax.plot(fails, [0] * len(fails), "v", color="tab:red", label="failures")
        end = r.wall_s / DAY
        ax.plot([0, end], [0, end], ls="--", color="grey", lw=0.8, label="no failures")
    ax.set_xlabel("wall time (days)")
    ax.set_ylabel("training progress (days)")
    ax.set_title(f"{st.scenario.name}: trial 0, ETTR {r.ettr:.3f}")
    _save(fig, ax, path, grid=False, loc="upper left")


def plot_recovery_cdf(st: Study, path: Path) -> None:
    """Empirical CDFs of recovery time and downtime over all trials."""
    import numpy as np
    fig, ax = plt.subplots(figsize=(7, 4))
    for attr, label in (("recovery_s", "recovery (to progress regained)"),
                        ("downtime_s", "downtime (to training again)")):
        xs = np.sort([getattr(e, attr) / 60 for r in st.results for e in r.episodes])
        if xs.size:
            ax.step(xs, np.arange(1, xs.size + 1) / xs.size, where="post", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("minutes after the failure")
    ax.set_ylabel("fraction of recoveries")
    ax.set_title(f"{st.scenario.name}: {st.summary.recovery_s['n']} recoveries, "
                 f"{st.summary.trials} trials")
    _save(fig, ax, path)


def plot_ettr_vs_interval(st: Study, path: Path) -> None:
    """Simulated ETTR (mean +- standard error) and Daly's closed form against interval."""
    r = st.search
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [c.interval_s / 60 for c in r.candidates]
    ax.errorbar(xs, [c.ettr for c in r.candidates], yerr=[c.stderr for c in r.candidates],
                marker="o", ms=3, capsize=2, label="simulated")
    ax.plot(xs, [c.expected for c in r.candidates], ls="--", color="grey",
            label="Daly closed form (M, delta, R)")
    for x, label, color in ((r.young_s, "Young", "tab:green"), (r.daly_s, "Daly", "tab:orange"),
                            (r.best.interval_s, "best", "tab:red")):
        ax.axvline(x / 60, color=color, lw=0.8, ls=":", label=f"{label} {x / 60:.1f} min")
    ax.set_xscale("log")
    ax.set_xlabel("checkpoint interval (minutes of training)")
    ax.set_ylabel("ETTR")
    ax.set_title(f"{st.scenario.name}: ETTR against checkpoint interval")
    _save(fig, ax, path)


def _save(fig, ax, path: Path, grid: bool = True, loc: str = "best") -> None:
    if grid:
        ax.grid(alpha=0.3)
    ax.legend(loc=loc, fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
