"""``report.html`` of ``clustersim compare --out``: which strategy to choose, in money and
time, for a reader who will not open a terminal (:mod:`simulator.report.html`)."""

from __future__ import annotations

from pathlib import Path

from ..report import HtmlReport, Table
from .report import answer_sentences, cost_cells, perf_cells, records
from .results import Comparison

PERF_HEAD = ["strategy", "GPUs", "peak GiB per GPU", "memory", "iteration s", "samples/s",
              "tokens/s", "comm GB per GPU", "comm s", "exposed comm s",
              "forward GPU-ms per sample", "2x GPUs efficiency",
              "largest model that fits"]


def write_page(cmp: Comparison, out: Path, inputs: dict,
               accuracy: list[str] | None = None, trust: str = "") -> Path:
    """Write ``out/report.html`` next to the CSV, JSON and PNG files of ``compare --out``:
    the answer and how far to trust it (``trust``, one sentence) first, the tables, and the
    accuracy envelope's lines (``accuracy``) folded after them."""
    recs = records(cmp)
    ok = [r for r in recs if r["status"] == "ok"]
    c, s = cmp.cluster, cmp.settings
    page = HtmlReport(f"Which training strategy: {cmp.model} on {c['gpus']} x {c['gpu']}",
                      f"scenario {cmp.scenario}; {c['topology']}; micro-batch "
                      f"{s['micro_batch']}, sequence {s['seq_len']}, {s['precision']}")
    page.answer(*answer_sentences(cmp), *([trust] if trust else []))
    if cmp.price is not None:
        budget = cmp.budget is not None
        head = ["strategy", "$ per iteration", "$ per 1M tokens", "$ per 1k samples",
                "comm-wait %"]
        head += ["GPU-hours", "wall days", "training $", "comm-wait $", "migration $",
                 "total $"] if budget else []
        priced = [r for r in ok if r["per_iteration_usd"] is not None]
        page.table(Table(
            f"Cost at ${cmp.price.usd_per_gpu_hour:.4g} per GPU-hour ({cmp.price.label})",
            head + ["waste %"], [cost_cells(r, budget) for r in priced],
            best=next((i for i, r in enumerate(priced) if r["cheapest"]), None),
            note="waste % = share of that strategy's spend the cheapest strategy that fits "
                 "in memory would save. comm-wait % = share of paid GPU time spent waiting "
                 "on communication."))
    page.table(Table("Time and memory per strategy", PERF_HEAD, [perf_cells(r) for r in ok],
                     note=cmp.doubling and f"2x GPUs: {cmp.doubling} (weak scaling)."))
    na = [(r["strategy"], r["reason"]) for r in recs if r["status"] != "ok"]
    if na:
        page.table(Table("Strategies that cannot run here", ["strategy", "reason"], na))
    if accuracy:
        page.heading("How far to trust it").folded(
            "The accuracy envelope of each strategy: its nearest validated case, error band "
            "and distance from the validated ground", *accuracy)
    page.heading("Charts")
    for name, caption in (("cost.png", "Cost per strategy, split into computing and waiting"),
                          ("iteration_time.png", "Where an iteration's time goes"),
                          ("memory.png", "Peak memory per GPU against the GPU's memory")):
        page.image(out / name, caption)
    if cmp.notes:
        page.heading("Notes").text(*cmp.notes, note=True)
    page.inputs("Scenario and options", inputs)
    return page.write(out)
