"""``report.html`` of ``clustersim compare --out``: which strategy to choose, in money and
time, for a reader who will not open a terminal (:mod:`simulator.report.html`)."""

from __future__ import annotations

from pathlib import Path

from ..choices import NAMED_STRATEGIES
from ..report import HtmlReport, Table
from .report import cost_cells, perf_cells, records
from .results import Comparison

PERF_HEAD = ["strategy", "GPUs", "peak GiB per GPU", "memory", "iteration s", "samples/s",
              "tokens/s", "comm GB per GPU", "comm s", "exposed comm s",
              "forward GPU-ms per sample", "2x GPUs efficiency",
              "largest model that fits"]


def _named(key: str) -> str:
    """``fsdp-full`` -> ``FSDP FULL_SHARD (ZeRO-3) (fsdp-full)``."""
    named = NAMED_STRATEGIES.get(key)
    return f"{named.label} ({key})" if named else key


def answer_sentences(cmp: Comparison) -> list[str]:
    """The decision in words: the cheapest strategy that fits, against the runner-up, and
    what does not fit or cannot run."""
    recs = records(cmp)
    ok = [r for r in recs if r["status"] == "ok"]
    fits = [r for r in ok if not r["oom"]]
    out = []
    best = next((r for r in recs if r["cheapest"]), None)
    if best is not None:
        per_tok = best["per_million_tokens_usd"]
        others = sorted((r for r in fits if r is not best and r["per_million_tokens_usd"]),
                        key=lambda r: r["per_million_tokens_usd"])
        text = (f"{_named(best['strategy'])} is the cheapest strategy that fits in memory: "
                f"${per_tok:,.3g} per 1M tokens at {best['iteration_time_s']:.3g} s per "
                f"iteration on {cmp.cluster['gpus']} x {cmp.cluster['gpu']}")
        if others:
            nxt = others[0]
            waste = nxt["waste_vs_cheapest"] or 0.0
            text += (f", {100 * waste:.1f}% less than the next, {_named(nxt['strategy'])} "
                     f"(${nxt['per_million_tokens_usd']:,.3g})" if waste >= 0.0005 else
                     f"; {_named(nxt['strategy'])} costs the same")
        out.append(text + ".")
        if best["total_usd"] is not None and cmp.budget is not None:
            out.append(f"For {cmp.budget.describe()} it costs ${best['total_usd']:,.0f} and "
                       f"takes {best['wall_hours'] / 24:,.1f} days.")
    elif cmp.price is None:
        out.append(f"No price is known for {cmp.cluster['gpu']}: pass --price-per-gpu-hour "
                   f"or --instance to rank the strategies by cost.")
    else:
        out.append("No strategy fits in memory on this cluster.")
    oom = [r["strategy"] for r in ok if r["oom"]]
    if oom:
        out.append(f"Out of memory ({cmp.cluster['gpu_memory_gib']:.0f} GiB per GPU), so "
                   f"not a choice here: {', '.join(oom)}.")
    na = [r["strategy"] for r in recs if r["status"] != "ok"]
    if na:
        out.append(f"Cannot run on this cluster: {', '.join(na)} (reasons below).")
    least = min((r for r in fits if r["kwh_per_1m_tokens"] is not None),
                key=lambda r: (r["kwh_per_1m_tokens"], r["strategy"]), default=None)
    if least is not None and cmp.site is not None:
        out.append(f"{_named(least['strategy'])} uses the least energy: "
                   f"{least['kwh_per_1m_tokens']:.3g} kWh per 1M tokens at the site (PUE "
                   f"{cmp.site.pue:g}), {least['co2_kg_per_1m_tokens']:.3g} kg CO2 and "
                   f"${least['electricity_usd_per_1m_tokens']:.3g} of electricity.")
    return out


def write_page(cmp: Comparison, out: Path, inputs: dict,
               accuracy: list[str] | None = None) -> Path:
    """Write ``out/report.html`` next to the CSV, JSON and PNG files of ``compare --out``
    (``accuracy``: the accuracy envelope's lines)."""
    recs = records(cmp)
    ok = [r for r in recs if r["status"] == "ok"]
    c, s = cmp.cluster, cmp.settings
    page = HtmlReport(f"Which training strategy: {cmp.model} on {c['gpus']} x {c['gpu']}",
                      f"scenario {cmp.scenario}; {c['topology']}; micro-batch "
                      f"{s['micro_batch']}, sequence {s['seq_len']}, {s['precision']}")
    page.answer(*answer_sentences(cmp))
    if accuracy:
        page.heading("How far to trust it").text(*accuracy)
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
    page.heading("Charts")
    for name, caption in (("cost.png", "Cost per strategy, split into computing and waiting"),
                          ("iteration_time.png", "Where an iteration's time goes"),
                          ("memory.png", "Peak memory per GPU against the GPU's memory")):
        page.image(out / name, caption)
    if cmp.notes:
        page.heading("Notes").text(*cmp.notes, note=True)
    page.inputs("Scenario and options", inputs)
    return page.write(out)
