"""`clustersim compare`: strategies side by side on one model and cluster, with cost."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..choices import DEFAULT_COMPARE_STRATEGIES, DEFAULT_SCENARIO, framework_of
from ..errors import ConfigError
from ..progress import enabled, quiet_option, stage
from .common import names_sets, price_options
from .configfile import config_options
from .configfile import load as load_with_config

if TYPE_CHECKING:           # the simulator loads only when the command runs
    from ..compare.cost import Budget

_SET_HELP = ("Override a scenario key, e.g. --set cluster.nodes=4, or a key of its topology "
             "file, e.g. --set topology.params.gpu=H100-SXM (repeatable).")


def _budget(tokens: str | None, epochs: str | None, dataset_samples: str | None,
            iterations: str | None) -> Budget | None:
    from ..compare.cost import Budget, parse_count
    given = [(k, v) for k, v in (("tokens", tokens), ("epochs", epochs),
                                 ("iterations", iterations)) if v is not None]
    if len(given) > 1:
        raise ConfigError(f"give one budget, not {' and '.join('--' + k for k, _ in given)}",
                          source=f"--{given[1][0]}")
    if not given:
        if dataset_samples is not None:
            raise ConfigError("--dataset-samples only goes with --epochs",
                              source="--dataset-samples")
        return None
    kind, text = given[0]
    samples = parse_count(dataset_samples, "--dataset-samples") if dataset_samples else None
    return Budget(kind, parse_count(text, f"--{kind}"), samples)


def register(cli: click.Group) -> None:
    """Add ``compare`` to the ``clustersim`` group."""

    @cli.command("compare")
    @click.argument("scenario", default=DEFAULT_SCENARIO, metavar="[SCENARIO]")
    @click.option("--strategies", default=None, metavar="LIST",
                  help="Comma-separated strategies to compare [default: "
                       f"{','.join(DEFAULT_COMPARE_STRATEGIES)}; and the scenario's own "
                       "strategy as it stands when it is megatron, torchtitan or deepspeed].")
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
    @click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]),
                  default="table", show_default=True)
    @click.option("--out", type=click.Path(path_type=Path), default=None,
                  help="Also write compare.csv, compare.json and PNG charts here (a folder "
                       "clustersim wrote, or a new or empty one).")
    @price_options
    @click.option("--tokens", default=None, metavar="N",
                  help="Price a token budget, e.g. 300B or 2T.")
    @click.option("--epochs", default=None, metavar="E",
                  help="Price E epochs of --dataset-samples samples.")
    @click.option("--dataset-samples", default=None, metavar="N",
                  help="Samples per epoch, e.g. 1.28M.")
    @click.option("--iterations", default=None, metavar="N", help="Price N iterations.")
    @click.option("--migration-days", "migration", multiple=True, metavar="DAYS|STRATEGY=DAYS",
                  help="One-off person-days to adopt a strategy: DAYS for every strategy of "
                       "another framework than the scenario's, STRATEGY=DAYS for one "
                       "(repeatable).")
    @click.option("--day-rate", type=float, default=None, metavar="USD",
                  help="Cost of one person-day (needed with --migration-days).")
    @click.option("--scaling/--no-scaling", default=True, show_default=True,
                  help="Also simulate twice the GPUs for the scaling efficiency.")
    @click.option("--capacity/--no-capacity", default=True, show_default=True,
                  help="Also search the largest model of the family that fits.")
    @click.option("--electricity-price", "usd_per_kwh", type=float, default=None,
                  metavar="USD", help="Price of one kWh [default: simulator/data/power.yaml, "
                  "US industrial average].")
    @click.option("--carbon-intensity", "carbon", type=float, default=None, metavar="KG",
                  help="Grid kg CO2 per kWh [default: simulator/data/power.yaml, US average].")
    @click.option("--pue", type=float, default=None, metavar="X",
                  help="Site power usage effectiveness, >= 1 [default: "
                       "simulator/data/power.yaml].")
    @config_options
    @quiet_option
    @names_sets
    def compare_cmd(scenario, strategies, sets, fmt, out, price, instance, tokens, epochs,
                    dataset_samples, iterations, migration, day_rate, scaling, capacity,
                    usd_per_kwh, carbon, pue, config, config_format):
        """Compare training strategies on SCENARIO's model and cluster [default: quickstart].

        Per strategy: peak memory per GPU and the out-of-memory verdict, the largest model
        of the family that fits, iteration time, samples/s and tokens/s, communication time
        and its exposed part, scaling efficiency on twice the GPUs, cost (per
        iteration, per million tokens, per 1,000 samples, and for a --tokens/--epochs/
        --iterations budget) with the cost of communication waits shown on its own, and
        energy (kWh, CO2 and electricity per million tokens, GPU and node power;
        docs/energy.md).
        Strategies: fsdp-full, fsdp-grad-op, fsdp-no-shard, fsdp-hybrid, fsdp-hybrid-zero2,
        ddp, tf-mirrored, tf-multiworker, tf-ps, tf-central, horovod; also megatron,
        torchtitan, deepspeed and their variants with degrees in the name (megatron:tp8pp2vp2dopt,
        torchtitan:tp8rep2, deepspeed:zero3tp2; docs/compare.md). One that cannot run
        on this cluster is reported as n/a with the reason (docs/compare.md). Each
        strategy that ran gets its accuracy envelope (nearest validated case, its error).
        """
        from ..compare.cost import resolve_price
        from ..compare.options import default_strategies, migration_plan, parse_strategies
        from ..outpaths import prepare_out_dir
        from ..scenario import resolve_scenario

        path = resolve_scenario(scenario)
        scn = load_with_config(path, list(sets), config, config_format)
        strategies = strategies or default_strategies(str(scn.strategy.get("name")))
        named = parse_strategies(strategies)
        site = _site(usd_per_kwh, carbon, pue)
        budget = _budget(tokens, epochs, dataset_samples, iterations)
        days = migration_plan(migration, named, framework_of(str(scn.strategy.get("name"))))
        if any(days.values()) and day_rate is None:
            raise ConfigError("migration days need --day-rate (USD per person-day)",
                              source="--day-rate")
        if day_rate is not None and not day_rate >= 0:
            raise ConfigError(f"must be >= 0 USD, got {day_rate!r}", source="--day-rate")
        from ..compare.report import render_table, to_csv, to_json   # the simulator: once
        from ..compare.runner import compare                       # the input is good
        from ..topology.build import scenario_graph
        from ..compare.trust import envelopes
        from ..validation.envelope import grouped_lines, trust_sentence
        G = scenario_graph(scn)
        cost_price = resolve_price(str(G.graph.get("gpu")), price, instance,
                                    topology=G.graph.get("name"))
        if out is not None:
            prepare_out_dir(out)             # refused before the comparison, not after
        say = (lambda msg: stage(f"compare: {msg}")) if enabled() else None
        cmp = compare(scn, named, source=scn.source, price=cost_price, budget=budget,
                      migration_days=days, day_rate=day_rate, scaling=scaling,
                      capacity=capacity, progress=say, site=site)
        acc = envelopes(cmp, scn.model)
        lines = grouped_lines({k: e.lines() for k, e in acc.items()})
        trust = trust_sentence(acc.values())
        as_dicts = {k: e.as_dict() for k, e in acc.items()}
        if out is not None:
            from ..compare.charts import write_outputs    # matplotlib: only for --out
            from ..compare.page import write_page         # the HTML page: only for --out
            write_outputs(out, cmp, as_dicts)
            write_page(cmp, out, _inputs(path, sets, strategies, cost_price, budget, scn),
                       lines, trust)
        text = {"json": lambda c: to_json(c, as_dicts), "csv": to_csv,
                "table": lambda c: render_table(c, lines, trust)}[fmt](cmp)
        click.echo(text)
        if out is not None and fmt == "table":
            click.echo(f"# outputs in {out}: compare.csv, compare.json, iteration_time.png, "
                       f"memory.png, cost.png, report.html")


def _site(usd_per_kwh: float | None, carbon: float | None, pue: float | None):
    """The site of the energy columns: power.yaml's defaults, each option replacing one.

    :raises ConfigError: (the option) for a negative price or carbon, or a PUE below 1.
    """
    from ..energy.timeline import default_site
    for value, option, low in ((usd_per_kwh, "--electricity-price", 0.0),
                               (carbon, "--carbon-intensity", 0.0), (pue, "--pue", 1.0)):
        if value is not None and not low <= value < float("inf"):
            raise ConfigError(f"must be a number >= {low:g}, got {value!r}", source=option)
    given = {"pue": pue, "usd_per_kwh": usd_per_kwh, "carbon_kg_per_kwh": carbon}
    return dataclasses.replace(default_site(),
                               **{k: v for k, v in given.items() if v is not None})


def _inputs(path, sets, strategies, price, budget, scn) -> dict:
    """What ``report.html`` lists as the inputs of a comparison."""
    return {"scenario file": str(path), "--set": list(sets), "strategies": strategies,
            "price": f"{price.usd_per_gpu_hour:g} USD per GPU-hour ({price.label})"
            if price else None, "budget": budget.describe() if budget else None,
            "scenario (after --set)": scn.model_dump(mode="json")}
