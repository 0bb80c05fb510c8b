"""Files of a run: summary.json, CSV tables, a Perfetto timeline and PNG plots.

The output folder is prepared by :func:`simulator.outpaths.prepare_out_dir`: a folder that
exists, is not empty and was not written by clustersim is refused, so nothing a user wrote
is overwritten. Each file is written whole and renamed into place, replacing a symbolic
link rather than writing through it (:func:`simulator.outpaths.atomic_writer`).
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
import pandas as pd  # noqa: E402

from ..engine.records import COMM_KINDS, Timeline  # noqa: E402
from ..outpaths import (atomic_write_csv, atomic_write_text, prepare_out_dir,  # noqa: E402
                        save_figure)
from .summary import GIB, Metrics  # noqa: E402
from .tables import layer_breakdown, link_utilization  # noqa: E402

def ops_table(tl: Timeline) -> pd.DataFrame:
    """Every replayed op with its times (seconds)."""
    return pd.DataFrame([{**{k: getattr(r, k) for k in (
        "cls", "op_id", "name", "stream", "kind", "layer", "phase", "ready_s", "start_s",
        "end_s", "size_bytes", "algorithm", "protocol")}, "wait_s": r.wait_s}
        for r in tl.records])


def chrome_trace(tl: Timeline, class_ranks: dict[str, tuple[int, ...]],
                 expand_up_to: int = 64) -> dict:
    """Chrome trace / Perfetto JSON: a process per rank (a thread per stream), memory and
    link-type utilisation as counters.

    Ranks of one class run identical timelines; when the world has more than
    ``expand_up_to`` ranks, each class is one process labelled with its rank range instead
    of a copy per rank.
    """
    classes = sorted({r.cls for r in tl.records} | set(tl.memory))
    world = sum(len(class_ranks.get(c, ())) for c in classes)
    expand = 0 < world <= expand_up_to
    procs: dict[str, list[tuple[int, str]]] = {}
    pid = 0
    for cls in classes:
        ranks = class_ranks.get(cls, ())
        if expand and ranks:
            procs[cls] = [(pid + i + 1, f"rank {r} ({cls})") for i, r in enumerate(ranks)]
        else:
            label = f"{cls}: ranks {_ranks(ranks)}" if ranks else cls
            procs[cls] = [(pid + 1, label)]
        pid += len(procs[cls])
    events = [{"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": n}}
              for plist in procs.values() for p, n in plist]
    tids: dict[tuple[str, str], int] = {}
    for r in tl.records:
        tid = tids.setdefault((r.cls, r.stream), len(tids) + 1)
        args = {"layer": r.layer, "phase": r.phase, "wait_us": r.wait_s * 1e6}
        if r.kind in COMM_KINDS:
            args.update(size_bytes=r.size_bytes, algorithm=r.algorithm, protocol=r.protocol)
        for p, _ in procs[r.cls]:
            events.append({"ph": "X", "name": r.name, "cat": r.kind, "pid": p, "tid": tid,
                           "ts": r.start_s * 1e6, "dur": (r.end_s - r.start_s) * 1e6,
                           "args": args})
    for (cls, stream), tid in tids.items():
        for p, _ in procs[cls]:
            events.append({"ph": "M", "name": "thread_name", "pid": p, "tid": tid,
                           "args": {"name": stream}})
    for cls, series in tl.memory.items():
        for p, _ in procs.get(cls, [(1, cls)]):
            for t, b in series:
                events.append({"ph": "C", "name": "memory (GiB)", "pid": p, "ts": t * 1e6,
                               "args": {"GiB": b / GIB}})
    net_pid = pid + 1
    events.append({"ph": "M", "name": "process_name", "pid": net_pid, "tid": 0,
                   "args": {"name": "fabric: link utilisation by type"}})
    for t, fractions in tl.machine.link_samples:
        events.append({"ph": "C", "name": "link utilisation", "pid": net_pid, "ts": t * 1e6,
                       "args": {g: float(f) for g, f in zip(tl.machine.link_groups, fractions)}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _ranks(ranks: tuple[int, ...]) -> str:
    if len(ranks) > 1 and list(ranks) == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks[:8])) + ("..." if len(ranks) > 8 else "")


def write_outputs(out: Path | str, tl: Timeline, metrics: Metrics, cluster,
                  scenario: dict, class_ranks: dict[str, tuple[int, ...]],
                  accuracy: dict | None = None, energy: dict | None = None,
                  timeline_format: str = "perfetto", cost: dict | None = None) -> list[Path]:
    """Write every output file into ``out`` (see module docstring); return their paths.
    ``accuracy``: the envelope (:mod:`simulator.validation.envelope`) summary.json carries;
    ``energy``: the step's energy and power (:mod:`simulator.energy`), likewise;
    ``cost``: the ``price``, ``cost`` (and ``cost_note``) keys ``run --format json`` gives,
    added to summary.json as they are;
    ``timeline_format``: ``perfetto`` writes ``timeline.json`` (Chrome trace), ``kineto``
    a PyTorch profiler trace per rank in ``kineto/`` (:mod:`.kineto_export`)."""
    out = prepare_out_dir(out)
    summary = {"metrics": metrics.as_dict(), "scenario": scenario}
    if accuracy is not None:
        summary["accuracy"] = accuracy
    if energy is not None:
        summary["energy"] = energy
    summary.update(cost or {})
    files = {
        "summary.json": lambda p: atomic_write_text(p, json.dumps(summary, indent=2,
                                                                  default=str)),
        "metrics.csv": lambda p: atomic_write_csv(pd.DataFrame([_flat(metrics)]), p,
                                                  index=False),
        "layers.csv": lambda p: atomic_write_csv(layer_breakdown(tl), p, index=False),
        "ops.csv": lambda p: atomic_write_csv(ops_table(tl), p, index=False),
        "links.csv": lambda p: atomic_write_csv(link_utilization(tl, cluster), p,
                                                index=False),
        "breakdown.png": lambda p: plot_breakdown(metrics, p),
        "memory.png": lambda p: plot_memory(tl, p),
        "gantt.png": lambda p: plot_gantt(tl, p),
    }
    written = []
    for name, write in files.items():
        write(out / name)
        written.append(out / name)
    if timeline_format == "kineto":
        from .kineto_export import write_kineto
        graph = cluster.G.graph
        written += write_kineto(out / "kineto", tl, class_ranks, str(graph.get("gpu")),
                                int(graph.get("gpus_per_node") or 8),
                                precision=str(scenario.get("training", {}).get("precision",
                                                                                "bf16")))
    else:
        atomic_write_text(out / "timeline.json", json.dumps(chrome_trace(tl, class_ranks)))
        written.append(out / "timeline.json")
    return written


def _flat(metrics: Metrics) -> dict:
    d = metrics.as_dict()
    d.pop("peak_memory_gib_per_class")
    d["oom_at"] = "; ".join(f"{k}: {v}" for k, v in d["oom_at"].items())
    return d


def plot_breakdown(m: Metrics, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 2.2))
    left = 0.0
    for label, v, color in (("compute", m.compute_s, "tab:blue"),
                            ("exposed comm", m.exposed_comm_s, "tab:red"),
                            ("wait", m.wait_s, "tab:gray")):
        ax.barh([0], [v * 1e3], left=[left * 1e3], color=color, label=f"{label} {v*1e3:.1f} ms")
        left += v
    ax.set_yticks([])
    ax.set_xlabel("iteration time (ms)")
    ax.set_title(f"iteration {m.iteration_time_s*1e3:.1f} ms, comm total {m.comm_s*1e3:.1f} ms"
                 f" (hidden {max(m.comm_s - m.exposed_comm_s, 0)*1e3:.1f} ms)", fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3)
    save_figure(fig, path, dpi=100, bbox_inches="tight")
    plt.close(fig)


NO_MEMORY = ("No memory allocations in this trace, so no memory to plot: the importers read "
             "kernels, copies and collectives,\nnot memory events, so a replayed profile "
             "carries none (peak_memory_gib is 0)")


def plot_memory(tl: Timeline, path: Path) -> None:
    """Allocated memory per rank class over the iteration; a trace that allocates nothing
    (an imported profile) gets a plot that says so, not empty axes."""
    fig = memory_figure(tl)
    save_figure(fig, path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def memory_figure(tl: Timeline):
    """The figure of :func:`plot_memory`."""
    fig, ax = plt.subplots(figsize=(7, 3))
    if not any(b for series in tl.memory.values() for _, b in series):
        ax.text(0.5, 0.5, NO_MEMORY, ha="center", va="center", fontsize=8,
                transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    for cls, series in sorted(tl.memory.items()):
        t = [p[0] * 1e3 for p in series] + [tl.iteration_time_s * 1e3]
        b = [p[1] / GIB for p in series] + [series[-1][1] / GIB]
        ax.step(t, b, where="post", label=cls)
    if tl.capacity_bytes:
        ax.axhline(tl.capacity_bytes / GIB, color="red", ls="--", label="GPU memory")
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("allocated (GiB)")
    ax.legend(fontsize=8)
    return fig


# every colour of gantt.png, and what it stands for (its legend says each)
GANTT_COLORS = {"forward": "tab:blue", "backward": "tab:orange", "recompute": "tab:purple",
                "optimizer": "tab:green"}
GANTT_LEGEND = (("forward", "tab:blue"), ("backward", "tab:orange"),
                ("recompute (checkpointing)", "tab:purple"), ("optimizer step", "tab:green"),
                ("communication", "tab:red"), ("other (copies, casts, host)", "tab:gray"))


def plot_gantt(tl: Timeline, path: Path) -> None:
    cls = max({r.cls for r in tl.records} or {""},
              key=lambda c: max((r.end_s for r in tl.records if r.cls == c), default=0))
    recs = [r for r in tl.records if r.cls == cls]
    streams = sorted({r.stream for r in recs}, key=lambda s: (s != "compute", s))
    colors = GANTT_COLORS
    fig, ax = plt.subplots(figsize=(10, 0.6 + 0.5 * len(streams)))
    for y, stream in enumerate(streams):
        by_color: dict[str, list[tuple[float, float]]] = {}
        for r in recs:
            if r.stream == stream:
                c = "tab:red" if r.kind in COMM_KINDS else colors.get(r.phase, "tab:gray")
                by_color.setdefault(c, []).append((r.start_s * 1e3, (r.end_s - r.start_s) * 1e3))
        for c, bars in by_color.items():     # one collection per colour: fast for 10^4 ops
            ax.broken_barh(bars, (y - 0.4, 0.8), color=c)
    ax.set_yticks(range(len(streams)), streams)
    ax.set_xlabel("time (ms)")
    ax.set_title(f"rank class {cls}: what each stream runs", fontsize=9)
    ax.legend(handles=[Patch(color=c, label=label) for label, c in GANTT_LEGEND],
              fontsize=7, ncol=len(GANTT_LEGEND), loc="upper center",
              bbox_to_anchor=(0.5, -0.25 if len(streams) > 2 else -0.45), frameon=False)
    save_figure(fig, path, dpi=100, bbox_inches="tight")
    plt.close(fig)
