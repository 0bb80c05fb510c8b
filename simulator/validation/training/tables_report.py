"""The FSDP tables' report (``report/fsdp_tables.md`` and ``fsdp_tables.csv``) and their
gated cases for ``clustersim validate``'s exit code (:func:`gated_cases`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simulator.outpaths import atomic_write_csv, atomic_write_text
from simulator.validation.common import md_table, report_dir
from simulator.validation.training.tables_run import (FRAMEWORK_GATES, MEDIAN_GATE,
                                                      MIN_MEDIAN_ROWS, ROW_GATE, SCALING_GATE,
                                                      TABLE_GATES, gates, scaling_rows, summarize)

REPORT_FILE = "fsdp_tables.md"
RESULTS_FILE = "fsdp_tables.csv"


def _pct(v: float) -> str:
    return f"{100 * v:+.1f}%" if np.isfinite(v) else "-"


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`.tables_run.summarize` as display strings."""
    s = summarize(df)
    return pd.DataFrame({
        "split": s["split"], "GPU": s["gpu_type"], "rows": s["rows"],
        "simulated": s["simulated"], "not modelled": s["not_modelled"],
        "within its row gate": s["within_gate"],
        "median abs err": [f"{100 * v:.1f}%" if np.isfinite(v) else "-"
                           for v in s["median_abs_err"]],
        "worst row": [f"{c} ({_pct(e)})" if c else "-"
                      for c, e in zip(s["worst_case"], s["worst_err"])],
    })


def rows_table(df: pd.DataFrame) -> pd.DataFrame:
    """One display row per table row."""
    return pd.DataFrame({
        "case": df["case"], "split": df["split"], "ckpt": df["checkpointing"],
        "measured tok/s/GPU": [f"{v:,.0f}" if np.isfinite(v) else "-" for v in df["measured"]],
        "simulated": [f"{v:,.0f}" if np.isfinite(v) else "-" for v in df["simulated"]],
        "error": [_pct(v) for v in df["error"]],
        "note": [n or ("OOM" if o else "") for n, o in zip(df["not_modelled"], df["oom"])],
    })


def markdown(df: pd.DataFrame, title: str, fitted: str = "") -> str:
    """The report text: gates, summary per split and GPU type, then every row."""
    lines = [f"# {title}", "",
             "llm-foundry MPT (Composer FSDP) and torchtitan (FSDP2) throughput, tokens/s "
             "per GPU; error = (simulated - measured) / measured. Split declared in "
             "validation/training/split.yaml before any fit.",
             f"Gates on the validation split, per GPU type: median |error| <= "
             f"{MEDIAN_GATE:.0%}, every row within {ROW_GATE:.0%} (A100, H100: the FSDP "
             f"tables); any other group, a framework x GPU family (issue 40): median <= "
             f"{FRAMEWORK_GATES[0]:.0%} from {MIN_MEDIAN_ROWS} rows, every row within "
             f"{FRAMEWORK_GATES[1]:.0%}.", ""]
    if fitted:
        lines += [fitted, ""]
    lines += ["## Summary", "", md_table(summary_table(df)), ""]
    sc = scaling_rows(df)
    if len(sc):
        lines += [f"## Scaling efficiency (validation; gate {100 * SCALING_GATE:.0f} points)",
                  "", "tokens/s/GPU at N GPUs over the same run on the fewest GPUs of its "
                  "table (same model, sequence, micro-batch).", "",
                  md_table(pd.DataFrame({
                      "case": sc["case"], "baseline": sc["baseline"],
                      "measured": [f"{v:.3f}" for v in sc["measured"]],
                      "simulated": [f"{v:.3f}" for v in sc["simulated"]],
                      "error": [f"{100 * v:+.1f} pt" for v in sc["error"]]})), ""]
    for gpu, g in df.groupby("gpu_type", sort=True):
        lines += [f"## {gpu}", "", md_table(rows_table(g)), ""]
    return "\n".join(lines)


def write(df: pd.DataFrame, out: Path | str, title: str, fitted: str = "") -> Path:
    """Write ``fsdp_tables.md`` and ``fsdp_tables.csv`` into ``out``; the report's path."""
    out = report_dir(out)
    atomic_write_csv(df, out / RESULTS_FILE, index=False, float_format="%.6g")
    path = out / REPORT_FILE
    atomic_write_text(path, markdown(df, title, fitted) + "\n")
    return path


def gated_cases(df: pd.DataFrame) -> list[dict]:
    """The gated cases (validation split): each simulated row within 15%, and per GPU type
    the median |error| within 5%; in the shape of :func:`simulator.validation.commands.case`."""
    from simulator.validation.commands import case
    ran = df[df["not_modelled"] == ""]
    out = [case(f"training/{r.case}", f"tokens/s/GPU ({r.split})", _pct(r.error),
                f"<= {gates(r.gpu_type)[1]:.0%}",
                bool(r.ok) if r.split == "validation" else None, r.error)
           for r in ran.itertuples()]
    out += [case(f"training/{r.case}", "weak-scaling efficiency (validation)",
                 f"{100 * r.error:+.1f} points", f"<= {100 * SCALING_GATE:.0f} points",
                 bool(r.ok), r.error) for r in scaling_rows(df).itertuples()]
    val = ran[ran["split"] == "validation"]
    for gpu, g in val.groupby("gpu_type", sort=True):
        med, gate = float(g["error"].abs().median()), gates(gpu)[0]
        if gpu in TABLE_GATES or len(g) >= MIN_MEDIAN_ROWS:
            out.append(case(f"training/fsdp-tables/{gpu}/median", "median |tokens/s/GPU "
                            f"error| over {len(g)} validation rows", f"{100 * med:.1f}%",
                            f"<= {gate:.0%}", med <= gate, med))
    return out




def run_and_write(out: Path | str, root=None, calibration=None, splits=None,
                  title: str = "FSDP tables: llm-foundry and torchtitan") -> tuple:
    """Load, simulate (only ``splits`` when given) and write the tables' report; returns
    (results, report path, gated cases)."""
    from simulator.validation.training.tables import load_rows
    from simulator.validation.training.tables_run import run_rows
    rows = [r for r in load_rows(root) if not splits or r.split in splits]
    df = run_rows(rows, calibration)
    return df, write(df, out, title, fitted_note()), gated_cases(df)


def fitted_note() -> str:
    """One line on the fitted family factors in use (simulator/data/training_fit.yaml)."""
    from simulator.compute.training_fit import (KERNEL_GROUPS, STACK_GROUPS, STACK_MODELS,
                                                families)
    fams = families()
    if not fams:
        return "Fitted family factors: none (simulator/data/training_fit.yaml is empty)."
    parts = []
    for name, (_, fit) in fams.items():
        tf = ", ".join(f"{g} x{v:.3f}" for g, v in fit.time_factor.items())
        parts.append(f"{name}: {tf}, +{fit.kernel_overhead_s * 1e6:.1f} us/kernel")
    scope = next((fit.stack_strategies for _, fit in fams.values() if fit.stack_strategies),
                 None)
    where = (f"; fp16 and bf16 kernels and FP8 GEMMs; {' and '.join(KERNEL_GROUPS)} under "
             f"every strategy, {', '.join(STACK_GROUPS)} and the overhead under "
             f"{', '.join(scope)} for {', '.join(STACK_MODELS)} models" if scope else "")
    return (f"Fitted family factors (simulator/data/training_fit.yaml{where}): "
            + "; ".join(parts) + ".")


__all__ = ["REPORT_FILE", "RESULTS_FILE", "fitted_note", "gated_cases", "markdown",
           "rows_table", "run_and_write", "summary_table", "write"]
