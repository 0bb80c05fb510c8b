"""Summary of the training validation and its report: per-case display table, text
summary, ``report.md``, ``results.csv`` and the plot of :mod:`.plots`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simulator.outpaths import atomic_write_csv, atomic_write_text
from simulator.validation.common import md_table as _md_table
from simulator.validation.common import report_dir
from simulator.validation.training.plots import _plot
from simulator.validation.training.schema import (SCALING_THRESHOLD, SPLITS,
                                                  THROUGHPUT_THRESHOLD)

PLOT_FILE = "measured_vs_simulated.png"


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per split and kind of error (throughput / scaling): cases, how many pass the gate,
    median and max |error|."""
    rows = []
    for split in SPLITS:
        for kind, name in (("relative", "throughput"), ("points", "scaling_efficiency")):
            g = df[(df["split"] == split) & (df["error_kind"] == kind)]
            if g.empty:
                continue
            e = g["error"].abs().dropna()
            rows.append({"split": split, "kind": name, "n": len(g), "n_ok": int(g["ok"].sum()),
                         "median_abs_err": float(e.median()) if len(e) else float("nan"),
                         "max_abs_err": float(e.max()) if len(e) else float("nan"),
                         "threshold": float(g["threshold"].iloc[0])})
    return pd.DataFrame(rows, columns=["split", "kind", "n", "n_ok", "median_abs_err",
                                       "max_abs_err", "threshold"])


def _err_text(err: float, kind: str) -> str:
    if not np.isfinite(err):
        return "-"
    return f"{100 * err:+.1f}%" if kind == "relative" else f"{100 * err:+.1f} pt"


def _value_text(v: float, metric: str) -> str:
    if not np.isfinite(v):
        return "-"
    return f"{v:.3f}" if metric == "scaling_efficiency" else f"{v:.4g}"


def _gate_text(ok: bool, split: str) -> str:
    mark = "ok" if ok else "FAIL"
    return mark if split == "validation" else f"({mark})"


def results_table(df: pd.DataFrame) -> pd.DataFrame:
    """The per-case rows as display strings (for the CLI and the report)."""
    return pd.DataFrame({
        "case": df["case"], "split": df["split"], "metric": df["metric"],
        "measured": [_value_text(v, m) for v, m in zip(df["measured"], df["metric"])],
        "simulated": [_value_text(v, m) for v, m in zip(df["simulated"], df["metric"])],
        "error": [_err_text(e, k) for e, k in zip(df["error"], df["error_kind"])],
        "gate": [_gate_text(o, s) for o, s in zip(df["ok"], df["split"])],
        "oom": df["oom"].map(lambda v: "OOM" if v else ""),
    })


def format_summary(df: pd.DataFrame) -> str:
    """Per-case table and the gate count, as text."""
    val = df[df["split"] == "validation"]
    lines = [results_table(df).to_string(index=False), "",
             f"gates (validation cases): |throughput err| <= {THROUGHPUT_THRESHOLD:.0%}, "
             f"|scaling efficiency err| <= {100 * SCALING_THRESHOLD:.0f} points; "
             f"{int((~val['ok']).sum())} of {len(val)} fail"]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- report
def _summary_shown(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with its errors and thresholds as text (% or points by kind)."""
    return summary.assign(
        median_abs_err=[_err_text(v, "relative" if k == "throughput" else "points")
                        .lstrip("+") for v, k in zip(summary["median_abs_err"], summary["kind"])],
        max_abs_err=[_err_text(v, "relative" if k == "throughput" else "points").lstrip("+")
                     for v, k in zip(summary["max_abs_err"], summary["kind"])],
        threshold=[_err_text(v, "relative" if k == "throughput" else "points").lstrip("+")
                   for v, k in zip(summary["threshold"], summary["kind"])])


def _cases_table(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`results_table` with the iteration time, MFU, exposed comm and peak memory."""
    table = results_table(df)
    table["iteration s"] = df["iteration_time_s"].map(lambda v: f"{v:.4g}")
    table["MFU"] = df["mfu"].map(lambda v: f"{100 * v:.1f}%")
    table["exposed comm s"] = df["exposed_comm_s"].map(lambda v: f"{v:.3g}")
    table["peak mem GiB"] = df["peak_memory_gib"].map(lambda v: f"{v:.1f}")
    return table


def _report_lines(df: pd.DataFrame, title: str, plot: Path) -> list[str]:
    """``report.md`` up to its notes."""
    consts = df.attrs.get("constants") or {}
    val = df[df["split"] == "validation"]
    fails = val[~val["ok"]]["case"].tolist()
    shown = _summary_shown(summarize(df))
    table = _cases_table(df)
    return [
        f"# {title}", "",
        "Simulated training iterations compared with published A100 numbers "
        "(`validation/training/measurements.csv`: NVIDIA DeepLearningExamples single-node "
        "PyTorch tables, PyTorch FSDP blog; every row keeps its source).", "",
        "**Split.** Only the *calibration* cases (1-GPU ResNet-50 and 1-GPU BERT-large seq "
        "128, TF32 and AMP) may be used to fit compute constants. Every *validation* case is "
        "held out. Errors are (simulated - measured) / measured for throughput, and simulated "
        "- measured in percentage points for scaling efficiency = throughput(N) / (N x "
        "throughput(1)), measured = the published scaling factor / N.", "",
        f"**Gate** (validation cases): |throughput error| <= {THROUGHPUT_THRESHOLD:.0%}, "
        f"|scaling-efficiency error| <= {100 * SCALING_THRESHOLD:.0f} points.", "",
        ("Compute constants (eff_max): " + ", ".join(f"{k} = {v:.3f}" for k, v in
                                                      consts.items()) + ".") if consts else "",
        "",
        ("**Validation cases failing the gate:** " + ", ".join(fails) + ".") if fails
        else "**All validation cases pass the gate.**", "",
        f"![measured vs simulated]({plot.name})", "",
        "## Summary", "", _md_table(shown), "",
        "## Cases", "", _md_table(table), "",
        "Gate marks in parentheses are calibration cases (information only). OOM: the "
        "simulated peak memory exceeds the GPU's; the measured run did fit.", "",
        "## Notes", "",
    ]


def write_report(df: pd.DataFrame, out_dir: Path | str,
                 title: str = "Training validation against published A100 throughput") -> dict:
    """Write ``report.md``, ``results.csv`` and ``measured_vs_simulated.png`` to ``out_dir``.

    Returns the paths written, by kind.
    """
    out = report_dir(out_dir)
    results = out / "results.csv"
    atomic_write_csv(df, results, index=False)
    plot = out / PLOT_FILE
    _plot(df, plot)
    notes = df.attrs.get("notes", {})
    lines = _report_lines(df, title, plot)
    for cid in df["case"]:
        if notes.get(cid):
            lines.append(f"* **{cid}**: {notes[cid]}")
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    return {"report": out / "report.md", "results": results, "plots": [plot]}


__all__ = ["PLOT_FILE", "format_summary", "results_table", "summarize", "write_report"]
