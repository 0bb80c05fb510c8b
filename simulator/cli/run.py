"""`clustersim run` and `clustersim trace`: one training iteration from a scenario."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from ..choices import DEFAULT_SCENARIO
from ..gcpause import gc_paused
from ..lifetime import keep
from ..progress import quiet_option, ticking
from .common import format_option, metric_rows, names_sets, price_options
from .configfile import config_options
from .configfile import load as load_with_config

_SET_HELP = ("Override a scenario key, e.g. --set cluster.nodes=16, or a key of its topology "
             "file, e.g. --set topology.params.gpu=H100-SXM (repeatable).")


def register(cli: click.Group) -> None:
    """Add ``run`` and ``trace`` to the ``clustersim`` group."""

    @cli.command("run")
    @click.argument("scenario", default=DEFAULT_SCENARIO, metavar="[SCENARIO]")
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
    @click.option("--out", type=click.Path(path_type=Path), default=None,
                  help="Write summary.json, CSVs, a Perfetto timeline and PNG plots here.")
    @click.option("--timeline-format", type=click.Choice(["perfetto", "kineto"]),
                  default="perfetto", show_default=True,
                  help="With --out: timeline.json (Chrome trace, for ui.perfetto.dev), or "
                       "kineto/rank-<r>.pt.trace.json, PyTorch profiler traces one per rank "
                       "that HolisticTraceAnalysis opens (docs/trace-format.md).")
    @format_option
    @price_options
    @config_options
    @quiet_option
    @names_sets
    def run_cmd(scenario, sets, out, timeline_format, fmt, price, instance, config,
                config_format):
        """Simulate one training iteration of SCENARIO [default: quickstart].

        SCENARIO is a scenario YAML file or a shipped name (scenarios/). The answer says
        what the step costs (per step, per 1M tokens, per hour of the job's GPUs) at the
        GPU's list price in simulator/data/prices.yaml, priced as compare prices it, and
        ends with its accuracy envelope: the nearest validated case, its error, and where
        this run leaves the validated ground (docs/accuracy.md).
        """
        from ..outpaths import atomic_write_text, prepare_out_dir
        from ..errors import ConfigError
        from ..scenario import resolve_scenario

        if timeline_format != "perfetto" and out is None:
            raise ConfigError("--timeline-format: applies to the files of --out DIR; give "
                              "--out too")
        # the scenario, the simulator's modules (imported here, once the input is good)
        # and its setup: objects that live to the end, no cycles (simulator.gcpause)
        with gc_paused():
            path = resolve_scenario(scenario)
            scn = load_with_config(path, list(sets), config, config_format)
            if out is not None:
                prepare_out_dir(out)             # refused before the simulation, not after
            from ..models import load_model
            from ..models.layout import describe as describe_layout
            from ..pipeline import build_setup, kernel_stack, memory_format_of, run_setup
            from ..validation.envelope import Query, envelope
            setup = build_setup(scn, scn.source)
            from ..compare.cost import no_price_line, resolve_price
            gpu = str(setup.cluster.G.graph.get("gpu"))
            cost_price = resolve_price(gpu, price, instance,     # a bad --instance: refused
                                       topology=setup.cluster.G.graph.get("name"))  # now
        note = batch_note(setup.scenario, sets, setup.trace.meta.get("global_batch"))
        if note:
            click.echo(f"clustersim: run: {note}", err=True)
        with ticking(f"run: simulating one iteration on {setup.trace.world_size} GPUs"):
            result = run_setup(setup)
        keep("run", (setup, result))    # the executable frees them at exit, all at once
        m, extra = result.metrics, result.extrapolation
        meta = setup.trace.meta
        what = (f"{meta.get('model')} {_framework_of(meta)}{_plan_of(meta)} on "
                f"{setup.trace.world_size} x {setup.cluster.G.graph.get('gpu')} "
                f"({setup.cluster.G.graph.get('name')})")
        capacity_gib = setup.capacity_bytes / float(1 << 30)
        from ..energy.report import energy_rows, energy_sentence
        from ..energy.timeline import energy_of
        energy = energy_of(result)
        cost = step_cost_of(setup, m, cost_price)
        priced = {"price": dataclasses.asdict(cost_price) if cost_price else None,
                  "cost": cost.as_dict() if cost else None,
                  **({} if cost_price else {"cost_note": no_price_line(gpu)})}
        from ..loader import loader_rows
        from .replay import unknown_metrics      # what replay says of the same trace
        unknown = unknown_metrics(setup.trace)
        rows = ([(k, f"n/a ({unknown[k]})" if k in unknown else v)
                 for k, v in metric_rows(m, capacity_gib)]
                + loader_rows(result.loader_s, result.loader_wait_s, m.iteration_time_s)
                + energy_rows(energy, gpu) + cost_rows(cost, cost_price, gpu))
        from ..evaluation import eval_rows, evaluation_pass
        ev = evaluation_pass(scn, scn.source, setup.cluster)
        rows += eval_rows(ev, m.iteration_time_s, energy)
        from ..metrics.comm_kinds import comm_by_kind, comm_kind_lines
        kinds = comm_by_kind(result.timeline)
        kinds_of = ("communication by kind" + (" (of the replayed micro-steps)" if extra else "")
                    + ":")
        model = load_model(scn.model)
        layout = memory_format_of(setup.scenario, model,
                                  str(setup.scenario.strategy.get("name", "")))
        # what prices the step's kernels (compare's "# kernels of ..." for one strategy)
        kernels = kernel_stack(setup)
        acc = envelope(Query.of(str(meta.get("strategy")), str(meta.get("model")),
                                float(meta.get("params") or 0), gpu, setup.trace.world_size,
                                scn.training.precision, model.is_moe,
                                scn.training.finetune, model.family))
        if out is not None:
            from ..metrics.outputs import write_outputs     # matplotlib: only for --out
            from ..metrics.page import write_page
            ranks = {c.id: c.ranks for c in setup.trace.classes}
            write_outputs(out, result.timeline, m, setup.cluster,
                          scn.model_dump(mode="json"), ranks, accuracy=acc.as_dict(),
                          energy=energy.as_dict() if energy else None,
                          timeline_format=timeline_format, cost=priced)
            write_page(out, m, rows, what, capacity_gib, scn.model_dump(mode="json"),
                       accuracy=acc.lines(), extrapolated=extra.note() if extra else None,
                       energy=energy_sentence(energy), comm_kinds=(kinds_of, kinds),
                       cost=cost_sentence(cost, cost_price, gpu, energy),
                       bubble=bubble_line(meta))
            if extra is not None:        # the timeline and tables are of the replayed step
                atomic_write_text(out / "extrapolation.json",
                                  json.dumps(extra.as_dict(), indent=2))
        if fmt == "json":
            d = {**m.as_dict(), **{k: None for k in unknown},     # null as replay gives
                 **({"memory_format": layout[0]} if layout is not None else {}),
                 "kernels": kernels,
                 "comm_by_kind": [k.as_dict() for k in kinds],
                 "accuracy": acc.as_dict(),
                 "energy": energy.as_dict() if energy else None, **priced}
            if result.loader_s > 0:
                d["train_loader"] = {"loader_s": result.loader_s,
                                     "wait_s": result.loader_wait_s}
            if ev is not None:
                d["evaluation"] = ev.as_dict()
            if extra is not None:
                d["extrapolated"] = extra.as_dict()
            click.echo(json.dumps(d, indent=2))
            return
        click.echo(f"# {scn.name}: {what}, global batch {meta.get('global_batch')}, "
                   f"{scn.training.precision}")
        if layout is not None:
            click.echo(f"# {describe_layout(*layout)}")
        click.echo(f"# kernels: {kernels}")
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            click.echo(f"{key:<{width}}  {value}")
        if extra is not None:
            click.echo(f"# {extra.note()}")
        click.echo(f"# {kinds_of}")
        for line in comm_kind_lines(kinds):
            click.echo(f"#   {line}")
        bubble = bubble_line(meta)
        if bubble:
            click.echo(f"# {bubble}")
        if cost is not None:             # else its row said why, in one line
            click.echo(f"# cost: {cost_sentence(cost, cost_price, gpu, energy)}")
            click.echo(f"# price: {cost_price.label}")
        for line in acc.lines():
            click.echo(f"# accuracy: {line}")
        if out is not None and timeline_format == "kineto":
            click.echo(f"# outputs in {out} (kineto/: one PyTorch profiler trace per rank; "
                       f"HolisticTraceAnalysis: TraceAnalysis(trace_dir='{out}/kineto'))")
        elif out is not None:
            click.echo(f"# outputs in {out} (timeline.json opens in https://ui.perfetto.dev)")

    @cli.command("trace")
    @click.argument("scenario", default=DEFAULT_SCENARIO, metavar="[SCENARIO]")
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
                  required=True, help="Trace file to write (.json or .json.gz); with "
                  "--format chakra the prefix of OUTPUT.<rank>.et.")
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
    @click.option("--format", "fmt", type=click.Choice(["clustersim", "chakra"]),
                  default="clustersim", show_default=True,
                  help="clustersim's Trace JSON, or Chakra execution traces (one .et per "
                       "rank) that ASTRA-sim runs.")
    @click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists.")
    @names_sets
    def trace_cmd(scenario, output, sets, fmt, overwrite):
        """Write the Trace that SCENARIO's strategy generates (docs/trace-format.md), as
        clustersim JSON or as Chakra execution traces (docs/importers.md, "Chakra")."""
        from ..scenario import load_scenario, resolve_scenario

        path = resolve_scenario(scenario)
        scn = load_scenario(path, list(sets))
        from ..pipeline import build_setup          # the simulator: once the input is good
        from ..trace.io import write_trace
        setup = build_setup(scn, str(path), extrapolate_steps=False)
        if fmt == "chakra":
            from ..importers.chakra import write_chakra
            files = write_chakra(setup.trace, output, overwrite=overwrite)
            click.echo(f"wrote {len(files)} Chakra file(s) {files[0]} ... {files[-1]}")
            return
        write_trace(setup.trace, output, overwrite=overwrite)
        n_ops = sum(len(c.ops) for c in setup.trace.classes)
        click.echo(f"wrote {output}: {setup.trace.world_size} ranks, "
                   f"{len(setup.trace.classes)} rank class(es), {n_ops} ops")


def step_cost_of(setup, m, price):
    """The cost of the simulated step ``m`` of ``setup`` at ``price`` (None without one):
    :func:`simulator.compare.cost.step_cost`, compare's own, on every GPU the scenario
    holds, at the step's global batch."""
    from ..compare.cost import step_cost
    from ..topology.build import scenario_gpus
    meta = setup.trace.meta
    return step_cost(price, scenario_gpus(setup.scenario, setup.cluster.G), m,
                     int(meta.get("global_batch") or 0), meta.get("tokens_per_sample") or 0)


def cost_rows(cost, price, gpu: str) -> list[tuple[str, str]]:
    """(name, value) lines of a step's cost that ``run`` prints after its energy; one line
    saying why where there is none (a GPU without a price at ``price`` None)."""
    if cost is None:
        return [("cost", f"n/a: {cost_sentence(cost, price, gpu, None)}")]
    rows = [("cost_per_step_usd", f"{cost.per_iteration_usd:.4g} USD "
                                  f"({cost.gpus} x {cost.usd_per_gpu_hour:.2f} USD per "
                                  f"GPU-hour)")]
    if cost.per_million_tokens_usd is not None:
        rows.append(("cost_per_1m_tok_usd", f"{cost.per_million_tokens_usd:.4g} USD"))
    rows.append(("cluster_usd_per_hour", f"{cost.usd_per_hour:,.2f} USD ({cost.gpus} GPUs)"))
    return rows


def cost_sentence(cost, price, gpu: str, energy) -> str:
    """What the step costs in a sentence a manager reads: the GPUs rented at ``price``, and
    the electricity at the site where the energy model prices it."""
    if cost is None:
        from ..compare.cost import no_price_line
        return no_price_line(gpu) if price is None else "no step to price"
    per_m = "" if cost.per_million_tokens_usd is None else \
        f", {cost.per_million_tokens_usd:.3g} USD per 1M tokens"
    elec = ""
    if energy is not None and energy.usd_per_million_tokens is not None:
        elec = (f"; electricity at the site adds {energy.usd_per_million_tokens:.3g} USD per "
                f"1M tokens ({energy.usd_per_kwh:g} USD/kWh)")
    return (f"renting the {cost.gpus} x {gpu} at {cost.usd_per_gpu_hour:.2f} USD per GPU-hour "
            f"costs {cost.per_iteration_usd:.3g} USD a step{per_m}, "
            f"{cost.usd_per_hour:,.2f} USD an hour for the whole cluster{elec}")


def _framework_of(meta: dict) -> str:
    """The header's name of what runs (``PyTorch FSDP2 x TP8 via Megatron-Core`` for a
    Megatron scenario with ``use_torch_fsdp2``; else the strategy's name)."""
    from ..planwords import framework_words
    return framework_words(str(meta.get("strategy")), meta.get("dp_mode"),
                           int(meta.get("tp") or 1))


def _plan_of(meta: dict) -> str:
    """`` (tensor parallel 8 inside each server, data parallel 32 (FSDP))`` for a trace of
    a parallel plan (the framework's name alone says nothing of the plan: an FSDP2 x TP8
    job is spelt ``megatron``), else nothing."""
    if "tp" not in meta:
        return ""
    from ..planwords import plan_words
    keys = ("tp", "pp", "vp", "cp", "dp", "dp_mode", "schedule")
    return f" ({plan_words(**{k: meta[k] for k in keys if meta.get(k) is not None})})"


def bubble_line(meta: dict) -> str:
    """What a pipeline's ``wait_s`` mostly is, named: the bubble, with its textbook share of
    the schedule, (pp - 1) / (vp x m + pp - 1) for m micro-batches a step through pp stages
    of vp virtual stages each (Narayanan et al. 2021); "" without a pipeline."""
    pp, vp = int(meta.get("pp") or 1), int(meta.get("vp") or 1)
    if pp < 2:
        return ""
    m = int(meta.get("grad_accum") or 1)
    share = (pp - 1) / (vp * m + pp - 1)
    return (f"pipeline bubble: {pp} stages and {m} micro-batch(es) a step "
            f"({meta.get('schedule')}{f', {vp} virtual stages' if vp > 1 else ''}): the "
            f"stages idle about (pp - 1) / (vp x m + pp - 1) = {100 * share:.0f}% of the "
            f"schedule while it fills and drains, most of wait_s; more micro-batches a step "
            f"(training.grad_accum) shrink it")


_PLAN_KEYS = ("strategy", "cluster", "topology")    # --set keys that move the DP ranks


def batch_note(scn, sets, global_batch) -> str:
    """How the step's global batch follows from a ``--set`` of the plan or the cluster
    (which changes the data-parallel ranks) where the scenario fixes no
    ``training.global_batch``: no setting changes the global batch silently (issue 40);
    "" otherwise."""
    keys = {s.partition("=")[0].strip().split(".")[0] for s in sets}
    t = scn.training
    if t.global_batch is not None or not global_batch or not keys & set(_PLAN_KEYS):
        return ""
    dp = global_batch // (t.micro_batch * t.grad_accum)
    return (f"global batch {global_batch} samples = micro-batch {t.micro_batch} x "
            f"{t.grad_accum} micro-batch(es) a step x {dp} data-parallel ranks of this plan "
            f"(the micro-batches a step are kept, so a --set of the plan or the GPUs moves "
            f"it; a training.global_batch in place of training.grad_accum holds it)")
