"""``report.html`` of ``clustersim run --out``: how long one training step takes, whether it
fits in memory and where the time goes, in words first (:mod:`simulator.report.html`)."""

from __future__ import annotations

from pathlib import Path

from ..report import HtmlReport, Table
from .summary import Metrics

# every colour of gantt.png (simulator.metrics.outputs.GANTT_LEGEND), said in its caption
GANTT_CAPTION = ("What each stream runs, over time: forward blue, backward orange, recompute "
                 "(checkpointing) purple, optimizer step green, communication red, other "
                 "(copies, casts, host) grey")


def answer_sentences(m: Metrics, what: str, capacity_gib: float,
                     pipeline: bool = False) -> list[str]:
    """The result in words: step time and throughput, memory verdict, the biggest cost (a
    ``pipeline``'s waits are mostly its bubble, and named so)."""
    out = [f"One training step of {what} takes {m.iteration_time_s:.3g} s: "
           f"{m.tokens_per_s:,.0f} tokens/s ({m.samples_per_s:,.1f} samples/s), "
           f"{100 * m.mfu:.0f}% of the GPUs' peak arithmetic (MFU)."]
    if m.oom:
        where = "; ".join(f"{op}" for op in m.oom_at.values())
        out.append(f"It does NOT fit in memory: the peak is {m.peak_memory_gib:.1f} GiB per "
                   f"GPU against {capacity_gib:.1f} GiB (runs out at {where}).")
    else:
        out.append(f"It fits in memory: {m.peak_memory_gib:.1f} GiB per GPU at the peak, of "
                   f"{capacity_gib:.1f} GiB.")
    t = m.iteration_time_s or 1.0
    shares = {"computing": m.compute_s, "waiting on communication": m.exposed_comm_s,
              ("waiting in the pipeline bubble (stages idle while the schedule fills and "
               "drains) and other waits" if pipeline else
               "other waits (host work, memory)"): m.wait_s}
    top = max(shares, key=shares.get)
    out.append(f"Most of the step is spent {top} ({100 * shares[top] / t:.0f}%); "
               f"communication runs {m.comm_s:.3g} s in all, {m.exposed_comm_s:.3g} s of it "
               f"not hidden under compute.")
    return out


def write_page(out: Path, m: Metrics, rows: list[tuple[str, str]], what: str,
               capacity_gib: float, scenario: dict, accuracy: list[str] | None = None,
               extrapolated: str | None = None, energy: str | None = None,
               comm_kinds: tuple[str, list] | None = None, bubble: str = "",
               cost: str | None = None) -> Path:
    """Write ``out/report.html`` (``rows``: the metric lines ``run`` prints; ``accuracy``:
    the accuracy envelope's lines; ``extrapolated``: the note of a step extrapolated from a
    few replayed micro-steps, whose charts show the replayed ones; ``energy``: the step's
    energy in a sentence, :func:`simulator.energy.report.energy_sentence`; ``comm_kinds``:
    a caption and the step's :class:`~simulator.metrics.comm_kinds.CommKind` rows;
    ``bubble``: a pipeline's bubble in a sentence, :func:`simulator.cli.run.bubble_line`;
    ``cost``: what the step costs in a sentence, :func:`simulator.cli.run.cost_sentence`)."""
    page = HtmlReport(f"One training step: {what}", f"scenario {scenario.get('name', '')}")
    page.answer(*answer_sentences(m, what, capacity_gib, pipeline=bool(bubble)),
                *([bubble[:1].upper() + bubble[1:] + "."] if bubble else []),
                *([energy] if energy else []),
                *([cost[:1].upper() + cost[1:] + "."] if cost else []))
    if extrapolated:
        page.text(f"This step was not replayed in full: {extrapolated}.", note=True)
    if accuracy:
        page.heading("How far to trust it").text(*accuracy)
    page.table(Table("Metrics of one iteration", ["metric", "value"], rows,
                     note="compute_s: GPU kernels and copies; exposed_comm_s: communication "
                          "not under compute; wait_s: the rest (host work, a CPU optimizer "
                          "step; in a pipeline mostly its bubble); memory_wait_s: the time ops waited for free memory, "
                          "added up over ops that wait while compute runs, so it overlaps "
                          "the step and is no part of the breakdown (what it costs shows in "
                          "exposed_comm_s)."))
    if comm_kinds and comm_kinds[1]:
        caption, kinds = comm_kinds
        page.table(Table(caption[:1].upper() + caption[1:].rstrip(":"),
                         ["what it is for", "time (s)", "not under compute (s)", "ops",
                          "message sizes (GB)"],
                         [[k.kind, f"{k.busy_s:.4g}", f"{k.exposed_s:.4g}", f"{k.ops:,}",
                           f"{k.size_bytes / 1e9:.3g}"] for k in kinds],
                         note="Of the rank class the breakdown describes (the one that "
                              "finishes last). Kinds that run at the same time add up to "
                              "more than comm_s."))
    page.heading("Charts")
    for name, caption in (("breakdown.png", "Where the step's time goes"),
                          ("memory.png", "Memory per GPU over the step"),
                          ("gantt.png", GANTT_CAPTION)):
        page.image(out / name, caption)
    page.text("layers.csv, ops.csv and links.csv in this folder hold the detail; "
              "timeline.json opens in https://ui.perfetto.dev.", note=True)
    page.inputs("Scenario", scenario)
    return page.write(out)
