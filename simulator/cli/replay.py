"""`clustersim import` and `clustersim replay`: real profiler traces in, a replayed iteration
out (docs/importers.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..choices import FIDELITIES
from ..errors import ConfigError
from ..inputs import limit_set
from ..outpaths import atomic_write_csv, prepare_out_dir, writable_file
from .common import DEFAULT_TOPOLOGY, metric_rows


def _summary(trace) -> str:
    ops = [op for c in trace.classes for op in c.ops]
    n_coll = sum(op.kind == "collective" for op in ops)
    meta = trace.meta
    step = (f"; {meta.get('step')}: recorded {1e3 * meta['recorded_step_s']:.3f} ms"
            if "recorded_step_s" in meta else "")
    return (f"{trace.world_size} ranks, {len(trace.classes)} rank class(es)"
            f"{' (one file stands for every rank)' if meta.get('replicated') else ''}, "
            f"{len(ops)} ops, {n_coll} collectives on {len(trace.communicators)} "
            f"communicator(s){step}")


def unknown_metrics(trace) -> dict[str, str]:
    """The metrics ``trace`` cannot give, with why: throughput and MFU without the samples
    and model FLOPs of a step (a profile's: ``import --model``), memory without allocations
    (a profile records none)."""
    out = {}
    meta = trace.meta
    if not meta.get("global_batch"):
        out.update({k: "the trace has no batch size: import --model --global-batch"
                    for k in ("samples_per_s", "tokens_per_s", "tokens_per_s_per_gpu")})
    elif not meta.get("tokens_per_sample"):
        out.update({k: "not a token model" for k in ("tokens_per_s", "tokens_per_s_per_gpu")})
    if not meta.get("model_flops_per_iteration"):
        out.update({k: "the trace has no model FLOPs: import --model"
                    for k in ("tflops_per_gpu", "mfu")})
    if not any(c.static_memory_bytes or any(op.mem_alloc_bytes for op in c.ops)
               for c in trace.classes):
        out["peak_memory_gib"] = "the trace records no memory"
    return out


def register(cli: click.Group) -> None:
    """Add ``import`` and ``replay`` to the ``clustersim`` group."""

    @cli.command("import")
    @click.argument("kind", type=click.Choice(["pytorch", "tensorflow", "chakra"]))
    @click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
                  required=True, help="Trace file to write (.json or .json.gz).")
    @click.option("--step", type=click.IntRange(min=0), default=None, metavar="N",
                  help="Iteration to import: ProfilerStep#N (PyTorch) or step_num N "
                       "(TensorFlow) [default: a steady-state one].")
    @click.option("--collective-bytes", "sizes", multiple=True, metavar="NAME=SIZE",
                  help="Size of collectives the profile has no size for, by op name or "
                       "collective, e.g. CollectiveReduceV2=1.5M (repeatable).")
    @click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists.")
    @click.option("--max-events", type=click.IntRange(min=1), default=None, metavar="N",
                  help="Refuse a file with more events than N [default: 1,000,000, or "
                       "$CLUSTERSIM_MAX_TRACE_EVENTS].")
    @click.option("--model", default=None, metavar="NAME|FILE",
                  help="The model the profile ran (catalog name or model YAML), with "
                       "--global-batch (and --seq-len for a transformer): a replay then "
                       "reports throughput and MFU.")
    @click.option("--global-batch", type=int, default=None, metavar="N",
                  help="Samples per step across the whole job (with --model).")
    @click.option("--seq-len", type=click.IntRange(min=1), default=None, metavar="L",
                  help="Tokens per sample of a transformer (with --model).")
    def import_cmd(kind, files, output, step, sizes, overwrite, max_events, model,
                   global_batch, seq_len):
        """Import profiler traces of KIND (pytorch, tensorflow or chakra) into a clustersim
        Trace.

        FILES: one per rank (PyTorch Kineto JSON, plain or .gz) or per worker in task order
        (TensorFlow *.xplane.pb or TensorBoard *.trace.json.gz). A single file of a
        multi-rank job stands for every rank. Chakra: ASTRA-sim's PREFIX.<rank>.et, one per
        rank (`clustersim trace --format chakra` writes them).
        """
        writable_file(output, overwrite)      # before the import, which takes a while
        if (model is None) != (global_batch is None) or (seq_len and model is None):
            raise ConfigError("give --model and --global-batch together (and --seq-len "
                              "only with them)", field="--model")
        from ..importers import import_trace
        from ..importers.assemble import with_model
        from ..importers.comms import parse_collective_bytes
        from ..trace.io import write_trace
        if model is not None:                 # a bad model is refused before the import
            from ..models import load_model
            load_model(model)
        with limit_set("trace_events", max_events):
            trace = import_trace(kind, files, step, parse_collective_bytes(sizes))
        if model is not None:
            trace = with_model(trace, model, global_batch, seq_len)
        write_trace(trace, output, overwrite=overwrite)
        click.echo(f"wrote {output}: {_summary(trace)}")

    @cli.command("replay")
    @click.argument("trace_file", type=click.Path(dir_okay=False, path_type=Path),
                    metavar="TRACE")
    @click.option("--topology", default=DEFAULT_TOPOLOGY, show_default=True, metavar="FILE|NAME",
                  help="Topology YAML file or shipped topology name.")
    @click.option("--nodes", type=click.IntRange(min=1), default=None, metavar="N",
                  help="Number of servers (multi-node topologies only).")
    @click.option("--fidelity", type=click.Choice(tuple(FIDELITIES)), default="flow",
                  show_default=True, help="Network model.")
    @click.option("--nccl", "nccl_choice", type=click.Choice(["recorded", "auto"]),
                  default="recorded", show_default=True,
                  help="NCCL algorithm/protocol: as the recorded kernels ran, or the "
                       "simulator's tuner.")
    @click.option("--out", type=click.Path(path_type=Path), default=None,
                  help="Write summary.json, CSVs (collectives.csv: recorded vs simulated), a "
                       "Perfetto timeline and PNG plots here.")
    @click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
                  show_default=True)
    def replay_cmd(trace_file, topology, nodes, fidelity, nccl_choice, out, fmt):
        """Replay an imported (or generated) TRACE on a topology: iteration time, where it
        goes, and each collective's simulated vs recorded time."""
        from ..trace.io import read_trace

        trace = read_trace(trace_file)
        if out is not None:
            prepare_out_dir(out)             # refused before the replay, not after
        from ..trace_replay import collective_table, replay_trace   # once the input is good
        try:
            result = replay_trace(trace, topology, nodes, fidelity, nccl_choice)
        except ConfigError as exc:
            # a field of the trace that only the cluster can check (a host copy's server,
            # what the GPU runs of its meta.run)
            if (exc.field or "").startswith(("classes[", "meta.")):
                raise exc.located(str(trace_file)) from None
            raise
        m, recorded = result.metrics, trace.meta.get("recorded_iteration_s")
        table = collective_table(result)
        unknown = unknown_metrics(trace)
        if out is not None:
            settings = {"trace": str(trace_file), "topology": str(result.topology),
                        "nodes": nodes, "fidelity": fidelity, "nccl": nccl_choice}
            from ..metrics.outputs import write_outputs     # matplotlib: only for --out
            write_outputs(out, result.timeline, m, result.cluster, settings,
                          {c.id: c.ranks for c in trace.classes})
            atomic_write_csv(table, Path(out) / "collectives.csv", index=False)
        if fmt == "json":
            click.echo(json.dumps({**m.as_dict(), **{k: None for k in unknown},
                                   "recorded_iteration_s": recorded,
                                   "collectives": table.to_dict("records")}, indent=2,
                                  default=str))
            return
        click.echo(f"# {trace_file}: {_summary(trace)}")
        click.echo(f"# on {result.topology.stem}, fidelity {fidelity}, NCCL choice "
                   f"{nccl_choice}")
        rows = [(k, f"n/a ({unknown[k]})" if k in unknown else v) for k, v in metric_rows(m)]
        if recorded:
            err = (m.iteration_time_s - recorded) / recorded
            rows.insert(1, ("recorded_iteration_s", f"{recorded:.4f} s (simulated "
                                                    f"{100 * err:+.1f} %)"))
        if len(table):
            err = table["error"].abs().median()
            rows.append(("collectives", f"{len(table)}, median |simulated - recorded| "
                                        f"{100 * err:.1f} %"))
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            click.echo(f"{key:<{width}}  {value}")
        if out is not None:
            click.echo(f"# outputs in {out} (timeline.json opens in https://ui.perfetto.dev)")
