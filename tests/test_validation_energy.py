"""`clustersim validate energy`: the MLPerf LoRA power runs against the simulated energy;
pending rows without the LoRA scenario, the energy per run written out where it runs."""

from __future__ import annotations

import shutil

import pytest
import yaml

from simulator.validation import energy as ve


def _root(tmp_path, **setup):
    root = tmp_path / "energy"
    shutil.copytree(ve.ROOT, root, ignore=shutil.ignore_patterns("report.md", "results.csv"))
    data = yaml.safe_load((root / "setup.yaml").read_text())
    data.update(setup)
    (root / "setup.yaml").write_text(yaml.safe_dump(data))
    return root


def test_the_copied_power_runs_are_the_shared_data_unedited():
    from pathlib import Path
    shared = Path("/work/shared/validation-data/training")
    if not shared.is_dir():
        pytest.skip("no shared validation data on this machine")
    for name in (ve.POWER, ve.STEPS):
        assert (ve.ROOT / name).read_bytes() == (shared / name).read_bytes()


def test_without_the_lora_scenario_every_run_is_pending_not_failed(tmp_path):
    from click.testing import CliRunner
    root = _root(tmp_path, scenario="no-such-lora-scenario")
    out = tmp_path / "report"
    got = CliRunner().invoke(ve.validate_energy, ["--root", str(root), "--out", str(out)])
    assert got.exit_code == 0, got.output
    assert "0 of 10 runs simulated (pending: needs the LoRA scenario)" in got.output
    assert (out / "report.md").read_text().count(ve.PENDING) == 11   # a line + 10 rows
    assert not (root / "report.md").exists()       # the report goes to --out, not the data


def test_a_users_data_folder_is_not_written_without_out(capsys, tmp_path, monkeypatch):
    """validate energy --root DIR wrote its report into DIR, the user's data folder, as no
    other validate command does: without --out, a folder clustersim did not write is
    refused in one line before any simulation (as validate traces --root)."""
    from simulator.cli import main
    root = _root(tmp_path)

    def no_simulation(*_args, **_kwargs):
        raise AssertionError("simulated before the refusal")
    monkeypatch.setattr(ve, "simulate", no_simulation)
    with pytest.raises(SystemExit) as exc:
        main(["validate", "energy", "--root", str(root)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "without --out the report is written here" in err, err
    assert sorted(p.name for p in root.iterdir()) == sorted(
        p.name for p in ve.ROOT.iterdir() if p.name not in ("report.md", "results.csv"))


def test_a_run_that_simulates_has_its_energy_per_run_written_out(tmp_path):
    root = _root(tmp_path, scenario="quickstart", sets=["cluster.topology=dgx-h100",
                                                        "simulation.variability=none"])
    setup, runs, step = ve.load(root)
    sim = ve.simulate(setup)
    capped = ve.simulate(setup, setup["power_cap_w"])
    rows = ve.compare(setup, runs, step, sim, capped)
    (m, e, ev), (mc, ec, _) = sim, capped
    assert ev is None                   # no training.evaluation: the window as training
    for r, run in zip(rows, runs):
        steps = float(run["ttt_min"]) * 60 / float(step["median_step_time_s"])
        kwh = e.avg_node_w * int(run["nodes_measured"]) * m.iteration_time_s * steps / 3.6e6
        assert r["simulated_kwh"] == pytest.approx(kwh, abs=1e-4)
        assert r["energy_error"] == pytest.approx(kwh / float(run["node_energy_kWh"]) - 1,
                                                  abs=1e-4)
        assert r["node_power_error"] == pytest.approx(
            e.avg_node_w / float(run["avg_node_power_W"]) - 1, abs=1e-4)
    assert mc.iteration_time_s > m.iteration_time_s and ec.avg_node_w < e.avg_node_w
    cases = ve.cases(rows, setup)
    assert all(c["ok"] is not None for c in cases)
    report = ve.write(rows, setup, sim, capped, root).read_text()
    assert f"Under a 500 W cap: step {mc.iteration_time_s:.4f} s" in report


def test_the_gpu_power_a_measured_node_leaves_is_written_out():
    """A node of 2 GPUs at 500 W, a 1,000 W host and 4 NIC ports of 25 W through 0.8
    supplies: a measured 2,500 W AC node leaves (2,500 x 0.8 - 1,000 - 100) / 2 = 450 W a
    GPU."""
    from simulator.energy.model import Machine, Phases, step_energy
    from simulator.energy.power import GpuPower, HostPower, Site
    machine = Machine(HostPower(host_w=1000.0, gpus=2, psu_efficiency=0.8), servers=1,
                      nics_per_server=4, nic_w=25.0, switches=0.0, switch_w=0.0)
    gpu = GpuPower(idle_w=100.0, gemm_w=500.0, memory_w=300.0, comm_w=200.0)
    e = step_energy([(0, Phases(gemm_s=2.0)), (0, Phases(gemm_s=2.0))], gpu, machine,
                    Site(1.0, 0.0, 0.0), step_s=2.0, tokens_per_step=1.0)
    parts = ve.node_parts(e)
    assert parts == pytest.approx({"gpus_w": 1000.0, "host_w": 1000.0, "nics_w": 100.0,
                                   "psu": 0.8})
    assert e.avg_node_w == pytest.approx((1000 + 1000 + 100) / 0.8)
    assert ve.implied_gpu_w(e, 2500.0) == pytest.approx((2500 * 0.8 - 1000 - 100) / 2)


def test_the_phases_file_splits_each_runs_window_without_losing_a_reading():
    """The mean over a run's intervals, weighted by readings, is the run's logged average node
    power (a reading on a boundary counts in both intervals: within 1 W)."""
    import csv
    with open(ve.ROOT / ve.PHASES, newline="") as f:
        phases = list(csv.DictReader(f))
    with open(ve.ROOT / ve.POWER, newline="") as f:
        runs = list(csv.DictReader(f))
    for run in runs:
        mine = [r for r in phases if r["run"] == run["run"]]
        assert {r["interval"] for r in mine} == {"train", "eval"} and all(r["source"] for r in mine)
        n = sum(int(r["readings"]) for r in mine)
        mean = sum(int(r["readings"]) * float(r["mean_node_w"]) for r in mine) / n
        assert mean == pytest.approx(float(run["avg_node_power_W"]), abs=1.0), run["run"]
        steps = sum(int(r["steps"]) for r in mine)
        assert steps * 8 in (2688, 3072, 3456), run["run"]      # whole blocks of 384 samples


def test_steady_training_is_the_blocks_after_the_first_written_out(tmp_path):
    """Blocks 1 and 2 of a run (block 0 and the evaluation left out): 48 + 48 steps in
    26 + 27 s at 7,000 and 8,000 W (readings 20 and 30): node power (20 x 7,000 + 30 x 8,000)
    / 50, step 53 / 96 s, energy (7,000 x 26 + 8,000 x 27) x 8 nodes / 3.6e6 kWh."""
    import shutil
    root = tmp_path / "energy"
    root.mkdir()
    shutil.copy(ve.ROOT / "setup.yaml", root)
    (root / ve.PHASES).write_text(
        "run,interval,index,start_s,stop_s,steps,readings,mean_node_w,source\n"
        "r,train,0,0,100,192,800,6000,x\n"
        "r,eval,0,100,120,0,160,5000,x\n"
        "r,train,1,120,146,48,20,7000,x\n"
        "r,eval,1,146,156,0,80,7500,x\n"
        "r,train,2,156,183,48,30,8000,x\n")
    got = ve.steady_training(root)["r"]
    assert got["node_w"] == pytest.approx((20 * 7000 + 30 * 8000) / 50)
    assert got["steps"] == 96 and got["seconds"] == pytest.approx(53)
    assert got["step_s"] == pytest.approx(53 / 96)
    assert got["kwh"] == pytest.approx((7000 * 26 + 8000 * 27) * 8 / 3.6e6)


def test_the_committed_results_and_the_docs_table_are_what_the_command_gives():
    """`validate energy`'s rows, recomputed (2 s), are results.csv as committed; the
    ranges docs/energy.md quotes are those rows' extremes."""
    import csv
    import re
    from pathlib import Path
    setup, rows, sim, _ = ve.evaluate()
    if sim is None:
        pytest.skip("the LoRA scenario is not shipped in this build")
    with open(ve.ROOT / "results.csv", newline="") as f:
        committed = list(csv.DictReader(f))
    assert [{k: str(r.get(k, "")) for k in ve.COLUMNS} for r in rows] == committed

    def span(key, fmt):
        vals = sorted(r[key] for r in rows)
        return f"{fmt(vals[0])} to {fmt(vals[-1])}"
    pct = lambda v: f"{v:+.1%}"                         # noqa: E731
    doc = Path(__file__).resolve().parents[1].joinpath("docs", "energy.md").read_text()
    table = doc[doc.index("| | measured | simulated | error |"):]
    for label, key in (("steady training node power", "train_power_error"),
                       ("steady training step", "train_step_error"),
                       ("steady training energy per run", "train_energy_error"),
                       ("whole-run node power", "node_power_error"),
                       ("whole-run energy", "energy_error"),
                       ("whole-run time", "time_error"),
                       ("one later evaluation", "eval_error"),
                       ("node power in the evaluations but the first and last",
                        "eval_power_error"),
                       ("whole-run energy, evaluations as training steps (before)", None)):
        if key is None:
            vals = sorted(r["kwh_as_training"] / r["measured_kwh"] - 1 for r in rows)
            line = next(x for x in table.splitlines() if x.startswith(f"| {label} |"))
            assert line.rstrip(" |").endswith(f"{pct(vals[0])} to {pct(vals[-1])}"), line
            continue
        line = next(x for x in table.splitlines() if x.startswith(f"| {label} |"))
        assert line.rstrip(" |").endswith(span(key, pct)), (label, line)
    assert f"| {sim[1].avg_node_w:,.0f} W |" in table
    assert re.search(rf"\| {min(r['train_node_w'] for r in rows):,.0f}-"
                     rf"{max(r['train_node_w'] for r in rows):,.0f} W \|", table)


def test_the_whole_run_is_its_logged_steps_and_the_scenarios_evaluations_written_out():
    """result_8: 384 steps (its log), evaluations at 192, 240, ..., 384 (5, as logged):
    seconds 384 x step + 5 x evaluation; node energy (384 x step x node W + 5 x evaluation x
    its node W) x 8 nodes / 3.6e6."""
    setup, rows, sim, _ = ve.evaluate()
    if sim is None:
        pytest.skip("the LoRA scenario is not shipped in this build")
    (m, e, ev), phases = sim, ve.run_phases()
    for r in rows:
        ph = phases[r["run"]]
        assert r["evaluations"] == ph["evaluations"] == 1 + (ph["steps"] - 192) // 48
    r = next(r for r in rows if r["run"] == "result_8")
    seconds = 384 * m.iteration_time_s + 5 * ev.time_s
    kwh = (384 * m.iteration_time_s * e.avg_node_w + 5 * ev.time_s * ev.avg_node_w) * 8 / 3.6e6
    assert r["simulated_s"] == pytest.approx(seconds, abs=0.01)
    assert r["simulated_kwh"] == pytest.approx(kwh, abs=1e-4)
    assert r["simulated_node_w"] == pytest.approx(kwh * 3.6e6 / 8 / seconds, abs=0.1)


def test_validate_all_runs_the_energy_suite_into_its_folder(tmp_path):
    """The energy runner of `validate all`: 4 gated cases a run (whole-run energy; steady
    power, step, energy), its report written into the folder given, not validation/."""
    from simulator.validation.suite.runners import RUNNERS
    before = (ve.ROOT / "results.csv").read_bytes()
    cases, report = RUNNERS["energy"](1, tmp_path)
    assert report == tmp_path / "report.md" and (tmp_path / "results.csv").is_file()
    assert (ve.ROOT / "results.csv").read_bytes() == before
    if not any(c["ok"] is not None for c in cases):
        pytest.skip("the LoRA scenario is not shipped in this build")
    assert len(cases) == 40 and {c["case"].rsplit("/", 1)[-1] for c in cases} >= {
        "train_power", "train_step", "train_energy", "result_0"}
    row = next(c for c in cases if c["case"] == "energy/mlperf_lora_h100/result_0/train_step")
    assert row["what"] == "steady training step time" and row["bound"] == "<= 10%"
    assert row["error"] == pytest.approx(float(row["result"].rstrip("%")) / 100)


def test_the_evaluation_checks_on_other_runs_are_what_the_docs_quote():
    """The evaluation pass against NVIDIA's one- and eight-node runs and the power runs
    (mlperf_v41_intervals.csv; reported, not gated): the docs' table and the numbers around
    it are the command's."""
    from pathlib import Path
    import csv
    setup, rows, sim, _ = ve.evaluate()
    if sim is None:
        pytest.skip("the LoRA scenario is not shipped in this build")
    checks = {c["system"]: c for c in ve.interval_checks(setup)}
    doc = Path(__file__).resolve().parents[1].joinpath("docs", "energy.md").read_text()
    one, eight, dell = (checks[k] for k in ("eos_ngc24.09_nemo", "eos_n8_ngc24.09_nemo",
                                            "8xXE9680x8H100-SXM-80GB-POWER"))
    for label, c in (("NVIDIA 1 x DGX H100 (TP4, 4 micro-batches)", one),
                     ("NVIDIA 8 x DGX H100 (TP4 x CP2)", eight),
                     ("Dell 8 x XE9680 (the power runs)", dell)):
        assert (f"| {label} | {c['eval_s']:.2f} s | {c['simulated_eval_s']:.2f} s | "
                f"{c['eval_error']:+.1%} |") in doc, label
    assert f"only {one['eval_s'] / eight['eval_s']:.1f} times faster" in doc
    # per sample a rank evaluates: one node 4 a batch, eight nodes 1; 22 batches each
    per_sample = (one["eval_s"] / 88, eight["eval_s"] / 22, dell["eval_s"] / 22)
    from simulator.evaluation import evaluation_pass
    from simulator.scenario import load_scenario
    ev1 = evaluation_pass(load_scenario(setup["scenario"], list(
        setup["evaluation_checks"]["eos_ngc24.09_nemo"])), "one node")
    assert (f"{one['eval_s']:.2f} s / (22 batches x 4 samples) = {per_sample[0]:.2f} s, "
            f"{eight['eval_s']:.2f}-{dell['eval_s']:.2f} s / 22 = {per_sample[1]:.2f}-"
            f"{per_sample[2]:.2f} s") in " ".join(doc.split())
    assert (f"{sim[2].batch_s:.2f} s against {ev1.batch_s:.2f} / 4 = {ev1.batch_s / 4:.2f} s"
            ) in " ".join(doc.split())
    # the pace a batch (one sample a rank) of the evaluation_pace groups, over the loader's
    # one measurement (tests/test_energy_pace.py writes the lines out)
    from simulator.validation.energy_pace import pace_rows
    paces = [r["pace_s"] for r in pace_rows(setup["evaluation_pace"], list(csv.DictReader(
        open(ve.ROOT / ve.INTERVALS, newline=""))), ve._global_batches(ve.ROOT), 173, sim[2])]
    ratio = [p / sim[2].loader_s for p in paces]
    assert sim[2].loader_s == pytest.approx(0.1806)
    assert (f"host work of {paces[0]:.2f}-{paces[1]:.2f} s a sample: the validation loader's "
            f"dense 8,192 x 8,192 mask collate, modelled, at {ratio[0]:.1f}-{ratio[1]:.1f} "
            f"times") in " ".join(doc.split())
    assert (f"NVIDIA's\n  eight-node runs {eight['block0_extra_s']:.1f} s and "
            f"{eight['first_eval_s']:.1f} s, Dell's power runs {dell['block0_extra_s']:.1f} s "
            f"and {dell['first_eval_s']:.1f} s") in doc
    ev = sim[2]
    later = sorted(r["eval_s"] for r in rows)
    assert (f"({later[0]:.1f}-{later[-1]:.1f} s against {ev.time_s:.2f} s,\n  "
            f"{later[0] / ev.batches:.2f}-{later[-1] / ev.batches:.2f} s a batch against "
            f"{ev.batch_s:.2f} s)") in doc
    with open(ve.ROOT / ve.PHASES, newline="") as f:
        first = [float(r["mean_node_w"]) for r in csv.DictReader(f)
                 if r["interval"] == "eval" and r["index"] == "0"]
    assert f"draws {min(first) / 1e3:.1f}-{max(first) / 1e3:.1f} kW then" in doc


def test_the_gpu_power_check_against_newkirk_is_what_the_docs_say():
    """Newkirk et al.'s 76% of 10.2 kW (7,752 W AC) through the model's supplies, less its
    host and NICs, over 8 GPUs, against the simulated average GPU; half a point of 10.2 kW
    is 0.005 x 10,200 x 0.96 / 8 = 6 W a GPU."""
    from pathlib import Path
    setup, rows, sim, _ = ve.evaluate()
    if sim is None:
        pytest.skip("the LoRA scenario is not shipped in this build")
    e = sim[1]
    p = ve.node_parts(e)
    implied = (0.76 * 10200 * p["psu"] - p["host_w"] - p["nics_w"]) / 8
    doc = Path(__file__).resolve().parents[1].joinpath("docs", "energy.md").read_text()
    side = "under" if implied < e.avg_gpu_w else "over"
    assert (f"it leaves {implied:.0f} W, {abs(1 - implied / e.avg_gpu_w):.1%} {side} the "
            f"model's\n{e.avg_gpu_w:.0f} W average") in doc
    assert f"is {0.005 * 10200 * p['psu'] / 8:.0f} W a GPU" in doc


def test_an_evaluation_check_of_a_system_without_intervals_is_refused_first(capsys, tmp_path,
                                                                            monkeypatch):
    """An `evaluation_checks` system absent from the intervals file was an IndexError
    (the median of no evaluations) after both simulations; now one line naming the field,
    before any simulation."""
    from simulator.cli import main
    root = _root(tmp_path)
    text = (root / "setup.yaml").read_text()
    data = yaml.safe_load(text)
    checks = data["evaluation_checks"]
    checks["nope_system"] = checks.pop(next(iter(checks)))
    (root / "setup.yaml").write_text(yaml.safe_dump(data))

    def no_simulation(*_args, **_kwargs):
        raise AssertionError("simulated before the refusal")
    monkeypatch.setattr(ve, "simulate", no_simulation)
    with pytest.raises(SystemExit) as exc:
        main(["validate", "energy", "--root", str(root), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "evaluation_checks.nope_system: no run of system 'nope_system'" in err, err


def test_report_cells_print_fixed_decimals():
    """kWh to the Wh (4.000, not "4"), watts whole, errors to a tenth of a percent."""
    from simulator.validation.energy import _cell
    assert _cell({"simulated_kwh": 4.0}, "simulated_kwh") == "4.000"
    assert _cell({"capped_kwh": 3.59}, "capped_kwh") == "3.590"
    assert _cell({"simulated_node_w": 7801.96}, "simulated_node_w") == "7,802"
    assert _cell({"energy_error": -0.1448}, "energy_error") == "-14.5%"
    assert _cell({}, "capped_kwh") == "-"
