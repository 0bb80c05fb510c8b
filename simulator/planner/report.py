"""The ranked table of ``clustersim plan`` as text, CSV and JSON (typed rows first)."""

from __future__ import annotations

import csv
import io
import json

from .explain import GIB

COLUMNS = ("rank", "plan", "step_s", "estimated_s", "tokens_per_s_per_gpu", "memory_gib",
           "estimated_memory_gib", "oom", "exposed_comm_s", "usd_per_1m_tokens", "pareto",
           "why", "kwh_per_1m_tokens", "avg_gpu_power_w", "energy_optimal")


def records(search) -> list[dict]:
    """One dict per replayed row, in rank order (what CSV and JSON carry)."""
    from .search import energy_optimal
    out, least = [], energy_optimal(search.rows)
    for i, r in enumerate(search.rows, 1):
        m, e = r.metrics, r.energy
        tokens = (search.tokens_per_step / m.iteration_time_s / search.gpus) if m else None
        out.append({
            "rank": i, "plan": r.candidate.label(),
            "step_s": m.iteration_time_s if m else None,
            "estimated_s": r.estimate.step_s,
            "tokens_per_s_per_gpu": tokens,
            "memory_gib": m.peak_memory_gib if m else None,
            "estimated_memory_gib": r.estimate.memory_bytes / GIB,
            "oom": bool(m.oom) if m else None,
            "exposed_comm_s": m.exposed_comm_s if m else None,
            "usd_per_1m_tokens": r.cost.per_million_tokens_usd if r.cost else None,
            "pareto": r.pareto, "why": r.why, "strategy": r.strategy,
            "micro_batch": r.candidate.micro_batch, "grad_accum": r.candidate.micro_batches,
            "estimate": {**{k.replace(" ", "_"): v for k, v in r.estimate.parts().items()},
                         "step_s": r.estimate.step_s},
            "kwh_per_1m_tokens": e.kwh_per_million_tokens if e else None,
            "avg_gpu_power_w": e.avg_gpu_w if e else None,
            "energy_optimal": r is least})
    return out


def header(search) -> str:
    c = search.counts
    why = "; ".join(f"{name}: {reason}" for name, reason in search.refused.items())
    refused = (f"{c.get('refused by their framework', 0)} refused by their framework ({why}), "
               if why else "")
    if c.get("not modelled"):
        refused += f"{c['not modelled']} not modelled ({search.unmodelled}), "
    return (f"# plan: {search.model} on {search.gpus} x {search.gpu}, global batch "
            f"{search.global_batch} x {search.seq_len} tokens: {c.get('candidates', 0)} "
            f"candidates, {c.get('over memory', 0)} over memory (estimated), "
            f"{c.get('not replayable here', 0)} not replayable in this build, {refused}"
            f"{c.get('fit', 0)} fit, {c.get('replayed', 0)} replayed")


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def to_table(search, before: list[str] = (), after: list[str] = ()) -> str:
    """The ranked table; ``before`` (the answer, the batch) and ``after`` (how far to trust
    it) are comment lines around it."""
    rows = records(search)
    lines = [header(search), *(f"# {x}" for x in before)]
    cells = [("#", "plan", "step_s", "est_s", "tok/s/GPU", "mem_GiB", "est_GiB", "$/1M tok",
              "kWh/1M tok", "pareto")]
    for d in rows:
        mem = _fmt(d["memory_gib"], ".1f") + (" OOM" if d["oom"] else "")
        cells.append((str(d["rank"]), d["plan"], _fmt(d["step_s"], ".3f"),
                      _fmt(d["estimated_s"], ".3f"), _fmt(d["tokens_per_s_per_gpu"], ",.0f"),
                      mem, _fmt(d["estimated_memory_gib"], ".1f"),
                      _fmt(d["usd_per_1m_tokens"], ".3f"), _fmt(d["kwh_per_1m_tokens"], ".4g"),
                      "*" if d["pareto"] else ""))
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    for row in cells:
        lines.append("  ".join(c.ljust(w) if i == 1 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    lines += [f"# {d['rank']}: {d['why']}" for d in rows]
    lines.append(energy_line(rows))
    lines += [f"# {x}" for x in after]
    return "\n".join(lines)


def energy_line(rows: list[dict]) -> str:
    """The energy-optimal plan beside the fastest, in one line."""
    least = next((d for d in rows if d["energy_optimal"]), None)
    if least is None:
        return "# energy-optimal: n/a (no plan that fits has power data)"
    fastest = next(d for d in rows if d["kwh_per_1m_tokens"] is not None and not d["oom"])
    if least is fastest:
        return (f"# energy-optimal: {least['plan']}, the fastest plan too "
                f"({least['kwh_per_1m_tokens']:.4g} kWh per 1M tokens at the site)")
    more = fastest["kwh_per_1m_tokens"] / least["kwh_per_1m_tokens"] - 1
    return (f"# energy-optimal: {least['plan']} ({least['kwh_per_1m_tokens']:.4g} kWh per 1M "
            f"tokens, {least['step_s']:.3f} s a step); the fastest, {fastest['plan']}, uses "
            f"{100 * more:.1f}% more energy per token")


def to_csv(search) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for d in records(search):
        writer.writerow(["" if d[k] is None else d[k] for k in COLUMNS])
    return buf.getvalue().rstrip("\n")


def to_json(search) -> str:
    return json.dumps({"model": search.model, "gpus": search.gpus, "gpu": search.gpu,
                       "global_batch": search.global_batch, "seq_len": search.seq_len,
                       "counts": search.counts, "events": search.events,
                       "carried": {"from": search.carried.of,
                                   "framework": search.carried.framework,
                                   "settings": search.carried.settings,
                                   "parallelism": search.carried.parallelism,
                                   "not_carried": list(search.carried.left)},
                       "rows": records(search)}, indent=2)
