"""Per-table summary of the collective validation and its report: text table,
``report.md``, ``results.csv`` and the plots of :mod:`.plots`."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.constants import ModelConstants
from simulator.outpaths import atomic_write_csv, atomic_write_text
from simulator.validation.collectives.fitted import calibrated_values
from simulator.validation.collectives.plots import _plot_overview, _plot_table
from simulator.validation.collectives.schema import (BUSBW_THRESHOLD, GOAL, LARGE_BYTES,
                                                     SMALL_BYTES, TIME_THRESHOLD)
from simulator.validation.common import md_table as _md_table
from simulator.validation.common import report_dir


# ---------------------------------------------------------------------------- summary
def _median_abs(x: pd.Series) -> float:
    x = x.dropna()
    return float(np.median(np.abs(x))) if len(x) else float("nan")


def _max_abs(x: pd.Series) -> float:
    x = x.dropna()
    return float(np.max(np.abs(x))) if len(x) else float("nan")


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per table: split, points, median and max |busbw err| (>= 1 MiB) and |time err|
    (<= 64 KiB), and whether each meets its threshold (``None`` where nothing to judge).

    Errors are only taken on measured (not ``derived``) quantities.
    """
    rows = []
    for tid, g in df.groupby("table_id", sort=False):
        large = g[(g["size_bytes"] >= LARGE_BYTES) & (g["derived"] != "busbw_GBps")]
        small = g[(g["size_bytes"] <= SMALL_BYTES) & (g["derived"] != "time_us")]
        b_med, t_med = _median_abs(large["busbw_err"]), _median_abs(small["time_err"])
        rows.append({
            "table_id": tid, "split": g["split"].iloc[0], "op": "+".join(dict.fromkeys(g["op"])),
            "n": len(g), "n_large": int(large["busbw_err"].notna().sum()),
            "busbw_med": b_med, "busbw_max": _max_abs(large["busbw_err"]),
            "n_small": int(small["time_err"].notna().sum()),
            "time_med": t_med, "time_max": _max_abs(small["time_err"]),
            "busbw_ok": None if math.isnan(b_med) else bool(b_med <= BUSBW_THRESHOLD),
            "time_ok": None if math.isnan(t_med) else bool(t_med <= TIME_THRESHOLD),
            "quality": "WEAK" if (g["quality"] == "WEAK").any() else "",
        })
    return pd.DataFrame(rows, columns=["table_id", "split", "op", "n", "n_large", "busbw_med",
                                       "busbw_max", "n_small", "time_med", "time_max",
                                       "busbw_ok", "time_ok", "quality"])


def format_summary(summary: pd.DataFrame) -> str:
    """The summary as a fixed-width text table (percent errors)."""
    def pct(v):
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}%"

    def ok(v, split):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        mark = "ok" if v else "FAIL"
        return mark if split == "validation" else f"({mark})"

    table = pd.DataFrame({
        "table": summary["table_id"], "split": summary["split"], "op": summary["op"],
        "n": summary["n"],
        "busbw>=1MiB med": summary["busbw_med"].map(pct),
        "max": summary["busbw_max"].map(pct),
        "gate": [ok(v, s) for v, s in zip(summary["busbw_ok"], summary["split"])],
        "time<=64KiB med": summary["time_med"].map(pct),
        "max ": summary["time_max"].map(pct),
        "gate ": [ok(v, s) for v, s in zip(summary["time_ok"], summary["split"])],
        "weak": summary["quality"],
    })
    return table.to_string(index=False)


# ----------------------------------------------------------------------------- report
def _fmt_size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def _fmt(v, spec="{:.2f}"):
    return "-" if v is None or (isinstance(v, float) and not np.isfinite(v)) else spec.format(v)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _failing(summary: pd.DataFrame) -> list[str]:
    """``table (busbw+time)`` for each validation table failing a threshold."""
    vs = summary[summary["split"] == "validation"]
    return [f"{r.table_id} ({'busbw' if r.busbw_ok is False else ''}"
            f"{'+' if r.busbw_ok is False and r.time_ok is False else ''}"
            f"{'time' if r.time_ok is False else ''})"
            for r in vs.itertuples() if r.busbw_ok is False or r.time_ok is False]


def _header(df: pd.DataFrame, summary: pd.DataFrame, consts: dict | None,
            title: str) -> list[str]:
    """The report's title, split, thresholds, constants and verdict lines."""
    cal = summary[summary["split"] == "calibration"]["table_id"].tolist()
    val = summary[summary["split"] == "validation"]["table_id"].tolist()
    fails = _failing(summary)
    return [
        f"# {title}", "",
        "Simulated NCCL collectives compared with published nccl-tests measurements on A100 "
        "and H100 systems (`validation/collectives/measurements.csv`; every row keeps its "
        "source).", "",
        "**Split.** Calibration constants may be fitted only on the *calibration* tables "
        f"({', '.join(cal) or 'none here'}). The *validation* tables "
        f"({', '.join(val) or 'none here'}) are held out: they are never used to fit or tune "
        "anything, and their errors are the honest measure of accuracy. The only PCIe table "
        "(cn_doc_4x_a100pcie) is a calibration table, so PCIe-only servers have no held-out "
        "check.", "",
        f"**Thresholds** (per validation table): median |busbw error| <= "
        f"{BUSBW_THRESHOLD:.0%} over sizes >= 1 MiB, median |time error| <= "
        f"{TIME_THRESHOLD:.0%} over sizes <= 64 KiB. Goal: {GOAL:.0%} on busbw. "
        "Errors are (simulated - measured) / measured, taken only on measured quantities "
        "(a value marked `derived` is computed from the other one and not judged).", "",
        f"Fidelity: `{df.attrs.get('fidelity', '?')}`." + (
            " Constants: " + ", ".join(f"{k} = {v:.4g}" for k, v in consts.items()) + "."
            if consts else ""), "",
        ("**Validation tables failing a threshold:** " + ", ".join(fails) + ".")
        if fails else "**All validation tables meet the thresholds.**", "",
        "## Summary", "",
        "![overview](overview.png)", "",
    ]


def _summary_section(summary: pd.DataFrame) -> list[str]:
    shown = summary.assign(
        busbw_med=summary["busbw_med"].map(lambda v: _fmt(100 * v, "{:.1f}%")),
        busbw_max=summary["busbw_max"].map(lambda v: _fmt(100 * v, "{:.1f}%")),
        time_med=summary["time_med"].map(lambda v: _fmt(100 * v, "{:.1f}%")),
        time_max=summary["time_max"].map(lambda v: _fmt(100 * v, "{:.1f}%")),
        busbw_ok=summary["busbw_ok"].map(lambda v: "-" if v is None else ("ok" if v else "FAIL")),
        time_ok=summary["time_ok"].map(lambda v: "-" if v is None else ("ok" if v else "FAIL")),
    )
    return [_md_table(shown), "",
            "Gates (`busbw_ok`, `time_ok`) apply to validation tables; on calibration "
            "tables they are shown for information only. `quality` WEAK marks tables whose "
            "provenance is weak or partial.", ""]


def _table_section(g: pd.DataFrame, tid: str, note, plot_name: str) -> list[str]:
    """The section of table ``tid`` (rows ``g``): its note, plot and per-size rows."""
    lines = [f"## {tid} ({g['split'].iloc[0]})", ""]
    if note:
        lines += [" ".join(str(note).split()), ""]
    lines += [f"![{tid}]({plot_name})", ""]
    per = pd.DataFrame({
        "op": g["op"], "size": g["size_bytes"].map(_fmt_size),
        "meas time us": g["meas_time_us"].map(lambda v: _fmt(v)),
        "sim time us": g["sim_time_us"].map(lambda v: _fmt(v)),
        "time err": g["time_err"].map(lambda v: _fmt(100 * v, "{:+.1f}%")),
        "meas busbw GB/s": g["meas_busbw_GBps"].map(lambda v: _fmt(v)),
        "sim busbw GB/s": g["sim_busbw_GBps"].map(lambda v: _fmt(v)),
        "busbw err": g["busbw_err"].map(lambda v: _fmt(100 * v, "{:+.1f}%")),
        "algo/proto": g["algorithm"] + "/" + g["protocol"],
        "derived": g["derived"].replace("", "-"),
    })
    return lines + [_md_table(per), ""]


def write_report(df: pd.DataFrame, out_dir: Path | str, constants: ModelConstants | None = None,
                 title: str = "Collective validation against A100 and H100 nccl-tests") -> dict:
    """Write ``report.md``, ``results.csv`` and PNG plots (one per table, ``overview.png``).

    Returns the paths written, by kind.
    """
    out = report_dir(out_dir)
    summary = summarize(df)
    results = out / "results.csv"
    atomic_write_csv(df, results, index=False)
    plots = {tid: out / f"busbw_{_safe(tid)}.png" for tid in summary["table_id"]}
    for tid, path in plots.items():
        _plot_table(df[df["table_id"] == tid], tid, path)
    overview = out / "overview.png"
    _plot_overview(summary, overview)

    consts = calibrated_values(constants) if constants is not None else \
        df.attrs.get("constants")
    notes = df.attrs.get("notes", {})
    lines = _header(df, summary, consts, title) + _summary_section(summary)
    for tid in summary["table_id"]:
        lines += _table_section(df[df["table_id"] == tid], tid, notes.get(tid),
                                plots[tid].name)
    report = out / "report.md"
    atomic_write_text(report, "\n".join(lines))
    return {"report": report, "results": results, "plots": [*plots.values(), overview]}


__all__ = ["format_summary", "summarize", "write_report"]
