"""`clustersim run` and `clustersim trace`: one training iteration from a scenario."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..choices import DEFAULT_SCENARIO
from .common import metric_rows, names_sets

_SET_HELP = "Override a scenario key, e.g. --set cluster.nodes=16 (repeatable)."


def register(cli: click.Group) -> None:
    """Add ``run`` and ``trace`` to the ``clustersim`` group."""

    @cli.command("run")
    @click.argument("scenario", default=DEFAULT_SCENARIO, metavar="[SCENARIO]")
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
    @click.option("--out", type=click.Path(path_type=Path), default=None,
                  help="Write summary.json, CSVs, a Perfetto timeline and PNG plots here.")
    @click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
                  show_default=True)
    @names_sets
    def run_cmd(scenario, sets, out, fmt):
        """Simulate one training iteration of SCENARIO [default: quickstart].

        SCENARIO is a scenario YAML file or a shipped name (scenarios/).
        """
        from ..metrics.outputs import write_outputs
        from ..outpaths import prepare_out_dir
        from ..pipeline import build_setup, run_setup
        from ..scenario import load_scenario, resolve_scenario

        path = resolve_scenario(scenario)
        scn = load_scenario(path, list(sets))
        if out is not None:
            prepare_out_dir(out)             # refused before the simulation, not after
        setup = build_setup(scn, str(path))
        result = run_setup(setup)
        m, extra = result.metrics, result.extrapolation
        if out is not None:
            ranks = {c.id: c.ranks for c in setup.trace.classes}
            write_outputs(out, result.timeline, m, setup.cluster,
                          scn.model_dump(mode="json"), ranks)
            if extra is not None:        # the timeline and tables are of the replayed step
                (out / "extrapolation.json").write_text(json.dumps(extra.as_dict(), indent=2))
        if fmt == "json":
            d = m.as_dict() if extra is None else {**m.as_dict(), "extrapolated": extra.as_dict()}
            click.echo(json.dumps(d, indent=2))
            return
        meta = setup.trace.meta
        click.echo(f"# {scn.name}: {meta.get('model')} {meta.get('strategy')} on "
                   f"{setup.trace.world_size} x {setup.cluster.G.graph.get('gpu')} "
                   f"({setup.cluster.G.graph.get('name')}), global batch "
                   f"{meta.get('global_batch')}, {scn.training.precision}")
        rows = metric_rows(m, setup.capacity_bytes / float(1 << 30))
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            click.echo(f"{key:<{width}}  {value}")
        if extra is not None:
            click.echo(f"# {extra.note()}")
        if out is not None:
            click.echo(f"# outputs in {out} (timeline.json opens in https://ui.perfetto.dev)")

    @cli.command("trace")
    @click.argument("scenario", default=DEFAULT_SCENARIO, metavar="[SCENARIO]")
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
                  required=True, help="Trace file to write (.json or .json.gz).")
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
    @click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists.")
    @names_sets
    def trace_cmd(scenario, output, sets, overwrite):
        """Write the Trace that SCENARIO's strategy generates (docs/trace-format.md)."""
        from ..pipeline import build_setup
        from ..scenario import load_scenario, resolve_scenario
        from ..trace.io import write_trace

        path = resolve_scenario(scenario)
        setup = build_setup(load_scenario(path, list(sets)), str(path), extrapolate_steps=False)
        write_trace(setup.trace, output, overwrite=overwrite)
        n_ops = sum(len(c.ops) for c in setup.trace.classes)
        click.echo(f"wrote {output}: {setup.trace.world_size} ranks, "
                   f"{len(setup.trace.classes)} rank class(es), {n_ops} ops")
