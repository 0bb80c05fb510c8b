"""``report.html`` of a study: each question's answer first, then the results table and the
plots inline (:mod:`simulator.report.html`); ``report.md`` says the same for a repository."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..report import HtmlReport, Table
from .points import LoadedStudy


def write_page(study: LoadedStudy, ok: pd.DataFrame, plots: list[Path],
               answered: list[tuple[str, str]], results: tuple[list[str], list[list[str]]],
               out: Path) -> Path:
    """Write ``out/report.html``; ``answered`` are (question, answer) pairs and ``results``
    the (header, rows) of the results table."""
    spec = study.spec
    page = HtmlReport(f"Study: {spec.name}", " ".join(spec.description.split()))
    page.answer(*[f"{ask} {text}" for ask, text in answered])
    header, rows = results
    finished = len(ok["point"].unique()) if len(ok) else 0
    if header:
        page.table(Table(f"Results ({finished} of {len(study.points)} points finished)",
                         header, rows, note="All columns: results.csv, results.parquet."))
    if plots:
        page.heading("Plots")
        for path in plots:
            page.image(path, path.stem.replace("_", " "))
    page.inputs("Study", {"command": spec.command, "base scenario": spec.base.scenario,
                          "base --set": dict(spec.base.set), "seed": spec.seed,
                          "grid axes": {k: list(v) for k, v in spec.axes.grid.items()},
                          "zipped axes": {k: list(v) for k, v in spec.axes.zip.items()}
                          if spec.axes.zip else {}})
    return page.write(out)
