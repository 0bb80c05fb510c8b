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
    got = CliRunner().invoke(ve.validate_energy, ["--root", str(root)])
    assert got.exit_code == 0, got.output
    assert "0 of 10 runs simulated (pending: needs the LoRA scenario)" in got.output
    assert (root / "report.md").read_text().count(ve.PENDING) == 11   # a line + 10 rows


def test_a_run_that_simulates_has_its_energy_per_run_written_out(tmp_path):
    root = _root(tmp_path, scenario="quickstart", sets=["cluster.topology=dgx-h100",
                                                        "simulation.variability=none"])
    setup, runs, step = ve.load(root)
    sim = ve.simulate(setup)
    capped = ve.simulate(setup, setup["power_cap_w"])
    rows = ve.compare(setup, runs, step, sim, capped)
    (m, e), (mc, ec) = sim, capped
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
