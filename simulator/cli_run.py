"""`clustersim run` and `clustersim trace`: one training iteration from a scenario."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .choices import DEFAULT_SCENARIO

if TYPE_CHECKING:           # the simulator loads only when a command runs
    from .metrics import Metrics

_SET_HELP = "Override a scenario key, e.g. --set cluster.nodes=16 (repeatable)."


def _rows(m: Metrics, capacity_gib: float = 0.0) -> list[tuple[str, str]]:
    over = (f" (peak {m.peak_memory_gib:.1f} GiB > {capacity_gib:.1f} GiB per GPU)"
            if capacity_gib else "")
    return [
        ("iteration_time_s", f"{m.iteration_time_s:.4f} s"),
        ("samples_per_s", f"{m.samples_per_s:,.1f}"),
        ("tokens_per_s", f"{m.tokens_per_s:,.0f}"),
        ("tokens_per_s_per_gpu", f"{m.tokens_per_s_per_gpu:,.0f}"),
        ("tflops_per_gpu", f"{m.tflops_per_gpu:.1f} TFLOP/s"),
        ("mfu", f"{100 * m.mfu:.1f} %"),
        ("compute_s", f"{m.compute_s:.4f} s"),
        ("comm_s", f"{m.comm_s:.4f} s"),
        ("exposed_comm_s", f"{m.exposed_comm_s:.4f} s"),
        ("wait_s", f"{m.wait_s:.4f} s"),
        ("memory_wait_s", f"{m.memory_wait_s:.4f} s"),
        ("gpu_utilization", f"{100 * m.gpu_utilization:.1f} %"),
        ("peak_memory_gib", f"{m.peak_memory_gib:.2f} GiB"),
        ("oom", "yes: " + "; ".join(f"{c} at {op}" for c, op in m.oom_at.items()) + over
         if m.oom else "no"),
    ]


def register(cli: click.Group) -> None:
    """Add ``run`` and ``trace`` to the ``clustersim`` group."""

    @cli.command("run")
    @click.argument("scenario", default=DEFAULT_SCENARIO, metavar="[SCENARIO]")
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
    @click.option("--out", type=click.Path(path_type=Path), default=None,
                  help="Write summary.json, CSVs, a Perfetto timeline and PNG plots here.")
    @click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
                  show_default=True)
    def run_cmd(scenario, sets, out, fmt):
        """Simulate one training iteration of SCENARIO [default: quickstart].

        SCENARIO is a scenario YAML file or a shipped name (scenarios/).
        """
        from .metrics.outputs import write_outputs
        from .pipeline import build_setup, run_setup
        from .scenario import load_scenario, resolve_scenario

        path = resolve_scenario(scenario)
        scn = load_scenario(path, list(sets))
        setup = build_setup(scn, str(path))
        result = run_setup(setup)
        m = result.metrics
        if out is not None:
            ranks = {c.id: c.ranks for c in setup.trace.classes}
            write_outputs(out, result.timeline, m, setup.cluster,
                          scn.model_dump(mode="json"), ranks)
        if fmt == "json":
            click.echo(json.dumps(m.as_dict(), indent=2))
            return
        meta = setup.trace.meta
        click.echo(f"# {scn.name}: {meta.get('model')} {meta.get('strategy')} on "
                   f"{setup.trace.world_size} x {setup.cluster.G.graph.get('gpu')} "
                   f"({setup.cluster.G.graph.get('name')}), global batch "
                   f"{meta.get('global_batch')}, {scn.training.precision}")
        rows = _rows(m, setup.capacity_bytes / float(1 << 30))
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            click.echo(f"{key:<{width}}  {value}")
        if out is not None:
            click.echo(f"# outputs in {out} (timeline.json opens in https://ui.perfetto.dev)")

    @cli.command("trace")
    @click.argument("scenario", default=DEFAULT_SCENARIO, metavar="[SCENARIO]")
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
                  required=True, help="Trace file to write (.json or .json.gz).")
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
    @click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists.")
    def trace_cmd(scenario, output, sets, overwrite):
        """Write the Trace that SCENARIO's strategy generates (docs/trace-format.md)."""
        from .pipeline import build_setup
        from .scenario import load_scenario, resolve_scenario
        from .trace.io import write_trace

        path = resolve_scenario(scenario)
        setup = build_setup(load_scenario(path, list(sets)), str(path))
        write_trace(setup.trace, output, overwrite=overwrite)
        n_ops = sum(len(c.ops) for c in setup.trace.classes)
        click.echo(f"wrote {output}: {setup.trace.world_size} ranks, "
                   f"{len(setup.trace.classes)} rank class(es), {n_ops} ops")
