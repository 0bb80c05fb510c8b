"""MLPerf Training v4.1 power runs against the simulated energy (``validation/energy/``:
``setup.yaml`` declares the scenario, the rows and that nothing is fitted).

The Llama 2 70B LoRA scenario (issue 44's, loaded by name) runs on Dell's 64-GPU power
system; its simulated average node power and energy per run are compared with each of the
ten measured runs, and the same run under a 500 W power cap is reported beside them. Where
the scenario is not shipped in this build, every row reads "pending: needs the LoRA
scenario" (not a failure). ``clustersim validate energy`` writes ``results.csv`` and
``report.md`` beside the setup.
"""

from __future__ import annotations

import csv
from pathlib import Path

import click
import yaml

from simulator.errors import ConfigError
from simulator.validation.paths import data_dir

ROOT = data_dir("energy")
POWER, STEPS = "mlperf_power_h100.csv", "mlperf_v41_steps.csv"
PENDING = "pending: needs the LoRA scenario"
COLUMNS = ["run", "ttt_min", "measured_node_w", "simulated_node_w", "node_power_error",
           "measured_kwh", "simulated_kwh", "energy_error", "capped_kwh", "note"]


def load(root: Path = ROOT) -> tuple[dict, list[dict], dict]:
    """(setup, the measured power runs, the steps row of the same system)."""
    setup = yaml.safe_load((root / "setup.yaml").read_text())
    with open(root / POWER, newline="") as f:
        runs = [r for r in csv.DictReader(f) if r["run_status"] == "success"]
    with open(root / STEPS, newline="") as f:
        step = next(r for r in csv.DictReader(f) if r["system"] == setup["steps_row"])
    return setup, runs, step


def simulate(setup: dict, cap_w: float | None = None):
    """(metrics, energy) of the setup's scenario (under ``cap_w``), or None where the
    scenario is not shipped."""
    from simulator.energy.timeline import energy_of
    from simulator.pipeline import build_setup, run_setup
    from simulator.scenario import load_scenario, resolve_scenario
    try:
        path = resolve_scenario(setup["scenario"])
    except ConfigError:
        return None
    sets = list(setup["sets"]) + ([f"cluster.power_cap_w={cap_w}"] if cap_w else [])
    res = run_setup(build_setup(load_scenario(path, sets), str(path)))
    return res.metrics, energy_of(res)


def compare(setup: dict, runs: list[dict], step: dict, sim, capped) -> list[dict]:
    """One result row per measured run (see :data:`COLUMNS`)."""
    out = []
    measured_step = float(step["median_step_time_s"])
    for r in runs:
        row = {"run": r["run"], "ttt_min": float(r["ttt_min"]),
               "measured_node_w": float(r["avg_node_power_W"]),
               "measured_kwh": float(r["node_energy_kWh"])}
        if sim is None:
            out.append({**row, "note": PENDING})
            continue
        nodes = int(r["nodes_measured"])
        steps = row["ttt_min"] * 60 / measured_step
        kwh = lambda m, e: e.avg_node_w * nodes * m.iteration_time_s * steps / 3.6e6  # noqa: E731
        (m, e), (mc, ec) = sim, capped
        row.update(simulated_node_w=round(e.avg_node_w, 1),
                   node_power_error=round(e.avg_node_w / row["measured_node_w"] - 1, 4),
                   simulated_kwh=round(kwh(m, e), 4),
                   energy_error=round(kwh(m, e) / row["measured_kwh"] - 1, 4),
                   capped_kwh=round(kwh(mc, ec), 4), note="")
        out.append(row)
    return out


def write(results: list[dict], setup: dict, sim, capped, root: Path = ROOT) -> Path:
    with open(root / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows({k: r.get(k, "") for k in COLUMNS} for r in results)
    lines = ["# Energy validation: MLPerf v4.1 Llama 2 70B LoRA power runs (64 x H100)", "",
             "Setup and declaration: `setup.yaml` (nothing fitted). Data: `mlperf_power_h100.csv`,",
             "`mlperf_v41_steps.csv` (copied unedited, sources in their `source` column).", ""]
    if sim is None:
        lines += [f"All {len(results)} runs: {PENDING} "
                  f"(`{setup['scenario']}` is not shipped in this build).", ""]
    else:
        (m, e), (mc, ec) = sim, capped
        gate = setup["gates"]["energy_per_run_abs_error"]
        worst = max(abs(r["energy_error"]) for r in results)
        lines += [f"Simulated step {m.iteration_time_s:.4f} s; node {e.avg_node_w:,.0f} W AC "
                  f"(GPU {e.avg_gpu_w:,.0f} W average, peak node {e.peak_node_w:,.0f} W).",
                  f"Under a {setup['power_cap_w']} W cap: step {mc.iteration_time_s:.4f} s "
                  f"({mc.iteration_time_s / m.iteration_time_s - 1:+.1%}), node "
                  f"{ec.avg_node_w:,.0f} W, energy per run "
                  f"{_ratio(mc, ec, m, e) - 1:+.1%}.",
                  f"Worst |energy per run error| {worst:.1%} (gate {gate:.0%}).", ""]
    lines += ["| run | ttt min | node W measured | simulated | error | kWh measured | "
              "simulated | error | kWh at cap | note |", "|" + "---|" * 10]
    for r in results:
        cells = [r["run"], f"{r['ttt_min']:.3f}", f"{r['measured_node_w']:,.0f}",
                 *(_cell(r, k) for k in ("simulated_node_w", "node_power_error",
                                         "measured_kwh", "simulated_kwh", "energy_error",
                                         "capped_kwh")), r.get("note", "")]
        lines.append("| " + " | ".join(cells) + " |")
    (root / "report.md").write_text("\n".join(lines) + "\n")
    return root / "report.md"


def _ratio(mc, ec, m, e) -> float:
    return (ec.avg_node_w * mc.iteration_time_s) / (e.avg_node_w * m.iteration_time_s)


def _cell(r: dict, key: str) -> str:
    v = r.get(key)
    if v is None or v == "":
        return "-"
    return f"{v:+.1%}" if key.endswith("error") else f"{v:,.4g}"


def cases(results: list[dict], setup: dict) -> list[dict]:
    """Gated cases: each run's energy per run within the gate; pending rows reported only."""
    gate = setup["gates"]["energy_per_run_abs_error"]
    return [{"case": f"energy/mlperf_lora_h100/{r['run']}",
             "ok": None if "energy_error" not in r else abs(r["energy_error"]) <= gate,
             "result": r.get("note") or f"{r['energy_error']:+.1%}", "bound": f"{gate:.0%}"}
            for r in results]


@click.command("energy")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder with setup.yaml and the MLPerf CSVs [default: validation/energy].")
def validate_energy(root):
    """Simulated energy per run and node power against MLPerf v4.1's measured LoRA power
    runs (64 x H100), with a 500 W power-cap what-if; rows read "pending" where the LoRA
    scenario is not shipped (docs/energy.md)."""
    from simulator.validation.commands import gated_exit
    root = root or ROOT
    if not (root / "setup.yaml").is_file():
        raise ConfigError(f"no setup.yaml in {root}", source="--root")
    setup, runs, step = load(root)
    sim = simulate(setup)
    capped = simulate(setup, setup["power_cap_w"]) if sim is not None else None
    results = compare(setup, runs, step, sim, capped)
    report = write(results, setup, sim, capped, root)
    n = sum(1 for r in results if "energy_error" in r)
    click.echo(f"energy: {n} of {len(results)} runs simulated"
               + ("" if n else f" ({PENDING})") + f"; report: {report}")
    gated_exit(cases(results, setup))
