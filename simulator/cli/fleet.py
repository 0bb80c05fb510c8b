"""`clustersim cluster`: many jobs on one cluster (a job mix, a scheduler, placement,
contention between jobs, node failures)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import ConfigError
from ..progress import quiet_option, stage
from .common import format_option, names_sets

DEFAULT_MIX = "acme-seren-day"


def register(cli: click.Group) -> None:
    """Add ``cluster`` to the ``clustersim`` group."""

    @cli.command("cluster")
    @click.argument("mix", default=DEFAULT_MIX, metavar="[MIX]")
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                  help="Override a key of the mix, e.g. --set placement=spread or "
                       "--set cluster.nodes=64 (repeatable).")
    @click.option("--against", "against", multiple=True, metavar="KEY=VALUE",
                  help="Run the mix a second time with this override too and say what it "
                       "changes, e.g. --against placement=spread (repeatable: all at once).")
    @click.option("--out", type=click.Path(path_type=Path), default=None,
                  help="Write jobs.csv, fleet.csv, summary.json, PNG plots and report.html.")
    @format_option
    @quiet_option
    @names_sets
    def cluster_cmd(mix, sets, against, out, fmt):
        """Simulate a mix of jobs sharing one cluster [default: acme-seren-day].

        MIX is a mix YAML file or a shipped name (scenarios/mixes/; docs/cluster.md).
        Jobs arrive, wait for the scheduler (fifo, easy, priority), are placed (packed,
        spread, topology) and run their steps at the pace their neighbours on the
        fabric leave them; node and leaf-switch failures stop the jobs on them. Prints
        the fleet's queue times, slowdown from contention, GPU utilisation and cost.
        """
        from ..outpaths import prepare_out_dir
        from ..fleet.mix import load_mix

        loaded, source = load_mix(mix, list(sets))
        other = load_mix(mix, list(sets) + list(against)) if against else None
        if out is not None:
            prepare_out_dir(out)
        from ..fleet.summary import comparison, decision, summarize, table_lines
        result, what, price = _run(loaded, source)
        summary = summarize(result, price, loaded.power_budget_kw)
        sentences = [decision(summary, what)]
        if other is not None:
            stage(f"cluster: again with {' '.join(against)}")
            second, _, price = _run(*other)
            sentences.append(comparison(summary, summarize(second, price,
                                                           other[0].power_budget_kw),
                                        " and ".join(against)))
        if out is not None:
            from ..fleet.outputs import write_outputs      # matplotlib: only for --out
            write_outputs(out, result, summary, sentences, loaded.name,
                          loaded.model_dump(mode="json", exclude_none=True))
        if fmt == "json":
            click.echo(json.dumps({"summary": summary, "answer": sentences}, indent=2))
            return
        click.echo(f"# {loaded.name}: {what}")
        rows = table_lines(summary)
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            click.echo(f"{key:<{width}}  {value}")
        for line in sentences:
            click.echo(f"# {line}")
        if out is not None:
            click.echo(f"# outputs in {out}")


def _run(mix, source: str):
    """Build and run the fleet of ``mix``: the result, what ran, in words, and the price
    of a GPU-hour of its cluster (the catalog's list price, as `compare` takes it; None
    where it has none)."""
    from ..compare.cost import resolve_price
    from ..fleet.build import build_fleet
    stage(f"cluster: building the jobs of {mix.name}")
    fleet = build_fleet(mix, source)
    stage(f"cluster: {len(fleet.specs)} jobs on {fleet.n_gpus} GPUs, {mix.scheduler} "
          f"scheduler, {mix.placement} placement")
    what = (f"{len(fleet.specs)} jobs on {fleet.n_gpus:,} GPUs ({mix.cluster.topology}), "
            f"{mix.scheduler} scheduler, {mix.placement} placement")
    price = resolve_price(fleet.gpu, topology=mix.cluster.topology)
    try:
        result = fleet.run()
    except ConfigError as exc:          # a job the simulation finds cannot run as given
        raise exc.located(source) from None
    return result, what, price.usd_per_gpu_hour if price is not None else None
