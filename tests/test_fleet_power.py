"""`clustersim cluster`: the fleet's facility power over time against a site power budget
(docs/energy.md), tested on known phases and against the formula written out."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from simulator.energy.power import GpuPower
from simulator.fleet.simulate import Fleet, FleetPower, FleetResult
from simulator.fleet.summary import over_budget_s, power, summarize
from test_cli import run_main


def _result(samples, end_s):
    return FleetResult(jobs=[], samples=samples, counts={}, n_gpus=16, end_s=end_s, events=0)


def test_power_over_known_phases_is_the_integral_written_out():
    """Three phases: 0-1 h at 100 kW, 1-3 h at 250 kW, 3-4 h at 50 kW; budget 200 kW.
    Mean (100 x 1 + 250 x 2 + 50 x 1) / 4 = 162.5 kW; energy 650 kWh; above the budget the
    2 h of the second phase; peak 250 kW."""
    r = _result([{"time_s": 0.0, "power_kw": 100.0}, {"time_s": 3600.0, "power_kw": 250.0},
                 {"time_s": 10800.0, "power_kw": 50.0}], 14400.0)
    got = power(r, budget_kw=200.0)
    assert got["power_kw_mean"] == pytest.approx((100 * 1 + 250 * 2 + 50 * 1) / 4)
    assert got["energy_kwh"] == pytest.approx(100 * 1 + 250 * 2 + 50 * 1)
    assert got["power_kw_peak"] == 250.0
    assert got["over_budget_s"] == pytest.approx(2 * 3600.0)
    assert got["over_budget_share"] == pytest.approx(0.5)
    assert over_budget_s(r.samples, 40.0, 14400.0) == pytest.approx(14400.0)
    assert "power_budget_kw" not in power(r) and power(_result([], 10.0)) == {}


def test_a_fleet_instant_prices_each_jobs_gpus_by_their_useful_share():
    """16 GPUs on 2 servers; job A (8 GPUs) steps at 1.25x its nominal step (useful 0.8) at
    600 W board power alone; job B (4 GPUs) restores (useful 0); 4 GPUs free at 50 W idle.
    GPU power 8 x (0.8 x 600 + 0.2 x 50) + 4 x 50 + 4 x 50; two servers up at 1,000 W host
    and 100 W NICs, 0.9 supplies, 500 W of switches, PUE 1.2."""
    gpu = GpuPower(idle_w=50.0, gemm_w=700.0, memory_w=500.0, comm_w=300.0)
    fp = FleetPower(gpu, host_w=1000.0, nics_w=100.0, switches_w=500.0, psu=0.9, pue=1.2)
    a = SimpleNamespace(gpus=8, nominal_s=1.0, step_s=1.25, save_factor=1.0, overhead_s=0.0,
                        board_w=600.0)
    b = SimpleNamespace(gpus=4, nominal_s=1.0, step_s=1.0, save_factor=1.0, overhead_s=30.0,
                        board_w=600.0)
    fleet = SimpleNamespace(power=fp, n_gpus=16, running=[a, b],
                            layout=SimpleNamespace(gpus=((0,) * 8, (1,) * 8)), down={})
    gpu_w = 8 * (0.8 * 600 + 0.2 * 50) + 4 * 50 + 4 * 50
    expected = ((gpu_w + 2 * (1000 + 100)) / 0.9 + 500) * 1.2
    assert Fleet._power_w(fleet, busy=12, down=0) == pytest.approx(expected)
    fleet.down, fleet.running = {1: 1}, [a]              # server 1 failed: it draws nothing
    gpu_w = 8 * (0.8 * 600 + 0.2 * 50)
    assert Fleet._power_w(fleet, busy=8, down=8) == pytest.approx(
        ((gpu_w + 1 * 1100) / 0.9 + 500) * 1.2)


def test_the_cluster_command_reports_power_against_the_budget(capsys, tmp_path):
    code, out, err = run_main(capsys, "cluster", "llm-oversubscribed", "--set",
                              "power_budget_kw=300", "--format", "json")
    assert code == 0, err
    s = json.loads(out)["summary"]
    assert s["power_budget_kw"] == 300 and 0 < s["over_budget_s"] < s["makespan_s"]
    assert s["power_kw_mean"] <= s["power_kw_peak"]
    assert s["energy_kwh"] == pytest.approx(s["power_kw_mean"] * s["makespan_s"] / 3600)
    code, out, err = run_main(capsys, "cluster", "llm-oversubscribed", "--set",
                              "power_budget_kw=300", "--out", str(tmp_path / "o"))
    assert code == 0 and "power_budget" in out and (tmp_path / "o" / "power.png").is_file()
    import pandas as pd
    fleet = pd.read_csv(tmp_path / "o" / "fleet.csv")
    assert "power_kw" in fleet and fleet.power_kw.min() > 0
    from simulator.errors import ConfigError
    from simulator.fleet.mix import load_mix
    for bad in ("-5", "0", "inf"):
        with pytest.raises(ConfigError, match="power_budget_kw"):
            load_mix("llm-oversubscribed", [f"power_budget_kw={bad}"])


def test_summarize_without_power_data_has_no_power_keys():
    r = _result([{"time_s": 0.0, "busy_gpus": 0, "useful_gpus": 0, "queued": 0}], 10.0)
    r.jobs = []
    assert "power_kw_mean" not in summarize(r)
