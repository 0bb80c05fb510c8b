"""A study as a JSON-ready dict and as the table ``clustersim reliability`` prints."""

from __future__ import annotations

import math
from dataclasses import asdict

from simulator.accum import brief

from .config import CLASSES
from .quantities import format_duration as fd
from .quantities import parse_rate
from .results import CATEGORIES
from .study import Study

GB = 1e9


def as_dict(st: Study) -> dict:
    """Everything the report shows, in SI units (seconds, bytes, per-second rates).

    The same scenario, trials and seed give the same dict: how long the study took
    (``Study.timings_s``, wall clock) is no part of it (see :func:`timings_line`).
    """
    p, i, s = st.plan, st.info, st.summary
    out = {
        "scenario": st.scenario.name, "trials": s.trials, "seed": st.seed,
        "world_size": i.world_size, "job_nodes": p.job_nodes, "spare_nodes": p.spares,
        "iteration_time_s": {n: t for n, t in zip(i.slow_names, p.slow_times)},
        "iteration_time_simulated": i.steps.simulated,
        "step_simulations": i.steps.simulations,
        **({"step_extrapolated": i.steps.extrapolated} if i.steps.extrapolated else {}),
        "checkpoint": {**asdict(p.costs), "params": i.params,
                       "interval_s": p.interval_s, "every_iterations": p.every_iterations,
                       "mode": "async" if p.async_mode else "sync", "target": p.target},
        "components": i.components,
        "expected_mtti_s": i.mtti_s,
        "ettr": s.ettr,
        "goodput_tokens_per_s": s.ettr["mean"] * i.steps.tokens_per_iteration / p.t_base
        if i.steps.tokens_per_iteration else None,
        "seconds_lost": {c: s.seconds[c] for c in CATEGORIES[1:]},
        "share_of_wall": s.share,
        "wall_s": s.wall_s, "completed": s.completed,
        "failures_per_trial": s.failures, "interrupts_per_trial": s.interrupts_per_trial,
        "simulated_mtti_s": s.mtti_s,
        "downtime_s": s.downtime_s, "recovery_s": s.recovery_s, "worst_recovery": s.worst,
        "censored_recoveries": s.censored, "restore_sources": s.sources,
        "checkpoints_per_trial": s.checkpoints, "events": s.events,
        "energy": energy(st),
        "evaluation": evaluation(st),
    }
    if st.search:
        r = st.search
        out["interval_search"] = {
            "delta_s": r.delta_s, "mtti_s": r.mtti_s, "downtime_s": r.downtime_s,
            "young_s": r.young_s, "daly_s": r.daly_s, "trials": r.trials,
            "best": asdict(r.best), "candidates": [asdict(c) for c in r.candidates]}
    return out


BUSY = ("productive", "degraded", "recompute")    # the job computes: the step's power
J_PER_KWH = 3.6e6


def energy(st: Study) -> dict | None:
    """Energy of the mean job by where its wall time went (docs/energy.md): the categories
    in which it computes (:data:`BUSY`: productive, degraded, recompute) at the simulated
    step's facility power, every other one (checkpoint, detection, waiting, restart,
    restore) with its GPUs idle; lost = every category but productive. kWh and USD at the
    data file's site; None where the step was not simulated or the GPU has no power data."""
    power = st.info.steps.power
    if power is None:
        return None
    s = st.summary
    kwh = {c: s.seconds[c] * (power.busy_w if c in BUSY else power.idle_w) / J_PER_KWH
           for c in CATEGORIES}
    lost = sum(v for c, v in kwh.items() if c != "productive")
    total = sum(kwh.values())
    return {"busy_w": power.busy_w, "idle_w": power.idle_w, "kwh": kwh,
            "kwh_per_job": total, "kwh_lost": lost, "share_lost": lost / total if total else 0.0,
            "usd_lost": lost * power.usd_per_kwh, "usd_per_kwh": power.usd_per_kwh,
            "co2_kg_lost": lost * power.carbon_kg_per_kwh}


def evaluation(st: Study) -> dict | None:
    """The scenario's evaluation pass over the mean job (``training.evaluation``; None
    without one or where the step was not simulated): the evaluations its productive steps
    hold (productive seconds / the step, counted as :meth:`~simulator.scenario.Evaluation.
    count` does), their seconds and facility kWh. Reported beside the job: the job-level
    simulation runs training steps only, so the ETTR and the lost time leave them out."""
    ev = st.info.steps.evaluation
    if ev is None:
        return None
    steps = int(st.summary.seconds["productive"] / st.plan.t_base)
    n = st.scenario.training.evaluation.count(steps)
    return {"steps": steps, "evaluations": n, "seconds": n * ev.time_s,
            "kwh": None if ev.kwh is None else n * ev.kwh, "pass": ev.as_dict()}


def evaluation_lines(st: Study) -> list[str]:
    e = evaluation(st)
    if e is None:
        return []
    p = e["pass"]
    kwh = "" if e["kwh"] is None else f", {e['kwh']:,.1f} kWh"
    return [f"evaluation                  {e['evaluations']:,} per job (every "
            f"{p['every_steps']} of its {e['steps']:,} steps, {p['time_s']:.1f} s each): "
            f"{fd(e['seconds'])}{kwh}, not in the ETTR (the job simulates training steps)"]


def energy_lines(st: Study) -> list[str]:
    e = energy(st)
    if e is None:
        return []
    lines = [f"energy per job              {e['kwh_per_job']:,.1f} kWh (facility; busy "
             f"{e['busy_w'] / 1e3:,.1f} kW, idle {e['idle_w'] / 1e3:,.1f} kW)",
             f"energy lost per cause       {e['kwh_lost']:,.1f} kWh ({100 * e['share_lost']:.2f} "
             f"%), {e['usd_lost']:,.0f} USD at {e['usd_per_kwh']:g} USD/kWh, "
             f"{e['co2_kg_lost']:,.0f} kg CO2"]
    for cat in CATEGORIES[1:]:
        lines.append(f"  {cat:<25} {e['kwh'][cat]:>10,.1f} kWh"
                     f"{'  (computing)' if cat in BUSY else ''}")
    return lines


def timings_line(st: Study) -> str:
    """How long each part of the study took, wall clock: ``reliability: plan X s, ...``."""
    return "reliability: " + ", ".join(f"{k} {v:.2f} s" for k, v in st.timings_s.items())


def table(st: Study) -> list[str]:
    p, i, s, scn = st.plan, st.info, st.summary, st.scenario
    steps = i.steps
    how = "simulated" if steps.simulated else "given (job.iteration_time)"
    if steps.extrapolated:
        how += f"; the steps {brief(steps.extrapolated)}"
    variants = ", ".join(f"{n} {t:.3f} s" for n, t in zip(i.slow_names[1:], p.slow_times[1:]))
    length = (f"{p.iterations:,.0f} iterations" if p.iterations
              else f"{fd(p.duration_s)} wall-clock budget")
    c = p.costs
    every = (f"every {fd(p.interval_s)}" if p.interval_s is not None
             else f"every {p.every_iterations} iterations")
    lines = [
        f"# {scn.name}: {scn.model} on {i.world_size} GPUs ({p.job_nodes} "
        f"server{'s' * (p.job_nodes != 1)}, "
        f"{p.spares} spares), {length}; {s.trials} trials, seed {st.seed}",
        f"# iteration {p.t_base:.3f} s ({how})" + (f"; degraded: {variants}" if variants else ""),
        f"# checkpoint {c.size_bytes / GB:,.0f} GB ({i.params / 1e9:.1f}B params), "
        f"{'async' if p.async_mode else 'sync'} to {p.target} {every}: blocks "
        f"{fd(c.block_s)}" + (f", durable {fd(c.persist_s)} later" if p.async_mode else "")
        + f"; load {fd(c.restore_s)}",
        f"# failures: expected MTTI {fd(i.mtti_s) if math.isfinite(i.mtti_s) else 'none'}"
        f" from the rates; simulated {fd(s.mtti_s) if math.isfinite(s.mtti_s) else 'none'}"
        f" ({s.interrupts_per_trial:.1f} interrupts per job)",
        *baseline_note(scn),
        "",
        f"ETTR (goodput fraction)     {s.ettr['mean']:.4f}  (p5 {s.ettr['p5']:.4f}, "
        f"p95 {s.ettr['p95']:.4f}, worst {s.ettr['min']:.4f})",
    ]
    if p.iterations:
        lines.append(f"job wall time               mean {fd(s.wall_s['mean'])}, p99 "
                     f"{fd(s.wall_s['p99'])}, worst {fd(s.wall_s['max'])}")
    lines.append("time lost per cause         per job      share of wall")
    for cat in CATEGORIES[1:]:
        lines.append(f"  {cat:<25} {fd(s.seconds[cat]):>10}   {100 * s.share[cat]:6.2f} %")
    lines += energy_lines(st) + evaluation_lines(st)
    for name, d in (("recovery (to progress regained)", s.recovery_s),
                    ("downtime (to training again)", s.downtime_s)):
        lines.append(f"{name:<31} mean {fd(d['mean'])}, p50 {fd(d['p50'])}, p99 "
                     f"{fd(d['p99'])}, worst {fd(d['max'])} ({d['n']} recoveries)")
    if s.worst is not None:
        lines.append(f"  the worst recovery: {worst_words(s.worst, st.plan.spares)}")
    lines.append("failures per job            " + ", ".join(
        f"{k} {v:.2f}" for k, v in s.failures.items() if v) or "none")
    if st.search:
        lines += _search_lines(st)
    return lines


def _search_lines(st: Study) -> list[str]:
    r = st.search
    lines = [f"checkpoint interval (delta {fd(r.delta_s)}, MTTI {fd(r.mtti_s)}, "
             f"R {fd(r.downtime_s)}; {r.trials} trials each)"]
    shown = [c for c in r.candidates if c.label] + [r.best]
    for c in sorted(set(shown), key=lambda c: c.interval_s):
        tag = " <- best" if c == r.best else ""
        lines.append(f"  {c.label or 'search':<22} {fd(c.interval_s):>10} "
                     f"({c.iterations} it)  ETTR {c.ettr:.4f} +- {c.stderr:.4f}{tag}")
    lines.append(f"  formulas: Young {fd(r.young_s)}, Daly {fd(r.daly_s)}")
    return lines


def baseline_note(scn) -> list[str]:
    """With ``failures.baseline: none``, the rates that are not zero all the same: those the
    scenario file sets beside it (``none`` in the file zeroes the baseline's rates, not the
    file's own; ``--set ...baseline=none`` drops the file's too) or the command line gives,
    so a user does not read them as leftovers of the baseline."""
    f = scn.reliability.failures if scn.reliability is not None else None
    if f is None or f.baseline != "none":
        return []
    kept = [f"{n} {getattr(f, n).rate}" for n in CLASSES
            if parse_rate(str(getattr(f, n).rate)).per_s > 0]
    return [f"# baseline none: every failure class starts at 0; the scenario sets "
            f"{', '.join(kept)}" if kept else "# baseline none: no failure class has a rate"]


def worst_words(w: dict, spares: int) -> str:
    """Why the worst recovery took as long as it did, in words."""
    text = (f"{fd(w['recovery_s'])}, {w['failures']} failure{'s' * (w['failures'] != 1)} "
            f"merged into it")
    if w["spare_wait_s"] > 0:
        text += (f"; {fd(w['spare_wait_s'])} of it waiting for repaired servers: the "
                 f"{spares} spare server{'s' * (spares != 1)} had run out")
    else:
        text += "; the spare servers sufficed"
    return text
