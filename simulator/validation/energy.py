"""MLPerf Training v4.1 power runs against the simulated energy (``validation/energy/``:
``setup.yaml`` declares the scenario, the rows and that nothing is fitted).

The Llama 2 70B LoRA scenario (issue 44's, loaded by name) runs on Dell's 64-GPU power
system with the runs' evaluation pass (``training.evaluation``, :mod:`simulator.
evaluation`); each measured run is simulated as its logged training steps and the
evaluations they hold (node power, energy, time), its steady training apart, and the same
run under a 500 W power cap is reported beside them; the evaluation pass is also set beside
other runs of the same code (``mlperf_v41_intervals.csv``, reported only). Where
the scenario is not shipped in this build, every row reads "pending: needs the LoRA
scenario" (not a failure). ``clustersim validate energy`` writes ``results.csv`` and
``report.md`` beside the setup.
"""

from __future__ import annotations

import collections
import csv
import io
from typing import Literal
from pathlib import Path

import click
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.errors import ConfigError, validation_error
from simulator.inputs import read_text
from simulator.outpaths import atomic_write_text, atomic_writer
from simulator.progress import quiet_option, stage
from simulator.yamlio import read_yaml
from simulator.validation.paths import data_dir

ROOT = data_dir("energy")
POWER, STEPS = "mlperf_power_h100.csv", "mlperf_v41_steps.csv"
PHASES = "mlperf_power_phases.csv"      # each run's training blocks and evaluations
INTERVALS = "mlperf_v41_intervals.csv"  # the same for other systems' runs (no power)
ALIGNED = "mlperf_power_phases_aligned.csv"  # PHASES with each node's log on the run's clock
CLOCKS = "mlperf_power_clocks.csv"      # each node's power-log clock offset per run
GPU = "H100-SXM"                        # the power system's GPUs (power.yaml's entry)
PENDING = "pending: needs the LoRA scenario"
COLUMNS = ["run", "ttt_min", "measured_node_w", "simulated_node_w", "node_power_error",
           "measured_kwh", "simulated_kwh", "energy_error", "capped_kwh", "kwh_as_training",
           "steps", "evaluations", "simulated_s", "time_error", "eval_s", "simulated_eval_s",
           "eval_error", "eval_node_w", "simulated_eval_node_w", "eval_power_error",
           "first_eval_s", "block0_extra_s",
           "train_steps", "train_node_w", "train_power_error", "train_step_s", "train_step_error",
           "train_kwh", "simulated_train_kwh", "train_energy_error", "note"]


class Gates(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    energy_per_run_abs_error: float = Field(gt=0)
    train_power_abs_error: float = Field(gt=0)
    train_step_abs_error: float = Field(gt=0)
    train_energy_abs_error: float = Field(gt=0)


class Setup(BaseModel):
    """``setup.yaml``: the scenario and its overrides, the steps row, the cap, the gates."""

    model_config = ConfigDict(extra="forbid", strict=True)
    calibration: list[str] = Field(max_length=0)          # nothing is fitted on these rows
    scenario: str = Field(min_length=1)
    sets: list[str] = Field(max_length=64)
    steps_row: str = Field(min_length=1)
    power_cap_w: float = Field(gt=0, allow_inf_nan=False)
    gates: Gates
    # per steps system, the sets its evaluation check runs ("power_system": the sets above)
    evaluation_checks: dict[str, Literal["power_system"] | list[str]] = Field(
        default_factory=dict, max_length=64)
    # per hosts, steps systems of one setup a rank on different node counts (energy_pace.py)
    evaluation_pace: dict[str, list[str]] = Field(default_factory=dict, max_length=16)


# the columns each file must have (what compare and steady_training read)
POWER_COLUMNS = ("run", "run_status", "ttt_min", "avg_node_power_W", "node_energy_kWh",
                 "nodes_measured")
STEPS_COLUMNS = ("system", "median_step_time_s")


def _read_csv(path: Path) -> csv.DictReader:
    """The CSV ``path`` read through the input boundary (a regular file, size limit, UTF-8)."""
    return csv.DictReader(io.StringIO(read_text(path, "validation CSV"), newline=""))


def _rows(path: Path, columns: tuple[str, ...]) -> list[dict]:
    """The rows of the CSV ``path`` (through the input boundary) once its header has
    ``columns``; every cell of them present."""
    reader = _read_csv(path)
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        raise ConfigError(f"no column {missing[0]!r}", source=str(path))
    rows = list(reader)
    for n, row in enumerate(rows, 2):
        if any(row.get(c) is None for c in columns):
            raise ConfigError(f"line {n}: fewer cells than the header", source=str(path))
    return rows


def load(root: Path = ROOT) -> tuple[dict, list[dict], dict]:
    """(setup, the measured power runs, the steps row of the same system), each file
    checked where read (a refusal names the file and its field, column or line)."""
    try:
        setup = Setup.model_validate(read_yaml(root / "setup.yaml", "energy setup"))
    except ValidationError as exc:
        raise validation_error(exc, source=str(root / "setup.yaml")) from None
    runs = [r for r in _rows(root / POWER, POWER_COLUMNS) if r["run_status"] == "success"]
    steps = [r for r in _rows(root / STEPS, STEPS_COLUMNS) if r["system"] == setup.steps_row]
    if not steps:
        raise ConfigError(f"no row of system {setup.steps_row!r} (setup.yaml's steps_row)",
                          source=str(root / STEPS))
    return setup.model_dump(), runs, steps[0]


def steady_training(root: Path = ROOT) -> dict[str, dict]:
    """Per run, its steady training (every training block but the first, which holds the
    warm-up): {"node_w": mean node power weighted by readings, "seconds", "steps",
    "step_s", "kwh": mean power x seconds x nodes}; {} without the phases file."""
    path = root / PHASES
    if not path.is_file():
        return {}
    blocks = [r for r in _read_csv(path) if r["interval"] == "train" and r["index"] != "0"]
    out = {}
    for run in sorted({r["run"] for r in blocks}):
        mine = [r for r in blocks if r["run"] == run]
        readings = sum(int(r["readings"]) for r in mine)
        node_w = sum(int(r["readings"]) * float(r["mean_node_w"]) for r in mine) / readings
        seconds = sum(float(r["stop_s"]) - float(r["start_s"]) for r in mine)
        steps = sum(int(r["steps"]) for r in mine)
        out[run] = {"node_w": node_w, "seconds": seconds, "steps": steps,
                    "step_s": seconds / steps,
                    "kwh": sum(float(r["mean_node_w"]) * (float(r["stop_s"]) - float(r["start_s"]))
                               for r in mine) * NODES / 3.6e6}
    return out


def simulate(setup: dict, cap_w: float | None = None):
    """(metrics, energy, evaluation pass) of the setup's scenario (under ``cap_w``), or None
    where the scenario is not shipped. The evaluation pass is the scenario's
    ``training.evaluation`` (the setup's sets give it), simulated forward-only
    (:mod:`simulator.evaluation`); None without one."""
    from simulator.energy.timeline import energy_of
    from simulator.evaluation import evaluation_pass
    from simulator.pipeline import build_setup, run_setup
    from simulator.scenario import load_scenario, resolve_scenario
    try:
        path = resolve_scenario(setup["scenario"])
    except ConfigError:
        return None
    sets = list(setup["sets"]) + ([f"cluster.power_cap_w={cap_w}"] if cap_w else [])
    scn = load_scenario(path, sets)
    res = run_setup(build_setup(scn, str(path)))
    return res.metrics, energy_of(res), evaluation_pass(scn, str(path))


def run_phases(root: Path = ROOT) -> dict[str, dict]:
    """Per run, what its MLPerf log says of the whole window (``mlperf_power_phases.csv``):
    {"steps": training steps, "evaluations", "eval_s": each evaluation's seconds,
    "eval_node_w": the node power read during the evaluations but the first and the last,
    "block0_extra_s": the first block's seconds past its steps at the steady step};
    {} without the file."""
    path = root / PHASES
    if not path.is_file():
        return {}
    rows = list(_read_csv(path))
    steady = steady_training(root)
    out = {}
    for run in sorted({r["run"] for r in rows}):
        mine = [r for r in rows if r["run"] == run]
        evals = [r for r in mine if r["interval"] == "eval"]
        middle = evals[1:-1]          # the first starts the data loader; the last ends the run
        first = next(r for r in mine if r["interval"] == "train" and r["index"] == "0")
        out[run] = {"steps": sum(int(r["steps"]) for r in mine), "evaluations": len(evals),
                    "eval_s": [float(r["stop_s"]) - float(r["start_s"]) for r in evals],
                    "eval_node_w": sum(int(r["readings"]) * float(r["mean_node_w"])
                                       for r in middle)
                    / sum(int(r["readings"]) for r in middle),
                    "block0_extra_s": float(first["stop_s"]) - float(first["start_s"])
                    - int(first["steps"]) * steady[run]["step_s"]}
    return out


NODES = 8                               # the power system's servers (nodes_measured)


def compare(setup: dict, runs: list[dict], step: dict, sim, capped,
            steady: dict[str, dict] | None = None,
            phases: dict[str, dict] | None = None) -> list[dict]:
    """One result row per measured run (see :data:`COLUMNS`); ``steady``: the runs' steady
    training (:func:`steady_training`), ``phases``: their steps and evaluations
    (:func:`run_phases`), compared where given.

    The whole run, simulated: the run's training steps (its log's samples / global batch)
    at the simulated step and node power, and the evaluations the scenario's
    ``training.evaluation`` puts in that many steps, each at the simulated evaluation pass's
    time and node power. Without the phases (or without an evaluation pass) every second of
    the window is taken as a training step (``kwh_as_training``: the run's time to train /
    the measured median step, at the simulated step): what the energy per run was before
    the evaluation pass was modelled."""
    out = []
    steady, phases = steady or {}, phases or {}
    measured_step = float(step["median_step_time_s"])
    for r in runs:
        row = {"run": r["run"], "ttt_min": float(r["ttt_min"]),
               "measured_node_w": float(r["avg_node_power_W"]),
               "measured_kwh": float(r["node_energy_kWh"])}
        if sim is None:
            out.append({**row, "note": PENDING})
            continue
        nodes = int(r["nodes_measured"])
        (m, e, ev), (mc, ec, evc) = sim, capped
        as_training = (e.avg_node_w * nodes * m.iteration_time_s
                       * row["ttt_min"] * 60 / measured_step / 3.6e6)
        ph = phases.get(r["run"])
        if ph is not None and ev is not None:
            whole, whole_c = (_whole_run(ph["steps"], mm, ee, vv, nodes)
                              for mm, ee, vv in ((m, e, ev), (mc, ec, evc)))
            later = sorted(ph["eval_s"][1:])
            row.update(steps=ph["steps"], evaluations=whole["evaluations"],
                       simulated_s=round(whole["s"], 2),
                       time_error=round(whole["s"] / (row["ttt_min"] * 60) - 1, 4),
                       eval_s=round(later[len(later) // 2], 2),
                       simulated_eval_s=round(ev.time_s, 2),
                       eval_error=round(ev.time_s / later[len(later) // 2] - 1, 4),
                       eval_node_w=round(ph["eval_node_w"], 1),
                       simulated_eval_node_w=round(ev.avg_node_w, 1),
                       eval_power_error=round(ev.avg_node_w / ph["eval_node_w"] - 1, 4),
                       first_eval_s=round(ph["eval_s"][0], 2),
                       block0_extra_s=round(ph["block0_extra_s"], 2))
            kwh, kwh_c, node_w = whole["kwh"], whole_c["kwh"], whole["node_w"]
        else:
            kwh, node_w = as_training, e.avg_node_w
            kwh_c = (ec.avg_node_w * nodes * mc.iteration_time_s
                     * row["ttt_min"] * 60 / measured_step / 3.6e6)
        row.update(simulated_node_w=round(node_w, 1),
                   node_power_error=round(node_w / row["measured_node_w"] - 1, 4),
                   simulated_kwh=round(kwh, 4),
                   energy_error=round(kwh / row["measured_kwh"] - 1, 4),
                   capped_kwh=round(kwh_c, 4), kwh_as_training=round(as_training, 4), note="")
        if r["run"] in steady:
            st = steady[r["run"]]
            sim_train = e.avg_node_w * nodes * m.iteration_time_s * st["steps"] / 3.6e6
            row.update(train_steps=st["steps"], train_node_w=round(st["node_w"], 1),
                       train_power_error=round(e.avg_node_w / st["node_w"] - 1, 4),
                       train_step_s=round(st["step_s"], 4),
                       train_step_error=round(m.iteration_time_s / st["step_s"] - 1, 4),
                       train_kwh=round(st["kwh"], 4), simulated_train_kwh=round(sim_train, 4),
                       train_energy_error=round(sim_train / st["kwh"] - 1, 4))
        out.append(row)
    return out


def _whole_run(steps: int, m, e, ev, nodes: int) -> dict:
    """A run of ``steps`` training steps with its evaluations (:func:`simulator.evaluation.
    run_totals`): seconds, evaluations, node energy (kWh, ``nodes`` servers, AC, no PUE)
    and the average node power over it."""
    from simulator.evaluation import run_totals
    t = run_totals(steps, m.iteration_time_s, None, ev)
    joules = (t.train_s * e.avg_node_w + t.eval_s * ev.avg_node_w) * nodes
    return {"s": t.time_s, "evaluations": t.evaluations, "kwh": joules / 3.6e6,
            "node_w": joules / nodes / t.time_s}


def write(results: list[dict], setup: dict, sim, capped, root: Path = ROOT,
          out: Path | None = None) -> Path:
    """results.csv and report.md into ``out`` (default: ``root``, beside the setup)."""
    out = Path(out) if out is not None else root
    out.mkdir(parents=True, exist_ok=True)
    with atomic_writer(out / "results.csv", text=True) as f:   # a link replaced, not followed
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows({k: r.get(k, "") for k in COLUMNS} for r in results)
    lines = ["# Energy validation: MLPerf v4.1 Llama 2 70B LoRA power runs (64 x H100)", "",
             "Setup and declaration: `setup.yaml` (nothing fitted). Data: `mlperf_power_h100.csv`,",
             "`mlperf_v41_steps.csv` (copied unedited, sources in their `source` column),",
             "`mlperf_power_phases.csv` (each run's training blocks and evaluations, written by",
             "`extract_phases.py` from the same MLPerf logs).", ""]
    if sim is None:
        lines += [f"All {len(results)} runs: {PENDING} "
                  f"(`{setup['scenario']}` is not shipped in this build).", ""]
    else:
        (m, e, ev), (mc, ec, _) = sim, capped
        gate = setup["gates"]["energy_per_run_abs_error"]
        worst = max(abs(r["energy_error"]) for r in results)
        lines += [f"Simulated step {m.iteration_time_s:.4f} s; node {e.avg_node_w:,.0f} W AC "
                  f"(GPU {e.avg_gpu_w:,.0f} W average, peak node {e.peak_node_w:,.0f} W).",
                  f"Under a {setup['power_cap_w']:g} W cap: step {mc.iteration_time_s:.4f} s "
                  f"({mc.iteration_time_s / m.iteration_time_s - 1:+.1%}), node "
                  f"{ec.avg_node_w:,.0f} W, energy per run "
                  f"{_ratio(mc, ec, m, e) - 1:+.1%} (training steps).",
                  *(_eval_lines(ev) if ev is not None else []),
                  f"Worst |energy per run error| {worst:.1%} (gate {gate:.0%}).", "",
                  *_breakdown(e, results)]
    whole = any("steps" in r for r in results)
    lines += ["## The whole run (run_start to run_stop: training, warm-up and evaluations)", ""]
    if whole:
        lines += ["Simulated: the run's training steps (its log: samples / global batch 8) at "
                  "the simulated step and node power, and the evaluations the scenario's "
                  "`training.evaluation` puts in them, each at the simulated evaluation "
                  "pass's time and node power (`simulator/evaluation.py`); `eval node W`: read during "
                  "the evaluations but the first (data loader start) and the last (the run "
                  "ends in it; the nodes draw about 4 kW there). Not simulated: the "
                  "first block's extra seconds (`block0 +s`: the host starts the validation "
                  "data loader before the first evaluation) and the first evaluation's "
                  "(`eval 0 s`). `as training`: the energy before the evaluation pass was "
                  "modelled (every second of the window a training step).", "",
                  "| run | steps | evals | s measured | simulated | error | eval s measured "
                  "| simulated | error | eval node W measured | simulated | error "
                  "| eval 0 s | block0 +s | node W measured | simulated "
                  "| error | kWh measured | simulated | error | as training | error | "
                  "kWh at cap |", "|" + "---|" * 23]
        for r in results:
            if "steps" not in r:
                continue
            cells = [r["run"], str(r["steps"]), str(r["evaluations"]),
                     f"{r['ttt_min'] * 60:,.1f}", f"{r['simulated_s']:,.1f}",
                     _cell(r, "time_error"), f"{r['eval_s']:.2f}",
                     f"{r['simulated_eval_s']:.2f}", _cell(r, "eval_error"),
                     f"{r['eval_node_w']:,.0f}", f"{r['simulated_eval_node_w']:,.0f}",
                     _cell(r, "eval_power_error"),
                     f"{r['first_eval_s']:.1f}", f"{r['block0_extra_s']:.1f}",
                     f"{r['measured_node_w']:,.0f}",
                     *(_cell(r, k) for k in ("simulated_node_w", "node_power_error",
                                             "measured_kwh", "simulated_kwh", "energy_error",
                                             "kwh_as_training")),
                     f"{r['kwh_as_training'] / r['measured_kwh'] - 1:+.1%}",
                     _cell(r, "capped_kwh")]
            lines.append("| " + " | ".join(cells) + " |")
    else:
        lines += ["Simulated energy = simulated node power x nodes x simulated step x the "
                  "run's time to train / the measured median step: every second of the window "
                  "is taken as a training step (no evaluation pass in the setup).", "",
                  "| run | ttt min | node W measured | simulated | error | kWh measured | "
                  "simulated | error | kWh at cap | note |", "|" + "---|" * 10]
        for r in results:
            cells = [r["run"], f"{r['ttt_min']:.3f}", f"{r['measured_node_w']:,.0f}",
                     *(_cell(r, k) for k in ("simulated_node_w", "node_power_error",
                                             "measured_kwh", "simulated_kwh", "energy_error",
                                             "capped_kwh")), r.get("note", "")]
            lines.append("| " + " | ".join(cells) + " |")
    checks = interval_checks(setup, root) if sim is not None else []
    if checks:
        lines += ["", "## The evaluation pass on other runs of the same code", "",
                  "`mlperf_v41_intervals.csv` (`extract_intervals.py`, from the runs' MLPerf "
                  "logs): the median of the evaluations after the first (eval_start to "
                  "eval_stop) against the simulated pass of each system's setup "
                  "(`evaluation_checks` in setup.yaml); the first evaluation and the first "
                  "block's seconds past its steps are not simulated. Reported, not gated.", "",
                  "| system | runs | evaluations | eval s measured | simulated | error | "
                  "first eval s | block0 +s | configuration |", "|" + "---|" * 9]
        for c in checks:
            lines.append(f"| {c['system']} | {c['runs']} | {c['evaluations']} | "
                         f"{c['eval_s']:.2f} | {c['simulated_eval_s']:.2f} | "
                         f"{c['eval_error']:+.1%} | {c['first_eval_s']:.1f} | "
                         f"{c['block0_extra_s']:.1f} | `{c['config'].rsplit('/', 1)[-1]}` |")
    if sim is not None and sim[2] is not None:
        lines += pace_lines(setup, sim[2], root)
        lines += clock_lines(sim[1], sim[2], root)
        lines += gap_lines(results, sim, root)
    if any("train_node_w" in r for r in results):
        lines += ["", "## Steady training (the training blocks after the first)", "",
                  "What the simulator models: power, step time and energy of the training "
                  "steps alone, each against its own measurement (the node power read during "
                  "those blocks; their seconds / steps; mean power x seconds x 8 nodes).", "",
                  "| run | steps | node W measured | error | step s measured | error | "
                  "kWh measured | simulated | error |", "|" + "---|" * 9]
        for r in results:
            if "train_node_w" not in r:
                continue
            cells = [r["run"], str(r["train_steps"]), f"{r['train_node_w']:,.0f}",
                     _cell(r, "train_power_error"), f"{r['train_step_s']:.4f}",
                     *(_cell(r, k) for k in ("train_step_error", "train_kwh",
                                             "simulated_train_kwh", "train_energy_error"))]
            lines.append("| " + " | ".join(cells) + " |")
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    return out / "report.md"


def node_parts(e) -> dict:
    """One server's simulated DC power by part (W) and its supplies' efficiency."""
    per_node = e.nodes * e.step_time_s
    dc = (e.gpu_j + e.host_j + e.nic_j) / per_node
    return {"gpus_w": e.gpu_j / per_node, "host_w": e.host_j / per_node,
            "nics_w": e.nic_j / per_node, "psu": dc / e.avg_node_w}


def implied_gpu_w(e, measured_node_w: float) -> float:
    """The average board power of one GPU that the measured node power leaves once the
    model's own host and NIC power are taken off (a diagnostic, nothing is fitted on it)."""
    parts = node_parts(e)
    return ((measured_node_w * parts["psu"] - parts["host_w"] - parts["nics_w"])
            / gpus_per_node(e))


def gpus_per_node(e) -> float:
    return e.gpu_j / e.step_time_s / e.avg_gpu_w / e.nodes if e.avg_gpu_w else 0.0


def _breakdown(e, results: list[dict]) -> list[str]:
    """Where the simulated node power goes, and what the measured runs leave for the GPUs."""
    p = node_parts(e)
    implied = [implied_gpu_w(e, r.get("train_node_w", r["measured_node_w"])) for r in results]
    n = gpus_per_node(e)
    return [f"Node power, simulated (DC): GPUs {p['gpus_w']:,.0f} W ({n:.0f} x "
            f"{e.avg_gpu_w:,.0f} W) + "
            f"host {p['host_w']:,.0f} W + NICs {p['nics_w']:,.0f} W, through supplies of "
            f"{p['psu']:.2f}. With that host and those NICs, the measured runs' steady training "
            f"leaves "
            f"{min(implied):,.0f}-{max(implied):,.0f} W per GPU on average against the "
            f"model's {e.avg_gpu_w:,.0f} W: the excess is on the GPU side unless the host "
            f"estimate (an upper one, from a peak reading) is high. Cross-check (not fitted): "
            f"on the same kind of node, computationally intensive training averaged 76% of "
            f"10.2 kW = 7.75 kW (Newkirk et al., arXiv 2506.14551), which leaves "
            f"{(7752 * p['psu'] - p['host_w'] - p['nics_w']) / n:,.0f} W per GPU with this "
            f"host.", ""]


def _eval_lines(ev) -> list[str]:
    loader = (f", fed by a data loader of {ev.loader_s:.4f} s a batch (dense causal masks, "
              f"simulator/loader.py; the first batch of each evaluation waits for it)"
              if ev.loader_s > 0 else "")
    return [f"Evaluation pass (every {ev.every_steps} steps from step {ev.first_step}, "
            f"{ev.samples} samples in {ev.batches} forward-only batches of {ev.global_batch}, "
            f"no training CUDA graphs): {ev.batch_s:.4f} s a batch{loader}, {ev.time_s:.2f} s "
            f"an evaluation, node {ev.avg_node_w:,.0f} W (GPU {ev.avg_gpu_w:,.0f} W)."]


def _ratio(mc, ec, m, e) -> float:
    return (ec.avg_node_w * mc.iteration_time_s) / (e.avg_node_w * m.iteration_time_s)


def _cell(r: dict, key: str) -> str:
    v = r.get(key)
    if v is None or v == "":
        return "-"
    if key.endswith("error"):
        return f"{v:+.1%}"
    return f"{v:,.3f}" if "kwh" in key else f"{v:,.0f}"


def cases(results: list[dict], setup: dict) -> list[dict]:
    """Gated cases: each run's energy per run within the gate and, where the phases file
    gives the steady training, its node power, step time and energy each within theirs (the
    energy is right for the right reason only if power and time both are); pending rows are
    reported only."""
    gates = setup["gates"]
    checks = [("energy", "energy_error", gates["energy_per_run_abs_error"]),
              ("train_power", "train_power_error", gates.get("train_power_abs_error")),
              ("train_step", "train_step_error", gates.get("train_step_abs_error")),
              ("train_energy", "train_energy_error", gates.get("train_energy_abs_error"))]
    out = []
    for r in results:
        for name, key, gate in checks:
            if gate is None or (name != "energy" and key not in r):
                continue
            case = ("energy/mlperf_lora_h100/" + r["run"] if name == "energy"
                    else f"energy/mlperf_lora_h100/{r['run']}/{name}")
            out.append({"case": case, "ok": None if key not in r else abs(r[key]) <= gate,
                        "result": r.get("note") or f"{r[key]:+.1%}", "bound": f"{gate:.0%}"})
    return out


def interval_checks(setup: dict, root: Path = ROOT) -> list[dict]:
    """The evaluation pass against other runs of the same code (setup.yaml
    ``evaluation_checks``, ``mlperf_v41_intervals.csv``): per system its runs, the median of
    their evaluations after the first against the simulated pass, and what is not simulated
    (the median first evaluation, the median first block's seconds past its steps at the
    run's steady step). Reported, not gated; [] without the file or the checks."""
    checks, path = setup.get("evaluation_checks") or {}, root / INTERVALS
    if not checks or not path.is_file():
        return []
    from simulator.evaluation import evaluation_pass
    from simulator.scenario import load_scenario, resolve_scenario
    rows = list(_read_csv(path))
    scenario = resolve_scenario(setup["scenario"])
    out = []
    for system, sets in checks.items():
        mine = [r for r in rows if r["system"] == system]
        later, first, extra = [], [], []
        for run in sorted({r["run"] for r in mine}):
            iv = [r for r in mine if r["run"] == run]
            secs = lambda r: float(r["stop_s"]) - float(r["start_s"])  # noqa: E731
            evals = [secs(r) for r in iv if r["interval"] == "eval"]
            blocks = [r for r in iv if r["interval"] == "train"]
            step = sum(secs(r) for r in blocks[1:]) / sum(int(r["steps"]) for r in blocks[1:])
            later += evals[1:]
            first.append(evals[0])
            extra.append(secs(blocks[0]) - int(blocks[0]["steps"]) * step)
        sets = list(setup["sets"]) if sets == "power_system" else list(sets)
        ev = evaluation_pass(load_scenario(scenario, sets), str(scenario))
        if ev is None:                  # a setup without training.evaluation
            continue
        measured = _median(later)
        out.append({"system": system, "runs": len({r["run"] for r in mine}),
                    "evaluations": len(later), "eval_s": round(measured, 2),
                    "simulated_eval_s": round(ev.time_s, 2),
                    "eval_error": round(ev.time_s / measured - 1, 4),
                    "first_eval_s": round(_median(first), 2),
                    "block0_extra_s": round(_median(extra), 2), "config": mine[0]["config"]})
    return out


def _median(values: list[float]) -> float:
    v = sorted(values)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2


def measurements(root: Path = ROOT) -> tuple:
    """(setup, runs, steps row, steady training, phases) of ``root``, every measurement
    parsed and compared once without a simulation: a bad file is refused before any work."""
    setup, runs, step = load(root)
    try:
        steady, phases = steady_training(root), run_phases(root)
        compare(setup, runs, step, None, None, steady, phases)
        _check_intervals(setup, root)
    except (KeyError, ValueError, ZeroDivisionError) as exc:
        raise ConfigError(f"a measurement that is not a number, or a column missing: {exc}",
                          source=str(root)) from None
    return setup, runs, step, steady, phases


def pace_lines(setup: dict, ev, root: Path = ROOT) -> list[str]:
    """The report's per-batch and per-evaluation split of the evaluations
    (:mod:`simulator.validation.energy_pace`); none without ``evaluation_pace``."""
    groups, path = setup.get("evaluation_pace") or {}, root / INTERVALS
    if not groups or not path.is_file():
        return []
    from simulator.validation.energy_pace import pace_rows, report_lines
    return report_lines(pace_rows(groups, list(_read_csv(path)), _global_batches(root),
                                  ev.samples, ev))


def clock_checks(e, ev, root: Path = ROOT) -> tuple[list[dict], float]:
    """(per run, its intervals on the run's clock against the simulated step ``e`` and
    evaluation ``ev`` (:mod:`simulator.validation.energy_clocks`), the idle node W); no
    rows without the aligned files."""
    from simulator.energy.power import load_power
    from simulator.validation.energy_clocks import clock_rows, idle_node_w
    idle_w = idle_node_w(node_parts(e), gpus_per_node(e), load_power().gpu(GPU).idle_w)
    if not (root / ALIGNED).is_file() or not (root / CLOCKS).is_file():
        return [], idle_w
    return clock_rows(list(_read_csv(root / ALIGNED)), list(_read_csv(root / CLOCKS)),
                      e.avg_node_w, ev.avg_node_w, ev.time_s, idle_w), idle_w


def clock_lines(e, ev, root: Path = ROOT) -> list[str]:
    """The report's section on the node power logs' clocks (none without the files)."""
    from simulator.validation.energy_clocks import report_lines
    rows, idle_w = clock_checks(e, ev, root)
    return report_lines(rows, e.avg_node_w, ev.avg_node_w, idle_w)


def gaps(results: list[dict], sim, root: Path = ROOT) -> list[dict]:
    """:func:`simulator.validation.energy_clocks.gap_rows` of the whole-run ``results``
    (none without the aligned files or the runs' phases)."""
    from simulator.validation.energy_clocks import gap_rows
    (m, e, ev) = sim
    clocks, idle_w = clock_checks(e, ev, root)
    whole = [r for r in results if "steps" in r]
    if not clocks or len(whole) != len(clocks):
        return []
    return gap_rows(whole, clocks, m.iteration_time_s, e.avg_node_w, ev.time_s,
                    ev.avg_node_w, idle_w, NODES)


def gap_lines(results: list[dict], sim, root: Path = ROOT) -> list[str]:
    from simulator.validation.energy_clocks import gap_lines as lines_of
    return lines_of(gaps(results, sim, root))


def _global_batches(root: Path) -> dict[str, int]:
    """Per system of the steps file, its global batch (where the file gives one)."""
    return {r["system"]: int(r["global_batch"]) for r in _read_csv(root / STEPS)
            if (r.get("global_batch") or "").isdigit()}


def _check_intervals(setup: dict, root: Path) -> None:
    """Every system ``evaluation_checks`` names has runs in the intervals file, each with an
    evaluation after its first (what :func:`interval_checks` takes the median of); every
    ``evaluation_pace`` group can be drawn (:func:`~simulator.validation.energy_pace.
    check_groups`)."""
    checks, path = setup.get("evaluation_checks") or {}, root / INTERVALS
    if setup.get("evaluation_pace") and path.is_file():
        from simulator.validation.energy_pace import check_groups
        check_groups(setup["evaluation_pace"], list(_read_csv(path)), _global_batches(root),
                     str(root / "setup.yaml"))
    if not checks or not path.is_file():
        return
    evals = collections.Counter((r["system"], r["run"]) for r in _read_csv(path)
                                if r["interval"] == "eval")
    for system in checks:
        if not any(n > 1 for (s, _), n in evals.items() if s == system):
            raise ConfigError(f"no run of system {system!r} with an evaluation after its "
                              f"first in {INTERVALS}", source=str(root / "setup.yaml"),
                              field=f"evaluation_checks.{system}")


def evaluate(root: Path = ROOT, measured: tuple | None = None
             ) -> tuple[dict, list[dict], tuple | None, tuple | None]:
    """(setup, result rows, the simulation, the simulation under the cap) of ``root``'s
    setup (``measured``: its :func:`measurements`, when already read): what ``validate
    energy`` and ``validate all`` report."""
    setup, runs, step, steady, phases = measured or measurements(root)
    sim = simulate(setup)
    capped = simulate(setup, setup["power_cap_w"]) if sim is not None else None
    return setup, compare(setup, runs, step, sim, capped, steady, phases), sim, capped


@click.command("energy")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder with setup.yaml and the MLPerf CSVs [default: validation/energy].")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder: new, empty or written by clustersim [default: the "
                   "--root folder; from a wheel, validation-report/energy].")
@quiet_option
def validate_energy(root, out):
    """Simulated energy per run and node power against MLPerf v4.1's measured LoRA power
    runs (64 x H100), with a 500 W power-cap what-if; rows read "pending" where the LoRA
    scenario is not shipped (docs/energy.md). Writes report.md and results.csv."""
    from simulator.validation.commands import gated_exit, report_folder
    root = root or ROOT
    if not (root / "setup.yaml").is_file():
        raise ConfigError(f"no setup.yaml in {root}", source="--root")
    measured = measurements(root)
    folder = report_folder(out, root)
    stage("validate energy: simulating the MLPerf LoRA power runs' step and evaluation")
    setup, results, sim, capped = evaluate(root, measured)
    report = write(results, setup, sim, capped, root, folder)
    n = sum(1 for r in results if "energy_error" in r)
    click.echo(f"energy: {n} of {len(results)} runs simulated"
               + ("" if n else f" ({PENDING})") + f"; report: {report}")
    gated_exit(cases(results, setup))
