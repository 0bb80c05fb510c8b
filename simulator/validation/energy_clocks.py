"""The power runs' intervals read with every node's power log on the run's clock
(``validation/energy/mlperf_power_phases_aligned.csv`` and ``mlperf_power_clocks.csv``,
written by ``extract_clocks.py``; reported, not gated, nothing fitted).

Each node's power log runs 0-18 s behind the run's MLLOG clock, by the same seconds a node
in every run, so the intervals of ``mlperf_power_phases.csv`` (read on the nodes' own
clocks) mix training and evaluation power. Read on the run's clock, the training blocks
after the first draw about 8 kW a node and the evaluations after the first about 6 kW.
What the evaluation draws says where its missing seconds go: were each evaluation's extra
seconds (measured less simulated) spent with every GPU idle (the host or the loader setting
the pace), the node would draw

    (simulated evaluation's node W x its seconds + extra seconds x idle node W)
    / measured evaluation seconds,

and were they GPU work at the simulated evaluation's power, that power. The idle node is
every GPU at power.yaml's idle, with the host and NICs the step's energy counts, through the
supplies.
"""

from __future__ import annotations

from statistics import median


def mean_w(rows: list[dict]) -> float:
    """The readings-weighted mean node power of interval rows."""
    n = sum(int(r["readings"]) for r in rows)
    return sum(int(r["readings"]) * float(r["mean_node_w"]) for r in rows) / n


def idle_node_w(parts: dict, gpus: float, gpu_idle_w: float) -> float:
    """AC power of a server with every GPU idle: (GPUs x idle + host + NICs) / supplies
    (``parts``: :func:`simulator.validation.energy.node_parts`)."""
    return (gpus * gpu_idle_w + parts["host_w"] + parts["nics_w"]) / parts["psu"]


def if_host_bound_w(eval_node_w: float, eval_s: float, measured_s: float,
                    idle_w: float) -> float:
    """Node power of an evaluation of ``measured_s`` that is the simulated one
    (``eval_s`` at ``eval_node_w``) and the rest with every GPU idle (``idle_w``)."""
    return (eval_node_w * eval_s + (measured_s - eval_s) * idle_w) / measured_s


def clock_rows(aligned: list[dict], clocks: list[dict], train_node_w: float,
               eval_node_w: float, eval_s: float, idle_w: float) -> list[dict]:
    """Per run: its nodes' clock offsets, its training blocks after the first and its
    evaluations after the first (the last included: on the run's clock it reads as the
    others) on the run's clock, against the simulated training and evaluation node power,
    and the evaluation's power if its extra seconds were idle (:func:`if_host_bound_w`)."""
    out = []
    for run in sorted({r["run"] for r in aligned}):
        mine = [r for r in aligned if r["run"] == run]
        train = [r for r in mine if r["interval"] == "train" and r["index"] != "0"]
        evals = [r for r in mine if r["interval"] == "eval" and r["index"] != "0"]
        later_s = median(float(r["stop_s"]) - float(r["start_s"]) for r in evals)
        offsets = [float(r["offset_s"]) for r in clocks if r["run"] == run]
        train_w, evals_w = mean_w(train), mean_w(evals)
        bound_w = if_host_bound_w(eval_node_w, eval_s, later_s, idle_w)
        out.append({"run": run, "offsets": (min(offsets), max(offsets)),
                    "train_w": train_w, "train_error": train_node_w / train_w - 1,
                    "eval_w": evals_w, "eval_error": eval_node_w / evals_w - 1,
                    "eval_s": later_s, "host_bound_w": bound_w,
                    "host_bound_error": bound_w / evals_w - 1})
    return out


def gap_rows(results: list[dict], clocks: list[dict], step_s: float, node_w: float,
             eval_s: float, eval_node_w: float, idle_w: float, nodes: int) -> list[dict]:
    """Per run, how much of its energy gap the evaluations' missing seconds hold (measured
    seconds as inputs, nothing fitted): its simulated whole run (``results``' row) with
    each evaluation at its measured median (``clocks``' row: the simulated evaluation and
    the extra seconds with every GPU idle), then also the first evaluation's start-up at
    idle (the first block's seconds past its steps and the first evaluation's past the
    median), each as a node energy (kWh, ``nodes`` servers) and its error."""
    out = []
    for r, c in zip(results, clocks):
        assert r["run"] == c["run"]
        joules = (r["steps"] * step_s * node_w + r["evaluations"] * (
            eval_s * eval_node_w + (c["eval_s"] - eval_s) * idle_w)) * nodes
        start_s = r["block0_extra_s"] + r["first_eval_s"] - c["eval_s"]
        with_start = joules + start_s * idle_w * nodes
        out.append({"run": r["run"], "measured_kwh": r["measured_kwh"],
                    "kwh": r["simulated_kwh"], "error": r["energy_error"],
                    "paced_kwh": joules / 3.6e6,
                    "paced_error": joules / 3.6e6 / r["measured_kwh"] - 1,
                    "start_s": start_s, "started_kwh": with_start / 3.6e6,
                    "started_error": with_start / 3.6e6 / r["measured_kwh"] - 1})
    return out


def gap_lines(rows: list[dict]) -> list[str]:
    """The report's table of :func:`gap_rows` (none without rows)."""
    if not rows:
        return []
    lines = ["", "What the evaluations' seconds hold of the energy gap (measured seconds as "
             "inputs, nothing fitted): the simulated run with each evaluation at its measured "
             "median (the extra seconds with every GPU idle), then also the first "
             "evaluation's start-up at idle (`start s`: the first block's seconds past its "
             "steps and the first evaluation's past the median).", ""]
    return lines + table(
        ["run", "kWh measured", "simulated", "error", "evaluations at measured", "error",
         "start s", "and the start-up", "error"],
        [[r["run"], f"{r['measured_kwh']:.3f}", f"{r['kwh']:.3f}", f"{r['error']:+.1%}",
          f"{r['paced_kwh']:.3f}", f"{r['paced_error']:+.1%}", f"{r['start_s']:.1f}",
          f"{r['started_kwh']:.3f}", f"{r['started_error']:+.1%}"] for r in rows])


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table's lines."""
    return ["| " + " | ".join(cells) + " |"
            for cells in (header, ["---"] * len(header), *rows)]


def report_lines(rows: list[dict], train_node_w: float, eval_node_w: float,
                 idle_w: float) -> list[str]:
    """The report's section (none without rows)."""
    if not rows:
        return []
    lines = ["", "## The node power logs' clocks", "",
             "Each node's power log runs behind the run's MLLOG clock by the same seconds in "
             "every run (`mlperf_power_clocks.csv`: the node's last reading above 4.5 kW less "
             "run_stop; `extract_clocks.py`). On the run's clock "
             "(`mlperf_power_phases_aligned.csv`), the training blocks after the first and "
             "the evaluations after the first (the last included) against the simulated "
             f"training node ({train_node_w:,.0f} W) and evaluation node "
             f"({eval_node_w:,.0f} W); `if idle`: the evaluation's node power were its extra "
             "seconds (measured median less simulated) spent with every GPU idle (node "
             f"{idle_w:,.0f} W). Reported, not gated, nothing fitted.", ""]
    return lines + table(
        ["run", "node clocks s", "training W measured", "error", "evaluation W measured",
         "error", "evaluation s", "if idle W", "error"],
        [[r["run"], f"{r['offsets'][0]:+.1f} to {r['offsets'][1]:+.1f}",
          f"{r['train_w']:,.0f}", f"{r['train_error']:+.1%}", f"{r['eval_w']:,.0f}",
          f"{r['eval_error']:+.1%}", f"{r['eval_s']:.2f}", f"{r['host_bound_w']:,.0f}",
          f"{r['host_bound_error']:+.1%}"] for r in rows])
