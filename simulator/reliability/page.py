"""``report.html`` of ``clustersim reliability --out``: how much of the job's time trains,
what a failure costs, and which checkpoint interval to use (:mod:`simulator.report.html`)."""

from __future__ import annotations

from pathlib import Path

from ..report import HtmlReport, Table
from .quantities import format_duration as fd
from .report import BUSY, energy, table, worst_words
from .results import CATEGORIES
from .study import Study


def answer_sentences(st: Study) -> list[str]:
    """The result in words: ETTR, the typical and worst recovery, the interval to use."""
    s, i = st.summary, st.info
    out = [f"Of the job's wall-clock time, {100 * s.ettr['mean']:.1f}% trains (ETTR; 5% of "
           f"the {s.trials} simulated jobs do worse than {100 * s.ettr['p5']:.1f}%) on "
           f"{i.world_size:,} GPUs."]
    if s.downtime_s["n"]:
        out.append(f"A failure stops training for {fd(s.downtime_s['p50'])} typically "
                   f"(median), {fd(s.downtime_s['max'])} at worst; with the work redone since "
                   f"the last checkpoint, {fd(s.recovery_s['mean'])} on average.")
    if s.worst is not None:
        out.append(f"The worst recovery: {worst_words(s.worst, st.plan.spares)}.")
    e = energy(st)
    if e is not None:
        out.append(f"Failures and restarts cost {e['kwh_lost']:,.0f} kWh a job "
                   f"({100 * e['share_lost']:.1f}% of its {e['kwh_per_job']:,.0f} kWh; "
                   f"{e['usd_lost']:,.0f} USD of electricity): work redone and slowed at the "
                   f"step's {e['busy_w'] / 1e3:,.1f} kW, the job down at "
                   f"{e['idle_w'] / 1e3:,.1f} kW.")
    if st.search:
        r = st.search
        now = next((c for c in r.candidates if c.label and "configured" in c.label), None)
        text = (f"Checkpoint every {fd(r.best.interval_s)}: ETTR {r.best.ettr:.4f} "
                f"(Young's formula {fd(r.young_s)}, Daly's {fd(r.daly_s)})")
        if now is not None and now.interval_s != r.best.interval_s:
            text += f", against {now.ettr:.4f} at the configured {fd(now.interval_s)}"
        out.append(text + ".")
    return out


def write_page(st: Study, out: Path) -> Path:
    """Write ``out/report.html`` next to the other files of ``reliability --out``."""
    s = st.summary
    page = HtmlReport(f"Failures and checkpoints: {st.scenario.name}",
                      f"{st.scenario.model} on {st.info.world_size:,} GPUs; {s.trials} "
                      f"simulated jobs, seed {st.seed}")
    page.answer(*answer_sentences(st))
    page.table(Table("Time lost per cause (per job)", ["cause", "time", "share of wall"],
                     [(c, fd(s.seconds[c]), f"{100 * s.share[c]:.2f}%")
                      for c in CATEGORIES[1:]]))
    e = energy(st)
    if e is not None:
        page.table(Table("Energy lost per cause (per job, facility)", ["cause", "kWh", "at"],
                         [(c, f"{e['kwh'][c]:,.1f}",
                           "the step's power" if c in BUSY else "idle GPUs")
                          for c in CATEGORIES[1:]]))
    page.table(Table("Recovery", ["", "mean", "p50", "p99", "worst", "recoveries"],
                     [(name, fd(d["mean"]), fd(d["p50"]), fd(d["p99"]), fd(d["max"]), d["n"])
                      for name, d in (("recovery (failure to progress regained)",
                                       s.recovery_s),
                                      ("downtime (failure to training again)",
                                       s.downtime_s))]))
    if st.search:
        r = st.search
        page.table(Table("Checkpoint interval", ["interval", "iterations", "ETTR", "+-"],
                         [(f"{fd(c.interval_s)}" + (f" ({c.label})" if c.label else ""),
                           c.iterations, f"{c.ettr:.4f}", f"{c.stderr:.4f}")
                          for c in r.candidates],
                         best=next((k for k, c in enumerate(r.candidates) if c == r.best),
                                   None)))
    page.heading("Charts")
    for name, caption in (("ettr_vs_interval.png", "ETTR against the checkpoint interval"),
                          ("recovery_cdf.png", "How long recoveries take"),
                          ("timeline.png", "Training progress of one simulated job")):
        page.image(out / name, caption)
    page.heading("The full result, as the command prints it")
    page.preformatted("\n".join(table(st)))
    page.inputs("Scenario", st.scenario.model_dump(mode="json"))
    return page.write(out)
