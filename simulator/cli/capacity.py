"""`clustersim capacity`: the largest model of a family that fits per strategy."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from ..choices import DEFAULT_CAPACITY_STRATEGIES, DEFAULT_SCENARIO, FAMILIES
from ..progress import quiet_option
from .common import names_sets

if TYPE_CHECKING:           # the simulator loads only when the command runs
    from ..capacity.probe import Probe
    from ..capacity.report import CapacityReport

_SET_HELP = ("Override a scenario key, e.g. --set training.seq_len=2048, or a key of its "
             "topology file, e.g. --set topology.params.gpu=H100-SXM (repeatable).")


def _b(params: int) -> str:
    return f"{params / 1e9:.2f}B"


def _fit_cells(p: Probe | None, top: bool) -> list[str]:
    if p is None:
        return ["(none fits)", "", "", "", ""]
    return [p.rung.model.name + (" (top)" if top else ""), _b(p.rung.params),
            f"{p.peak_gib:.1f}", f"{p.iteration_time_s:.3f}",
            f"{p.tokens_per_s_per_gpu:,.0f}"]


def _oom_cells(p: Probe | None) -> list[str]:
    if p is None:
        return ["(ladder top fits)", "", "", ""]
    if _on_host(p):
        return [p.rung.model.name, _b(p.rung.params), p.oom_at, "-"]
    peak = f"{p.peak_gib:.1f}" + ("*" if not p.replayed else "")
    return [p.rung.model.name, _b(p.rung.params), p.oom_at or "?", peak]


def _on_host(p: Probe | None) -> bool:
    """Rejected because cpu_offload's state does not fit the servers' host memory."""
    return p is not None and not p.replayed and (p.oom_at or "").startswith("host memory")


def accuracy_of(rep: CapacityReport) -> dict:
    """The accuracy envelope of each strategy's largest fit (its step time and tokens/s;
    :mod:`simulator.validation.envelope`), by strategy label."""
    from ..validation.envelope import Query, envelope
    c, prec = rep.cluster, rep.settings["precision"]
    return {r.spec.label: envelope(Query.of(r.spec.name, r.largest.rung.model.name,
                                            float(r.largest.rung.params), str(c["gpu"]),
                                            int(c["gpus"]), prec,
                                            r.largest.rung.model.is_moe,
                                            rep.settings.get("finetune"),
                                            r.largest.rung.model.family))
            for r in rep.results if r.largest is not None}


def _finetune(section: dict) -> str:
    """``training.finetune`` in a few words (docs/finetuning.md)."""
    return ", ".join(f"{k} {v}" for k, v in section.items())


def answer_lines(rep: CapacityReport) -> list[str]:
    """The answer in words, largest first: ``# the largest llama-family model that fits on
    64 x H100-SXM: 208B parameters with megatron:tp8pp8 (llama-like-208b, ...)``."""
    c = rep.cluster
    found = sorted((r for r in rep.results if r.largest is not None),
                   key=lambda r: -r.largest.rung.params)
    if not found:
        return [f"# no {rep.family}-family model of the ladder fits on {c['gpus']} x "
                f"{c['gpu']} with any strategy tried"]
    lines = []
    for i, r in enumerate(found):
        rung = r.largest.rung
        what = ("a catalog model" if rung.kind == "catalog" else
                f"a {rep.family}-shaped model generated for this ladder")
        top = "; the top of the ladder fits, so larger may too" if r.first_oom is None else ""
        head = (f"# the largest {rep.family}-family model that fits on {c['gpus']} x "
                f"{c['gpu']}: {_b(rung.params)} parameters with {r.spec.label}" if i == 0 else
                f"# with {r.spec.label}: {_b(rung.params)}")
        lines.append(f"{head} ({rung.model.name}, {what}{top})")
    return lines


def render_table(rep: CapacityReport, accuracy: list[str] | None = None) -> str:
    s, c = rep.settings, rep.cluster
    lines = [
        f"# capacity of {c['gpus']} x {c['gpu']} ({c['topology']}, "
        f"{c['gpu_memory_gib']:.0f} GiB each), scenario {rep.scenario}",
        f"# training: micro_batch {s['micro_batch']}, seq_len {s['seq_len']}, grad_accum "
        f"{s['grad_accum']}, {s['precision']}, flash attention "
        f"{'on' if s['flash_attention'] else 'off'}, activation checkpointing "
        f"{_ac(s['activation_checkpointing'])}"
        + (f", fine-tuning {_finetune(s['finetune'])}" if s.get("finetune") else ""),
        f"# ladder: {rep.family}, {len(rep.ladder)} models from {rep.ladder[0].model.name} "
        f"({_b(rep.ladder[0].params)}) to {rep.ladder[-1].model.name} "
        f"({_b(rep.ladder[-1].params)}), ~15% apart; one iteration replayed per probe",
        *answer_lines(rep),
    ]
    head = ["strategy", "largest fit", "params", "peak GiB", "iter s", "tok/s/GPU",
            "first no-fit", "params", "OOM at", "peak GiB"]
    rows = [[r.spec.label, *_fit_cells(r.largest, r.first_oom is None),
             *_oom_cells(r.first_oom)] for r in rep.results]
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    right = {2, 3, 4, 5, 7, 9}

    def fmt(cells):
        return "  ".join(x.rjust(w) if i in right else x.ljust(w)
                         for i, (x, w) in enumerate(zip(cells, widths))).rstrip()

    lines += [fmt(head), fmt(["-" * w for w in widths]), *map(fmt, rows)]
    if any(r.first_oom is not None and not r.first_oom.replayed and not _on_host(r.first_oom)
           for r in rep.results):
        lines.append("# * rejected without replay: static memory (weights, gradients, "
                     "optimizer state) alone exceeds the GPU; its peak is the static size")
    lines += [f"# note: {n}" for n in rep.notes]
    lines += [f"# accuracy of the largest fit {line}" for line in accuracy or ()]
    if rep.claim:
        lines.append(rep.claim["verdict"])
    return "\n".join(lines)


def register(cli: click.Group) -> None:
    """Add ``capacity`` to the ``clustersim`` group."""

    @cli.command("capacity")
    @click.argument("scenario", default=DEFAULT_SCENARIO, metavar="[SCENARIO]")
    @click.option("--family", type=click.Choice(tuple(FAMILIES), case_sensitive=False),
                  default=None, help="Model family whose size ladder is searched "
                  "[default: the scenario model's family, else llama].")
    @click.option("--strategies", default=",".join(DEFAULT_CAPACITY_STRATEGIES), show_default=True,
                  metavar="LIST", help="Comma-separated strategies as compare names them: "
                  "ddp, fsdp[:SHARDING] (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, "
                  "_HYBRID_SHARD_ZERO2), or a 3-D plan such as megatron:tp8pp4 (tensor "
                  "parallel 8, pipeline 4, data parallel over the rest).")
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
    @click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
                  show_default=True)
    @quiet_option
    @names_sets
    def capacity_cmd(scenario, family, strategies, sets, fmt):
        """Largest model of a family that fits per strategy on SCENARIO's cluster.

        Binary-searches a size ladder (catalog models plus generated sizes ~15% apart) with
        the engine's memory verdict for one iteration under SCENARIO's training settings
        [default: quickstart]; the scenario's model is ignored. Also checks the folk claim
        "on 8x A100-80GB, DDP trains about 7B, FSDP about 30B" (docs/capacity.md). Each
        largest fit gets its accuracy envelope (nearest validated case, its error).
        """
        from ..scenario import load_scenario, resolve_scenario

        path = resolve_scenario(scenario)
        scn = load_scenario(path, list(sets))
        from ..capacity.report import capacity      # the simulator: once the input is good
        rep = capacity(scn, family, strategies, source=scn.source)
        acc = accuracy_of(rep)
        if fmt == "json":
            data = rep.as_dict()
            for d, r in zip(data["results"], rep.results):
                d["accuracy"] = acc[r.spec.label].as_dict() if r.spec.label in acc else None
            click.echo(json.dumps(data, indent=2))
        else:
            from ..validation.envelope import grouped_lines
            click.echo(render_table(rep, grouped_lines({k: e.lines()
                                                        for k, e in acc.items()})))


def _ac(setting) -> str:
    """on/off for the old booleans, the selective setting as it is (capacity.search)."""
    return setting if isinstance(setting, str) else ("on" if setting else "off")
