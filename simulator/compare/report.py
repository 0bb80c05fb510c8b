"""Output of ``clustersim compare``: the flat records, a text table, CSV and JSON; the
output folder with its PNG charts is :mod:`.charts` (matplotlib loads only for ``--out``)."""

from __future__ import annotations

import json

from ..choices import NAMED_STRATEGIES
from .results import Comparison, Row, cheapest, excess_over_cheapest


# ---------------------------------------------------------------------------- records
def flat_row(row: Row, best: Row | None) -> dict:
    """One strategy as a flat record (CSV column names; SI units, USD)."""
    m, s, c, fit = row.metrics, row.scaling, row.cost, row.largest_fit or {}
    rec = {"strategy": row.alias.key, "registry_name": row.alias.strategy,
           "sharding": row.alias.sharding or "", "framework": row.alias.framework,
           "status": row.status, "reason": row.reason}
    for key in ("world_size", "peak_memory_gib", "oom", "iteration_time_s", "samples_per_s",
                "tokens_per_s", "compute_s", "comm_s", "exposed_comm_s", "wait_s", "mfu"):
        rec[key] = getattr(m, key) if m else None
    rec.update(oom_at=row.oom_at or "", global_batch=row.global_batch or None,
               comm_gb_per_gpu=row.comm_bytes_per_gpu / 1e9 if m else None,
               scaling_gpus=s.gpus, scaling_iteration_time_s=s.iteration_time_s,
               scaling_efficiency=s.efficiency, scaling_reason=s.reason,
               largest_fit_model=fit.get("model"), largest_fit_params=fit.get("params"),
               largest_fit_top_of_ladder=fit.get("top_of_ladder"),
               capacity_reason=row.capacity_reason, migration_days=row.migration_days,
               kernels=row.kernels, fp8_recipe=row.fp8_recipe,
               forward_gpu_s_per_sample=row.forward_gpu_s_per_sample)
    for key in ("usd_per_gpu_hour", "per_iteration_usd", "comm_wait_per_iteration_usd",
                "comm_wait_share", "per_million_tokens_usd", "per_thousand_samples_usd",
                "iterations", "gpu_hours", "wall_hours", "training_usd", "comm_wait_usd",
                "migration_usd", "total_usd"):
        rec[key] = getattr(c, key) if c else None
    rec["waste_vs_cheapest"] = excess_over_cheapest(row, best)
    rec["cheapest"] = best is not None and row is best
    e = row.energy
    rec.update(energy_per_step_kwh=e.kwh_per_step if e else None,
               kwh_per_1m_tokens=e.kwh_per_million_tokens if e else None,
               co2_kg_per_1m_tokens=e.co2_kg_per_million_tokens if e else None,
               electricity_usd_per_1m_tokens=e.usd_per_million_tokens if e else None,
               avg_gpu_power_w=e.avg_gpu_w if e else None,
               peak_node_power_w=e.peak_node_w if e else None)
    return rec


def records(cmp: Comparison) -> list[dict]:
    best = cheapest(cmp.rows)
    return [flat_row(r, best) for r in cmp.rows]


def to_json(cmp: Comparison, accuracy: dict[str, dict] | None = None) -> str:
    """The comparison as JSON; ``accuracy``: each strategy's accuracy envelope, by key."""
    data = cmp.as_dict()
    best = cheapest(cmp.rows)
    data["cheapest"] = best.alias.key if best else None
    for d, r in zip(data["rows"], cmp.rows):
        d["waste_vs_cheapest"] = excess_over_cheapest(r, best)
        if accuracy is not None:
            d["accuracy"] = accuracy.get(r.alias.key)
    return json.dumps(data, indent=2, default=str)


def to_csv(cmp: Comparison) -> str:
    import pandas as pd          # only for --format csv and --out: the table needs none
    return pd.DataFrame(records(cmp)).to_csv(index=False).rstrip("\n")


# ------------------------------------------------------------------------------ table
def _f(v, fmt: str, none: str = "-") -> str:
    return none if v is None else format(v, fmt)


def perf_cells(r: dict) -> list[str]:
    fit = r["largest_fit_model"]
    fit = (fit + (" (top)" if r["largest_fit_top_of_ladder"] else "")) if fit else \
        ("n/a" if r["capacity_reason"] else "-")
    oom = ("OOM" if r["oom"] else "fits") if r["oom"] is not None else "-"
    return [r["strategy"], _f(r["world_size"], "d"), _f(r["peak_memory_gib"], ".1f"), oom,
            _f(r["iteration_time_s"], ".3f"), _f(r["samples_per_s"], ",.1f"),
            _f(r["tokens_per_s"], ",.0f"), _f(r["comm_gb_per_gpu"], ",.2f"), _f(r["comm_s"], ".3f"),
            _f(r["exposed_comm_s"], ".3f"),
            _f(r["forward_gpu_s_per_sample"] and 1e3 * r["forward_gpu_s_per_sample"], ".1f"),
            _f(r["scaling_efficiency"], ".3f"), fit]


def cost_cells(r: dict, budget: bool) -> list[str]:
    cells = [r["strategy"] + (" (OOM)" if r["oom"] else ""), _f(r["per_iteration_usd"], ".4g"),
             _f(r["per_million_tokens_usd"], ".3g"), _f(r["per_thousand_samples_usd"], ".3g"),
             _f(r["comm_wait_share"] and 100 * r["comm_wait_share"], ".1f")]
    if budget:
        cells += [_f(r["gpu_hours"], ",.0f"), _f(r["wall_hours"] and r["wall_hours"] / 24, ",.1f"),
                  _f(r["training_usd"], ",.0f"), _f(r["comm_wait_usd"], ",.0f"),
                  _f(r["migration_usd"], ",.0f"), _f(r["total_usd"], ",.0f")]
    waste = r["waste_vs_cheapest"]
    cells.append("cheapest" if r["cheapest"] else _f(waste and 100 * waste, ".1f"))
    return cells


def _grid(head: list[str], rows: list[list[str]], left: tuple[int, ...] = (0,)) -> list[str]:
    """Aligned lines: columns ``left`` flush left, the others flush right."""
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]

    def fmt(cells):
        return "  ".join(x.ljust(w) if i in left else x.rjust(w)
                         for i, (x, w) in enumerate(zip(cells, widths))).rstrip()
    return [fmt(head), fmt(["-" * w for w in widths]), *map(fmt, rows)]


def render_table(cmp: Comparison, accuracy: list[str] | None = None,
                 trust: str = "") -> str:
    """The comparison as text, the decision first: the answer and how far to trust it
    (``trust``, one sentence), the time and memory table, the cost table, then what the
    columns mean, the kernel stacks and the accuracy envelope's lines (``accuracy``)."""
    recs, c, s = records(cmp), cmp.cluster, cmp.settings
    lines = [f"# compare {cmp.scenario}: {cmp.model} on {c['gpus']} x {c['gpu']} "
             f"({c['topology']}, {c['gpu_memory_gib']:.1f} GiB each); micro_batch "
             f"{s['micro_batch']}, seq_len {s['seq_len']}, {s['precision']}; every strategy "
             f"at {s['global_batch']} samples a step (its micro-batches per step follow from "
             f"its data-parallel ranks; one that cannot keep it says why)"]
    lines += [f"# {x}" for x in (*answer_sentences(cmp), trust) if x]
    ok = [r for r in recs if r["status"] == "ok"]
    lines += recipe_lines(ok)
    head = ["strategy", "GPUs", "peak GiB", "memory", "iter s", "samples/s", "tokens/s",
            "comm GB/GPU", "comm s", "exposed s", "fwd ms/sample", "2x eff", "largest fit"]
    lines += _grid(head, [perf_cells(r) for r in ok], left=(0, 3, len(head) - 1))
    lines += [f"{r['strategy']}: n/a: {r['reason']}" for r in recs if r["status"] != "ok"]
    lines += [f"# {r['strategy']}: out of memory at: {r['oom_at']}" for r in ok if r["oom"]]
    lines += [f"# {r['strategy']}: {r['world_size']} of the {c['gpus']} GPUs run replicas; "
              f"cost counts all {c['gpus']}" for r in ok if r["world_size"] != c["gpus"]]
    lines += _cost_lines(cmp, ok)
    lines += _energy_lines(cmp, ok)
    lines += ["", f"# 2x GPUs: {cmp.doubling}; twice the samples a step (weak scaling), "
                  f"efficiency = throughput(2N) / (2 throughput(N))",
              "# comm GB/GPU: bytes one GPU sends per iteration (all-reduce 2(n-1)/n x size, "
              "all-gather and reduce-scatter (n-1)/n x size, sends and copies to the host); "
              "comm s: time communication runs, exposed s: the part not under compute; "
              "fwd ms/sample: GPU-milliseconds of forward kernels per sample (every GPU's "
              "forward kernels in a step over the samples of the step): the same kernels cost "
              "the same under every strategy, so it differs only by the kernel stacks named "
              "below"]
    lines += [f"# {r['strategy']}: 2x: {r['scaling_reason']}" for r in ok
              if r["scaling_reason"] and r["scaling_reason"] not in cmp.doubling]
    lines += [f"# note: {n}" for n in cmp.notes]
    lines += kernel_lines(ok)
    lines += [f"# accuracy {line}" for line in accuracy or ()]
    return "\n".join(lines)


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
        # a model without tokens (ResNet-50) is priced per 1k samples
        key, unit = (("per_million_tokens_usd", "1M tokens")
                     if best["per_million_tokens_usd"] is not None
                     else ("per_thousand_samples_usd", "1k samples"))
        others = sorted((r for r in fits if r is not best and r[key]), key=lambda r: r[key])
        text = (f"{_named(best['strategy'])} is the cheapest strategy that fits in memory: "
                f"${best[key]:,.3g} per {unit} at {best['iteration_time_s']:.3g} s per "
                f"iteration on {cmp.cluster['gpus']} x {cmp.cluster['gpu']}")
        if others:
            nxt = others[0]
            waste = nxt["waste_vs_cheapest"] or 0.0
            text += (f", {100 * waste:.1f}% less than the next, {_named(nxt['strategy'])} "
                     f"(${nxt[key]:,.3g})" if waste >= 0.0005 else
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
    batch = [r.alias.key for r in cmp.rows
             if not r.ok and r.reason_field == "training.global_batch"]
    if batch:
        out.append(f"Cannot keep {cmp.settings['global_batch']:,} samples a step at "
                   f"micro-batch {cmp.settings['micro_batch']}: {', '.join(batch)} (a "
                   f"micro-step of each, the micro-batch on every data-parallel rank, does "
                   f"not divide it; reasons below): set training.global_batch to a multiple "
                   f"of theirs, or a smaller training.micro_batch, to compare them.")
    na = [r["strategy"] for r in recs if r["status"] != "ok" and r["strategy"] not in batch]
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


def strategies_by_stack(pairs) -> dict[str, list[str]]:
    """(kernel stack, strategy) pairs grouped: stack -> its strategies, each once, in the
    order first seen (a pair without a stack, an n/a strategy's, is left out)."""
    by: dict[str, list[str]] = {}
    for stack, strategy in pairs:
        if stack and strategy not in by.setdefault(stack, []):
            by[stack].append(strategy)
    return by


def recipe_lines(ok: list[dict]) -> list[str]:
    """A line when the strategies' FP8 steps ran different recipes (each framework's own
    where ``training.fp8_recipe`` is unset): their compute differs by more than the
    frameworks' kernel stacks."""
    recipes = {r["strategy"]: r["fp8_recipe"] for r in ok if r["fp8_recipe"]}
    if len(set(recipes.values())) < 2:
        return []
    ran = ", ".join(f"{name} {recipe}" for name, recipe in recipes.items())
    return [f"# FP8 recipes differ: {ran} (each framework's own where training.fp8_recipe "
            f"is unset; set it to price one recipe, which a framework that cannot run it "
            f"refuses)"]


def kernel_lines(ok: list[dict]) -> list[str]:
    """Which kernel stack prices each strategy's step: the named mechanism behind a
    difference in compute time between frameworks (one line per stack)."""
    by = strategies_by_stack((r["kernels"], r["strategy"]) for r in ok)
    if len(by) < 2:
        return [f"# kernels: every strategy on {stack}" for stack in by]
    return [f"# kernels of {', '.join(names)}: {stack}" for stack, names in by.items()]


def _energy_lines(cmp: Comparison, ok: list[dict]) -> list[str]:
    live = [r for r in ok if r["energy_per_step_kwh"] is not None]
    if not live or cmp.site is None:
        return [f"# energy: no power data for {cmp.cluster['gpu']} (simulator/data/power.yaml)"]
    s = cmp.site
    head = ["strategy", "kWh/iter", "kWh/1M tok", "kg CO2/1M tok", "elec $/1M tok",
            "avg W/GPU", "peak kW/node"]
    rows = [[r["strategy"] + (" (OOM)" if r["oom"] else ""), _f(r["energy_per_step_kwh"], ".4g"),
             _f(r["kwh_per_1m_tokens"], ".4g"), _f(r["co2_kg_per_1m_tokens"], ".4g"),
             _f(r["electricity_usd_per_1m_tokens"], ".4g"), _f(r["avg_gpu_power_w"], ",.0f"),
             _f(r["peak_node_power_w"] and r["peak_node_power_w"] / 1e3, ".2f")] for r in live]
    return ["", f"# energy at the site (PUE {s.pue:g}), electricity {s.usd_per_kwh:g} USD/kWh, "
                f"grid {s.carbon_kg_per_kwh:g} kg CO2/kWh (--pue, --electricity-price, "
                f"--carbon-intensity; defaults and sources in simulator/data/power.yaml)",
            *_grid(head, rows)]


def _cost_lines(cmp: Comparison, ok: list[dict]) -> list[str]:
    if cmp.price is None:
        return [f"# cost: no default price for {cmp.cluster['gpu']}; pass "
                f"--price-per-gpu-hour or --instance"]
    budget = cmp.budget is not None
    lines = ["", f"# cost at {cmp.price.usd_per_gpu_hour:.4f} USD per GPU-hour: "
                 f"{cmp.price.label}"]
    if budget:
        lines.append(f"# budget: {cmp.budget.describe()}; comm wait = exposed comm + wait "
                     f"(paid GPU time without compute), part of training")
    head = ["strategy", "$/iter", "$/1M tok", "$/1k samples", "comm-wait %"]
    head += ["GPU-hours", "wall days", "training $", "comm-wait $", "migration $", "total $"] \
        if budget else []
    head.append("waste %")
    lines += _grid(head, [cost_cells(r, budget) for r in ok if r["per_iteration_usd"]
                          is not None])
    lines.append("# waste % = share of that strategy's spend the cheapest strategy that fits "
                 "in memory would save" + (" (total incl. migration)" if budget else
                                          " (per sample)"))
    return lines
