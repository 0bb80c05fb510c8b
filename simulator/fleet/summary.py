"""The fleet's answer in numbers and words: queue times, slowdown, utilisation.

Utilisation is time-weighted over the run (from time 0 to the last event), and over the
arrivals (from time 0 to the last arrival: the steady state a planner sizes for, before the
longest jobs drain alone): *allocated* is the share of the cluster's GPUs held by jobs,
*useful* the share doing steps at the pace the job would have alone on its nominal GPUs (no
restore, no checkpoint writes, no contention).
"""

from __future__ import annotations

import numpy as np

from ..reliability.quantities import format_duration as fd
from .simulate import FleetResult


def time_weighted(samples: list[dict], key: str, end_s: float) -> float:
    """The mean of ``key`` over [0, ``end_s``], each sample holding until the next (zero
    before the first)."""
    samples = [s for s in samples if s["time_s"] < end_s]
    if not samples or end_s <= 0:
        return 0.0
    t = np.array([s["time_s"] for s in samples] + [end_s])
    v = np.array([s[key] for s in samples])
    return float(np.sum(v * np.diff(t)) / end_s)


def _pct(values, q) -> float:
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    return float(np.percentile(arr, q)) if arr.size else 0.0


def over_budget_s(samples: list[dict], budget_kw: float, end_s: float) -> float:
    """Seconds of [0, ``end_s``] during which ``power_kw`` is above ``budget_kw`` (each
    sample holding until the next)."""
    samples = [x for x in samples if x["time_s"] < end_s]
    ends = [x["time_s"] for x in samples[1:]] + [end_s]
    return float(sum(t1 - x["time_s"] for x, t1 in zip(samples, ends)
                     if x["power_kw"] > budget_kw))


def power(result: FleetResult, budget_kw: float | None = None) -> dict:
    """The fleet's facility power over the run (docs/energy.md): time-weighted mean, peak,
    energy (mean x run), and against a site budget the time above it; {} where the GPU has
    no power data."""
    samples = [x for x in result.samples if "power_kw" in x]
    end = result.end_s
    if not samples or end <= 0:
        return {}
    mean = time_weighted(samples, "power_kw", end)
    out = {"power_kw_mean": mean, "power_kw_peak": max(x["power_kw"] for x in samples
                                                       if x["time_s"] < end),
           "energy_kwh": mean * end / 3600.0}
    if budget_kw is not None:
        over = over_budget_s(samples, budget_kw, end)
        out.update(power_budget_kw=budget_kw, over_budget_s=over, over_budget_share=over / end)
    return out


def summarize(result: FleetResult, usd_per_gpu_hour: float | None = None,
              budget_kw: float | None = None) -> dict:
    """The fleet's numbers (``summary.json``, the printed table, the report); with a price,
    what the whole cluster costs over the run and per GPU-hour of useful work; its power
    and energy, against ``budget_kw`` where given (:func:`power`)."""
    jobs = result.jobs
    done = [j for j in jobs if j["state"] == "done"]
    queue = [j["queue_s"] for j in jobs if j["queue_s"] is not None]
    slow = [j["slowdown"] for j in jobs if j["slowdown"] is not None]
    jct = [j["end_s"] - j["arrival_s"] for j in done]
    n, end = result.n_gpus, result.end_s
    last = max((j["arrival_s"] for j in jobs), default=0.0)
    out = {
        "gpus": n, "jobs": len(jobs), "jobs_done": len(done), "makespan_s": end,
        "queue_s_median": _pct(queue, 50), "queue_s_p90": _pct(queue, 90),
        "queue_s_mean": float(np.mean(queue)) if queue else 0.0,
        "slowdown_median": _pct(slow, 50), "slowdown_p90": _pct(slow, 90),
        "slowdown_max": max(slow, default=0.0),
        "jct_s_median": _pct(jct, 50), "jct_s_p90": _pct(jct, 90),
        "allocated": time_weighted(result.samples, "busy_gpus", end) / n,
        "useful": time_weighted(result.samples, "useful_gpus", end) / n,
        "allocated_arrivals": time_weighted(result.samples, "busy_gpus", last) / n,
        "useful_arrivals": time_weighted(result.samples, "useful_gpus", last) / n,
        "queued_mean": time_weighted(result.samples, "queued", end),
        "restarts": sum(j["restarts"] for j in jobs),
        "preemptions": sum(j["preemptions"] for j in jobs),
        "events": result.events, **{f"simulations_{k}": v for k, v in result.counts.items()},
        **power(result, budget_kw),
    }
    if usd_per_gpu_hour is not None:
        gpu_hours = n * end / 3600.0
        useful = out["useful"] * gpu_hours
        out["cost_usd"] = gpu_hours * usd_per_gpu_hour
        out["usd_per_useful_gpu_hour"] = out["cost_usd"] / useful if useful > 0 else None
    return out


def decision(s: dict, what: str) -> str:
    """The result in one sentence a manager reads."""
    return (f"{what}: the median job waits {fd(s['queue_s_median'])} (90th percentile "
            f"{fd(s['queue_s_p90'])}) and runs {100 * (s['slowdown_median'] - 1):.1f}% longer "
            f"than alone (90th percentile {100 * (s['slowdown_p90'] - 1):.1f}%); while jobs "
            f"arrive the GPUs are {100 * s['allocated_arrivals']:.0f}% allocated and "
            f"{100 * s['useful_arrivals']:.0f}% doing useful work ({100 * s['allocated']:.0f}% "
            f"and {100 * s['useful']:.0f}% over the whole run); {s['jobs_done']} of "
            f"{s['jobs']} jobs end within {fd(s['makespan_s'])}.")


def comparison(base: dict, other: dict, change: str) -> str:
    """What ``change`` (``placement=spread``) does, against the base run."""
    slow = 100 * (other["slowdown_median"] - base["slowdown_median"])
    mean = other["queue_s_mean"] - base["queue_s_mean"]
    return (f"With {change}, the median job runs {100 * (other['slowdown_median'] - 1):.1f}% "
            f"longer than alone instead of {100 * (base['slowdown_median'] - 1):.1f}% "
            f"({'+' if slow >= 0 else '-'}{abs(slow):.1f} points), the mean queue time "
            f"{'grows' if mean >= 0 else 'shrinks'} by {fd(abs(mean))} and useful GPU work "
            f"while jobs arrive goes from {100 * base['useful_arrivals']:.1f}% to "
            f"{100 * other['useful_arrivals']:.1f}%.")


def table_lines(s: dict) -> list[tuple[str, str]]:
    return [("jobs", f"{s['jobs_done']} done of {s['jobs']}"),
            ("gpus", f"{s['gpus']:,}"),
            ("queue_median", fd(s["queue_s_median"])), ("queue_p90", fd(s["queue_s_p90"])),
            ("slowdown_median", f"{s['slowdown_median']:.4f}"),
            ("slowdown_p90", f"{s['slowdown_p90']:.4f}"),
            ("jct_median", fd(s["jct_s_median"])), ("jct_p90", fd(s["jct_s_p90"])),
            ("allocated", f"{100 * s['allocated']:.1f}%"),
            ("useful", f"{100 * s['useful']:.1f}%"),
            ("allocated_arrivals", f"{100 * s['allocated_arrivals']:.1f}%"),
            ("useful_arrivals", f"{100 * s['useful_arrivals']:.1f}%"),
            ("restarts", str(s["restarts"])), ("preemptions", str(s["preemptions"])),
            ("makespan", fd(s["makespan_s"])),
            *([("power", f"mean {s['power_kw_mean']:,.1f} kW, peak {s['power_kw_peak']:,.1f} "
                         f"kW (facility, PUE included)"),
               ("energy", f"{s['energy_kwh']:,.0f} kWh over the run")]
              if "power_kw_mean" in s else []),
            *([("power_budget", f"{s['power_budget_kw']:,.0f} kW: above it "
                                f"{fd(s['over_budget_s'])} "
                                f"({100 * s['over_budget_share']:.1f}% of the run)")]
              if "power_budget_kw" in s else []),
            *([("cost", f"{s['cost_usd']:,.0f} USD (the cluster over the run; "
                        f"{s['usd_per_useful_gpu_hour'] or 0:,.2f} USD per useful GPU-hour)")]
              if "cost_usd" in s else []),
            ("simulations", f"{s['simulations_alone']} alone, {s['simulations_together']} "
                            f"together, {s.get('simulations_bounded', 0)} by headroom, "
                            f"{s['simulations_hits']} cached"),
            *([("op_replays", f"{s['simulations_ops']:,} (estimated before the first "
                              f"co-simulation: {s['simulations_ops_estimate']:,.0f})")]
              if "simulations_ops_estimate" in s else [])]
