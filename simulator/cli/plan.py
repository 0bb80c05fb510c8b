"""`clustersim plan`: search the parallel plans of a model on a cluster, replay the best."""

from __future__ import annotations

from pathlib import Path

import click

from ..choices import DEFAULT_SCENARIO
from ..errors import ConfigError
from ..progress import enabled, quiet_option, stage
from .common import names_sets, price_options
from .configfile import config_options, load_pieces

_SET_HELP = ("Override a scenario key, e.g. --set cluster.nodes=128 or --set "
             "training.seq_len=8192 (repeatable).")


def register(cli: click.Group) -> None:
    """Add ``plan`` to the ``clustersim`` group."""

    @cli.command("plan")
    @click.argument("scenario", default=DEFAULT_SCENARIO, metavar="[SCENARIO]")
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
    @click.option("--global-batch", type=int, default=None, metavar="N",
                  help="Samples per step, 1 to 2^40 [default: --config's or the scenario's "
                       "training.global_batch, else 4M tokens a step: 4,194,304 / seq_len "
                       "samples].")
    @click.option("--replay", type=click.IntRange(1, 100), default=3, show_default=True,
                  help="How many of the best estimates to simulate.")
    @click.option("--max-tp", type=click.IntRange(1, 64), default=16, show_default=True)
    @click.option("--max-pp", type=click.IntRange(1, 128), default=16, show_default=True)
    @click.option("--max-cp", type=click.IntRange(1, 32), default=4, show_default=True)
    @click.option("--max-vp", type=click.IntRange(1, 64), default=4, show_default=True,
                  help="Virtual pipeline stages of the interleaved schedule (each from 2 "
                       "that splits the layers evenly); 1 searches none.")
    @click.option("--max-ep", type=click.IntRange(1, 1024), default=64, show_default=True,
                  help="Expert parallelism of a mixture-of-experts model (divisors of its "
                       "experts); 1 searches none.")
    @click.option("--max-micro-batch", type=click.IntRange(1, 1024), default=8,
                  show_default=True)
    @click.option("--workers", type=click.IntRange(min=1, max=256), default=None,
                  help="Processes the replays run in, forked from this one: the same "
                       "answer whatever the number [default: the CPU cores].")
    @click.option("--max-work", type=click.IntRange(1), default=None, metavar="UNITS",
                  help="Refuse a search past this many units of work (about a millisecond "
                       "each), counted before it starts [default: 100,000; docs/plan.md].")
    @price_options
    @click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]),
                  default="table", show_default=True)
    @click.option("--out", type=click.Path(path_type=Path), default=None,
                  help="Also write plan.csv, plan.json and report.html here.")
    @config_options
    @quiet_option
    @names_sets
    def plan_cmd(scenario, sets, global_batch, replay, max_tp, max_pp, max_cp, max_vp, max_ep,
                 max_micro_batch, workers, max_work, price, instance, fmt, out, config,
                 config_format):
        """Search the parallel plans of SCENARIO's model on its cluster [default:
        quickstart].

        Enumerates tensor, pipeline (1F1B, interleaved with virtual stages), context and
        (for a mixture of experts) expert parallelism, FSDP/HSDP/DDP and the distributed optimizer over the rest, the
        micro-batch and the activation checkpointing mode for the global batch; prunes by
        per-GPU memory and an analytical step time; replays the --replay best with the
        simulator; prints them ranked by step time with tokens/s per GPU, memory per GPU,
        cost per 1M tokens, the Pareto front and why each wins (docs/plan.md).
        """
        from ..compare.cost import resolve_price
        from ..outpaths import prepare_out_dir
        from ..scenario import MAX_GLOBAL_BATCH, resolve_scenario

        path = resolve_scenario(scenario)
        scn, pieces = load_pieces(path, list(sets), config, config_format)
        from ..planner import Limits, search        # the simulator: once the input is good
        from ..study.executors import cores
        from ..planner.batch import global_batch as global_batch_for
        from ..planner.report import to_csv, to_json, to_table
        from ..topology.build import scenario_gpus, scenario_graph
        G = scenario_graph(scn)
        gpus = scenario_gpus(scn, G)
        batch, said = global_batch_for(scn, global_batch, pieces)
        if not 1 <= batch <= MAX_GLOBAL_BATCH:
            raise ConfigError(f"must be 1 to {MAX_GLOBAL_BATCH} samples, got {batch}",
                              source="--global-batch")
        cost_price = resolve_price(str(G.graph.get("gpu")), price, instance,
                                    topology=G.graph.get("name"))
        if out is not None:
            prepare_out_dir(out)
        say = (lambda msg: stage(f"plan: {msg}")) if enabled() else None
        limits = Limits(max_tp=max_tp, max_pp=max_pp, max_cp=max_cp, max_vp=max_vp,
                        max_ep=max_ep, max_micro_batch=max_micro_batch)
        result = search(scn, batch, replay=replay, limits=limits, price=cost_price,
                        source=scn.source, progress=say, max_work=max_work, graph=G,
                        workers=workers or cores())
        from ..planner.page import answer
        trust = _accuracy(result, scn, gpus)
        batch_line = (f"global batch: {batch:,} samples x {scn.training.seq_len:,} tokens = "
                      f"{batch * scn.training.seq_len / 1e6:.2f}M tokens a step ({said})")
        if out is not None:
            from ..planner.page import write_outputs
            write_outputs(result, out, {"scenario file": str(path), "--set": list(sets),
                                        "global batch": f"{batch} ({said})",
                                        "scenario (after --set)": scn.model_dump(mode="json")},
                          trust)
        from ..planner.strategy import carried_lines
        text = {"table": lambda r: to_table(r, [answer(r), batch_line,
                                                *carried_lines(r.carried)],
                                            [f"how far to trust it: {x}" for x in trust]),
                "csv": to_csv, "json": to_json}[fmt](result)
        click.echo(text)
        if out is not None and fmt == "table":
            click.echo(f"# outputs in {out}: plan.csv, plan.json, report.html")


def _accuracy(result, scn, gpus: int) -> list[str]:
    """How far the fastest replayed plan that fits is from validated ground (its
    framework's nearest validated case and error band), as lines."""
    best = next((r for r in result.rows if r.metrics is not None and not r.metrics.oom), None)
    if best is None:
        return []
    from ..models import load_model, params_total
    from ..validation.envelope import Query, envelope
    model = load_model(scn.model)
    return envelope(Query.of(str(best.strategy.get("name")), model.name,
                             float(params_total(model)), result.gpu, gpus,
                             scn.training.precision, model.is_moe,
                             scn.training.finetune, model.family)).lines()
