"""Files of ``clustersim cluster --out DIR``: tables, plots and report.html.

``jobs.csv`` (one row per job: queue time, run time, slowdown from contention, goodput,
restarts), ``fleet.csv`` (the cluster after each event: GPUs allocated and doing useful
work, running and queued jobs, GPUs down), ``summary.json``, ``utilisation.png``,
``jct_cdf.png``, ``power.png`` (facility power against the site budget, where the GPU has
power data) and ``report.html``. The folder is prepared as ``clustersim run`` does.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..metrics.outputs import plt
from ..outpaths import atomic_write_csv, atomic_write_text, prepare_out_dir, save_figure
from ..report import HtmlReport, Table
from ..reliability.quantities import format_duration as fd
from .simulate import FleetResult
from .summary import table_lines

HOUR = 3600.0


def write_outputs(out: Path | str, result: FleetResult, summary: dict, sentences: list[str],
                  title: str, inputs: dict) -> list[Path]:
    """Write every file into ``out``; return their paths."""
    out = prepare_out_dir(out)
    jobs, fleet = pd.DataFrame(result.jobs), pd.DataFrame(result.samples)
    atomic_write_csv(jobs, out / "jobs.csv", index=False)
    atomic_write_csv(fleet, out / "fleet.csv", index=False)
    atomic_write_text(out / "summary.json", json.dumps(
        {"summary": summary, "answer": sentences, "mix": inputs}, indent=2, default=str))
    plot_utilisation(fleet, result, out / "utilisation.png")
    plot_jct(jobs, out / "jct_cdf.png")
    if "power_kw" in fleet:
        plot_power(fleet, result, summary.get("power_budget_kw"), out / "power.png")
    page = HtmlReport(f"Many jobs, one cluster: {title}",
                      f"{summary['jobs']} jobs on {summary['gpus']:,} GPUs")
    page.answer(*sentences)
    page.table(Table("The fleet", ["", "value"], table_lines(summary)))
    page.heading("Charts")
    page.image(out / "utilisation.png", "GPUs allocated and doing useful work; jobs queued")
    page.image(out / "jct_cdf.png", "Job completion time (arrival to end)")
    if "power_kw" in fleet:
        page.image(out / "power.png", "The fleet's facility power against the site budget")
    page.table(_slowest(jobs))
    page.inputs("Mix", inputs)
    page.write(out)
    return [out / n for n in ("jobs.csv", "fleet.csv", "summary.json", "utilisation.png",
                              "jct_cdf.png", "report.html")
            + (("power.png",) if "power_kw" in fleet else ())]


def _slowest(jobs: pd.DataFrame) -> Table:
    top = jobs.dropna(subset=["slowdown"]).sort_values(["slowdown", "job"],
                                                      ascending=[False, True]).head(10)
    return Table("The ten jobs slowed most by their neighbours",
                 ["job", "kind", "GPUs", "queue", "run", "slowdown", "restarts"],
                 [(r.job, r.kind, r.gpus, fd(r.queue_s), fd(r.run_s), f"{r.slowdown:.4f}",
                   r.restarts) for r in top.itertuples()])


def plot_utilisation(fleet: pd.DataFrame, result: FleetResult, path: Path) -> None:
    fig, (ax, aq) = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    if len(fleet):
        t = np.append(fleet["time_s"].to_numpy(), result.end_s) / HOUR
        for key, label in (("busy_gpus", "allocated"), ("useful_gpus", "useful"),
                           ("down_gpus", "down")):
            v = fleet[key].to_numpy()
            ax.step(t, np.append(v, v[-1]) / result.n_gpus * 100, where="post", label=label)
        q = fleet["queued"].to_numpy()
        aq.step(t, np.append(q, q[-1]), where="post", color="tab:purple")
    ax.set_ylabel("% of GPUs")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    aq.set_ylabel("jobs queued")
    _finish(fig, aq, "time (hours)", path)


def plot_power(fleet: pd.DataFrame, result: FleetResult, budget_kw: float | None,
               path: Path) -> None:
    """Facility power after each event (kW), the site budget as a line."""
    fig, ax = plt.subplots(figsize=(9, 3.5))
    t = np.append(fleet["time_s"].to_numpy(), result.end_s) / HOUR
    v = fleet["power_kw"].to_numpy()
    ax.step(t, np.append(v, v[-1]), where="post", label="facility power")
    if budget_kw is not None:
        ax.axhline(budget_kw, color="tab:red", ls="--", lw=1, label=f"budget {budget_kw:g} kW")
    ax.set_ylabel("kW")
    ax.legend(fontsize=8)
    _finish(fig, ax, "time (hours)", path)


def plot_jct(jobs: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    done = jobs[jobs["state"] == "done"]
    xs = np.sort((done["end_s"] - done["arrival_s"]).to_numpy() / HOUR)
    if xs.size:
        ax.step(xs, np.arange(1, xs.size + 1) / xs.size, where="post")
        if xs[0] > 0:
            ax.set_xscale("log")
    ax.set_ylabel("fraction of jobs")
    _finish(fig, ax, "job completion time (hours)", path)


def _finish(fig, ax, xlabel: str, path: Path) -> None:
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
