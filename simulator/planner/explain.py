"""Why the top plans win: the Pareto front of the replayed plans and one line per plan.

A plan is on the Pareto front when no other replayed plan that fits in memory is at least
as good on every one of step time, cost per token and memory per GPU and better on one. Its
line names what it saves against the next plan down the ranking (the estimate's parts:
bubble, exposed TP traffic, pipeline send/recv, exposed DP traffic, compute), with the
replay's exposed communication and the memory headroom.
"""

from __future__ import annotations

GIB = float(1 << 30)


def _objectives(row) -> tuple[float, float, float]:
    cost = row.cost.per_million_tokens_usd if row.cost and row.cost.per_million_tokens_usd \
        else row.step_s
    return (row.step_s, cost, float(row.metrics.peak_memory_gib))


def mark_pareto(rows) -> None:
    """Set ``pareto`` on the replayed rows that fit and that no other such row dominates."""
    ok = [r for r in rows if r.metrics is not None and not r.metrics.oom]
    for r in ok:
        mine = _objectives(r)
        r.pareto = not any(
            all(a <= b for a, b in zip(_objectives(o), mine)) and _objectives(o) != mine
            for o in ok if o is not r)


def explain(search) -> None:
    """One line per replayed row: its edge over the next row, its traffic, its headroom."""
    rows = search.rows
    for i, r in enumerate(rows):
        if r.metrics is None:
            r.why = f"replay failed: {r.error}"
            continue
        m = r.metrics
        if m.oom:
            r.why = (f"out of memory in the replay ({m.peak_memory_gib:.1f} GiB of "
                     f"{search.capacity_bytes / GIB:.0f}): the estimate was too low")
            continue
        parts = [_edge(r, rows[i + 1]) if i + 1 < len(rows) else _weakest(r)]
        parts.append(f"exposed communication {m.exposed_comm_s:.3g} s of "
                     f"{m.iteration_time_s:.3g} s")
        head = 1 - m.peak_memory_gib * GIB / search.capacity_bytes
        parts.append(f"memory {m.peak_memory_gib:.1f} of {search.capacity_bytes / GIB:.0f} "
                     f"GiB ({100 * head:.0f}% headroom)")
        r.why = "; ".join(p for p in parts if p)


def _edge(row, other) -> str:
    """What ``row`` saves against ``other``, largest saving first (estimate parts)."""
    mine, theirs = row.estimate.parts(), other.estimate.parts()
    saved = sorted(((theirs[k] - mine[k], k) for k in mine), reverse=True)
    named = [f"{k} {s:.3g} s less" for s, k in saved if s > 0][:2]
    if named:
        return f"vs {other.candidate.label()}: " + ", ".join(named) + " (estimated)"
    if other.metrics is None:
        return ""
    mine_m, theirs_m = row.metrics, other.metrics       # the estimates tie: the replay says
    return (f"vs {other.candidate.label()}: {theirs_m.iteration_time_s - mine_m.iteration_time_s:.3g}"
            f" s faster in the replay (compute {mine_m.compute_s:.4g} vs "
            f"{theirs_m.compute_s:.4g} s)")


def _weakest(row) -> str:
    """The largest overhead of the last row (nothing below it to compare with)."""
    parts = {k: v for k, v in row.estimate.parts().items() if k != "compute"}
    name, value = max(parts.items(), key=lambda kv: (kv[1], kv[0]))
    return f"largest overhead: {name} {value:.3g} s (estimated)" if value > 0 else ""
