"""An evaluation's seconds split into a per-batch pace and a per-evaluation start, read off
runs of one setup a rank on different node counts (``setup.yaml`` ``evaluation_pace``,
``validation/energy/mlperf_v41_intervals.csv``; reported, not gated, nothing fitted).

The MLPerf v4.1 Llama 2 70B LoRA evaluation runs its 173 samples in ceil(173 / global
batch) batches. Runs that give every rank the same work (TP4 x CP2, one sample a rank, the
same code) but hold 8 to 128 nodes evaluate in 22, 11, 3 or 2 batches: the median
evaluation of each such system against its batch count is, per submitter's hosts, close to
a line, seconds = start + batches x pace. The slope is what one more batch costs a rank
(its GPU work, and any host work that comes with each batch), the intercept what an
evaluation costs once (the loader's first batch, the start and end of the validation loop).
Set against the simulated evaluation pass's own split (its fed batch, and the rest), it
says which of the two the simulation misses. A least-squares line through a submitter's
systems describes the measurements; no constant of the simulator is taken from it.
"""

from __future__ import annotations

import math

from simulator.errors import ConfigError


def line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through ``points`` (x, y); two or more
    distinct x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope


def later_evaluations(rows: list[dict], system: str) -> list[float]:
    """Seconds of every evaluation of ``system``'s runs but each run's first (the first
    starts the validation loader's worker: not the steady pace)."""
    out = []
    for run in sorted({r["run"] for r in rows if r["system"] == system}):
        evals = [float(r["stop_s"]) - float(r["start_s"]) for r in rows
                 if r["system"] == system and r["run"] == run and r["interval"] == "eval"]
        out += evals[1:]
    return out


def median(values: list[float]) -> float:
    v = sorted(values)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2


def pace_rows(groups: dict[str, list[str]], intervals: list[dict],
              global_batch: dict[str, int], samples: int, ev) -> list[dict]:
    """Per group of systems (``groups``: name -> systems), each system's batches and median
    later evaluation, the line through them, and the simulated pass ``ev``'s split: its fed
    batch (the step or its loader, the slower) and the rest of an evaluation."""
    fed = max(ev.batch_s, ev.loader_s)
    out = []
    for name, systems in groups.items():
        points = []
        for system in systems:
            later = later_evaluations(intervals, system)
            points.append((math.ceil(samples / global_batch[system]), median(later)))
        start, pace = line(points)
        out.append({"group": name, "systems": systems, "points": points,
                    "pace_s": pace, "start_s": start, "simulated_pace_s": fed,
                    "simulated_start_s": ev.time_s - ev.batches * fed})
    return out


def check_groups(groups: dict[str, list[str]], intervals: list[dict],
                 global_batch: dict[str, int], source: str) -> None:
    """Every system of ``groups`` has a global batch and later evaluations, and each group
    two batch counts or more (a line needs them); refused naming the group otherwise."""
    for name, systems in groups.items():
        for system in systems:
            if system not in global_batch or not later_evaluations(intervals, system):
                raise ConfigError(f"system {system!r} needs a global batch in the steps file "
                                  f"and an evaluation after its runs' first in the "
                                  f"intervals file", source=source,
                                  field=f"evaluation_pace.{name}")
        if len({global_batch[s] for s in systems}) < 2:
            raise ConfigError("a line needs systems of two global batches or more",
                              source=source, field=f"evaluation_pace.{name}")


def report_lines(rows: list[dict]) -> list[str]:
    """The report's section (none without groups)."""
    if not rows:
        return []
    lines = ["", "## The evaluation's pace: per batch and per evaluation", "",
             "Runs of the same setup a rank (TP4 x CP2, one sample a rank) on more nodes "
             "evaluate the 173 samples in fewer batches (`evaluation_pace` in setup.yaml; "
             "`mlperf_v41_intervals.csv`): per submitter, the least-squares line through "
             "each system's median later evaluation, seconds = start + batches x pace, "
             "against the simulated pass's split (its batch fed by its loader; the rest of "
             "an evaluation: the loader's first batch). Reported, not gated, nothing "
             "fitted.", "",
             "| hosts | systems (batches: median s) | pace s a batch measured | simulated | "
             "start s an evaluation measured | simulated |", "|" + "---|" * 6]
    for r in rows:
        pts = ", ".join(f"{s} ({b}: {y:.2f})" for s, (b, y) in zip(r["systems"], r["points"]))
        lines.append(f"| {r['group']} | {pts} | {r['pace_s']:.3f} | "
                     f"{r['simulated_pace_s']:.3f} | {r['start_s']:.2f} | "
                     f"{r['simulated_start_s']:.2f} |")
    return lines
