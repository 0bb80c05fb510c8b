"""`clustersim reliability`: failures, checkpoints and recovery over a whole training job."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from ..progress import quiet_option
from .common import names_sets

DEFAULT = "reliability-1024gpu"
_SET_HELP = ("Override a scenario key, e.g. --set reliability.checkpoint.interval='10 min', "
             "or a key of its topology file, e.g. --set topology.params.node.gpu=H100-SXM "
             "(repeatable).")


def register(cli: click.Group) -> None:
    """Add ``reliability`` to the ``clustersim`` group."""

    @cli.command("reliability")
    @click.argument("scenario", default=DEFAULT, metavar="[SCENARIO]")
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
    @click.option("--trials", type=click.IntRange(min=1, max=1_000_000), default=200,
                  show_default=True, help="Independent runs of the whole job.")
    @click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                  help="Base seed; trial i always draws from (seed, i).")
    @click.option("--workers", type=click.IntRange(min=1, max=256), default=None,
                  help="Processes running trials [default: CPU count]; results are the "
                       "same for any value.")
    @click.option("--max-events", type=click.IntRange(min=1), default=None, metavar="N",
                  help="Refuse a study past this many trial events, counted from the rates "
                       "before any trial runs [default: 5,000,000; docs/reliability.md].")
    @click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
                  show_default=True)
    @click.option("--out", type=click.Path(path_type=Path), default=None,
                  help="Write summary.json, trials/recoveries/interval CSVs and PNG plots "
                       "(timeline, recovery CDF, ETTR against interval) here.")
    @click.option("--timings", is_flag=True,
                  help="Print how long the plan, trials and search took (wall clock) to "
                       "stderr; results never include them, so a seed gives the same bytes.")
    @quiet_option
    @names_sets
    def reliability_cmd(scenario, sets, trials, seed, workers, max_events, fmt, out, timings):
        """Simulate SCENARIO's whole training job with failures, many times.

        Reports ETTR (goodput), time lost per cause, recovery times (mean, p50, p99,
        worst), and the checkpoint interval that maximises ETTR next to Young's and
        Daly's formulas. SCENARIO is a file or a shipped name [default: reliability-1024gpu];
        a scenario without a `reliability:` section gets the defaults
        (simulator/data/reliability.yaml, docs/reliability.md).
        """
        from ..outpaths import prepare_out_dir
        from ..scenario import load_scenario, resolve_scenario

        path = resolve_scenario(scenario)
        scn = load_scenario(path, list(sets))
        if out is not None:
            prepare_out_dir(out)
        from ..reliability.report import as_dict, table, timings_line   # the simulator: once
        from ..reliability.study import run_study                     # the input is good
        study = run_study(scn, scn.source, trials, seed, workers or os.cpu_count() or 1,
                          record=out is not None, max_events=max_events)
        if out is not None:
            from ..reliability.outputs import write_outputs   # matplotlib: only for --out
            from ..reliability.page import write_page
            write_outputs(study, out)
            write_page(study, out)
        if timings:
            click.echo(timings_line(study), err=True)
        if fmt == "json":
            click.echo(json.dumps(as_dict(study), indent=2))
            return
        click.echo("\n".join(table(study)))
        if out is not None:
            click.echo(f"# outputs in {out}")
