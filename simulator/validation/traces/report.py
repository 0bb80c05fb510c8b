"""The trace validation's report: ``report.md`` with its tables, the CSVs and the plot of
validation/traces/, and the one-paragraph summary the command prints."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator.outpaths import atomic_write_csv, atomic_write_text, save_figure
from simulator.validation.common import md_table, report_dir
from simulator.validation.traces.text import report_text
from simulator.validation.traces.validate import (COLLECTIVE_GOAL, REPORT, STEP_GATE,
                                                  default_root, summarize)


def _ms(x: float) -> str:
    return f"{1e3 * x:.3f}"


def _us(x: float) -> str:
    return f"{1e6 * x:.1f}"


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def step_table(steps: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "step": [f"ProfilerStep#{s}" for s in steps.step],
        "recorded step (ms)": steps.recorded_step_s.map(_ms),
        "recorded iteration (ms)": steps.recorded_iteration_s.map(_ms),
        "simulated (ms)": steps.simulated_s.map(_ms), "error": steps.error.map(_pct),
        "simulated, tuner (ms)": steps.simulated_tuner_s.map(_ms),
        "replayed with recorded NCCL times (ms)": steps.replayed_recorded_comm_s.map(_ms),
        "GPU busy (ms)": steps.gpu_busy_s.map(_ms),
        "collectives done, recorded (ms)": steps.recorded_sync_s.map(_ms),
        "collectives done, simulated (ms)": steps.simulated_sync_s.map(_ms),
        "collectives done, error": (steps.simulated_sync_s / steps.recorded_sync_s
                                    - 1).map(_pct)})


def collective_rows(colls: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "step": colls.step, "op": colls.op_id, "collective": colls.collective,
        "size (bytes)": colls.size_bytes, "dtype": colls.dtype,
        "recorded (us)": colls.recorded_s.map(_us),
        "simulated RING/LL (us)": colls.simulated_s.map(_us), "error": colls.error.map(_pct),
        "tuner": colls.tuner_algo, "tuner (us)": colls.tuner_s.map(_us),
        "tuner error": colls.tuner_error.map(_pct)})


def size_rows(colls: pd.DataFrame) -> pd.DataFrame:
    g = colls.groupby(["collective", "size_bytes"], sort=True)
    df = g.agg(n=("recorded_s", "size"), fastest=("recorded_s", "min"),
               median=("recorded_s", "median"), simulated=("simulated_s", "first"))
    df = df.reset_index()
    return pd.DataFrame({
        "collective": df.collective, "size (bytes)": df.size_bytes, "instances": df.n,
        "fastest recorded (us)": df.fastest.map(_us),
        "median recorded (us)": df["median"].map(_us),
        "simulated (us)": df.simulated.map(_us),
        "error vs fastest": (df.simulated / df.fastest - 1).map(_pct)})


def plot(colls: pd.DataFrame, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 4))
    for name, g in colls.groupby("collective"):
        ax.scatter(g.recorded_s * 1e6, g.simulated_s * 1e6, label=name)
    lo, hi = 3.0, 1e4
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="simulated = recorded")
    ax.set(xscale="log", yscale="log", xlabel="recorded NCCL kernel (us)",
           ylabel="simulated (us)", title="A100 DDP trace: NCCL kernel durations")
    ax.legend(fontsize=8)
    save_figure(fig, path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def write_report(results: dict, root: Path | None = None) -> Path:
    """Write ``report.md``, ``a100_steps.csv``, ``a100_collectives.csv`` and
    ``a100_collectives.png`` into ``root`` (default validation/traces); returns the
    report's path."""
    out = report_dir(root if root is not None else default_root())
    atomic_write_csv(results["steps"], out / "a100_steps.csv", index=False)
    atomic_write_csv(results["collectives"], out / "a100_collectives.csv", index=False)
    plot(results["collectives"], out / "a100_collectives.png")
    text = report_text(results, summarize(results), {
        "steps": md_table(step_table(results["steps"])),
        "collectives": md_table(collective_rows(results["collectives"])),
        "sizes": md_table(size_rows(results["collectives"]))})
    atomic_write_text(out / REPORT, text)
    return out / REPORT


def format_summary(results: dict) -> str:
    s = summarize(results)
    return (f"A100 DDP trace, ProfilerStep#{s['steady_step']}: step time error "
            f"{100 * s['step_error']:+.1f}% (gate |error| <= {STEP_GATE:.0%}: "
            f"{'pass' if s['step_ok'] else 'FAIL'}; the step is host-bound, GPU busy "
            f"{100 * s['gpu_busy_fraction']:.0f}%); NCCL kernel durations: median |error| "
            f"{100 * s['median_abs_error']:.1f}% (all-reduces "
            f"{100 * s['median_abs_error_all_reduce']:.1f}%; goal {COLLECTIVE_GOAL:.0%}: "
            f"{'met' if s['collectives_ok'] else 'missed'})")


__all__ = ["format_summary", "write_report"]
