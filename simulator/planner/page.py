"""``clustersim plan --out DIR``: plan.csv, plan.json and report.html (the answer first)."""

from __future__ import annotations

from pathlib import Path

from ..outpaths import atomic_write_text
from ..report import HtmlReport, Table
from .report import energy_line, header, records, to_csv, to_json
from .strategy import carried_lines


def answer(search) -> str:
    """The fastest replayed plan that fits, as a sentence (its short label in brackets)."""
    rows = records(search)
    best = next((i for i, d in enumerate(rows) if d["step_s"] is not None and not d["oom"]),
                None)
    if best is None:
        return (f"No replayed plan of {search.model} fits on {search.gpus} x {search.gpu}; "
                f"see the counts below.")
    d, words = rows[best], search.rows[best].candidate.words()
    cost = (f", ${d['usd_per_1m_tokens']:.3f} per 1M tokens"
            if d["usd_per_1m_tokens"] is not None else "")
    return (f"The fastest plan that fits: {words} ({d['plan']}): {d['step_s']:.3f} s per "
            f"step, {d['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, "
            f"{d['memory_gib']:.1f} GiB per GPU{cost}.")


def write_outputs(search, out: Path, inputs: dict, accuracy: list[str] = ()) -> None:
    atomic_write_text(out / "plan.csv", to_csv(search) + "\n")
    atomic_write_text(out / "plan.json", to_json(search) + "\n")
    rows = records(search)
    page = HtmlReport(f"clustersim plan: {search.model} on {search.gpus} x {search.gpu}",
                      header(search).removeprefix("# plan: "))
    page.answer(answer(search), "E" + energy_line(rows).removeprefix("# e") + ".")
    if accuracy:
        page.heading("How far to trust it").text(*accuracy)
    page.table(Table("Replayed plans, fastest first", (
        "#", "plan", "step s", "estimated s", "tokens/s/GPU", "GiB/GPU", "USD/1M tokens",
        "kWh/1M tokens", "Pareto"), [
            (d["rank"], d["plan"], _f(d["step_s"], ".3f"), _f(d["estimated_s"], ".3f"),
             _f(d["tokens_per_s_per_gpu"], ",.0f"),
             _f(d["memory_gib"], ".1f") + (" OOM" if d["oom"] else ""),
             _f(d["usd_per_1m_tokens"], ".3f"), _f(d["kwh_per_1m_tokens"], ".4g"),
             "yes" if d["pareto"] else "")
                    for d in rows], best=0 if rows else None))
    page.heading("Why they win")
    page.text(*(f"#{d['rank']} {d['plan']}: {d['why']}" for d in rows))
    page.text("Candidates are pruned by an analytical estimate (docs/plan.md); only the "
              "replayed ones are simulated.", *carried_lines(search.carried), note=True)
    for label, data in inputs.items():
        page.inputs(label, data)
    page.write(out)


def _f(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)
