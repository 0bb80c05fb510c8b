"""`clustersim reliability`: the energy of the mean job by where its wall time went, and the
energy lost to failures and restarts, against the integral written out (docs/energy.md)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import yaml

from simulator.energy.model import JobPower, Machine, idle_facility_w
from simulator.energy.power import GpuPower, HostPower, Site
from simulator.reliability.report import energy, energy_lines
from test_cli import run_main


def _study(power, seconds):
    return SimpleNamespace(info=SimpleNamespace(steps=SimpleNamespace(power=power)),
                           summary=SimpleNamespace(seconds=seconds))


def test_energy_lost_is_each_causes_seconds_at_its_power_written_out():
    """Computing (productive 10 h, degraded 0.2 h, recompute 0.5 h) at 1,000 kW; the job down
    or waiting on a save (checkpoint 0.1 h, detection 1 min, waiting 10 min, restart 2 min,
    restore 1 min) at 400 kW; 0.1 USD and 0.5 kg CO2 a kWh."""
    seconds = {"productive": 36000.0, "checkpoint": 360.0, "degraded": 720.0,
               "recompute": 1800.0, "detection": 60.0, "waiting": 600.0, "restart": 120.0,
               "restore": 60.0}
    e = energy(_study(JobPower(busy_w=1e6, idle_w=4e5, usd_per_kwh=0.1,
                               carbon_kg_per_kwh=0.5), seconds))
    busy_lost = (720 + 1800) * 1e6 / 3.6e6                       # 700 kWh
    idle_lost = (360 + 60 + 600 + 120 + 60) * 4e5 / 3.6e6         # 133.3 kWh
    assert e["kwh"]["recompute"] == pytest.approx(1800 * 1e6 / 3.6e6)
    assert e["kwh"]["waiting"] == pytest.approx(600 * 4e5 / 3.6e6)
    assert e["kwh_lost"] == pytest.approx(busy_lost + idle_lost)
    assert e["kwh_per_job"] == pytest.approx(36000 * 1e6 / 3.6e6 + busy_lost + idle_lost)
    assert e["usd_lost"] == pytest.approx((busy_lost + idle_lost) * 0.1)
    assert e["co2_kg_lost"] == pytest.approx((busy_lost + idle_lost) * 0.5)
    assert e["share_lost"] == pytest.approx(e["kwh_lost"] / e["kwh_per_job"])
    assert energy(_study(None, seconds)) is None
    assert energy_lines(_study(None, seconds)) == []


def test_a_job_at_rest_draws_idle_gpus_hosts_nics_and_its_switches():
    """2 servers of 4 GPUs at 50 W idle, 1,000 W host, 2 NIC ports of 25 W, 0.8 supplies,
    1.5 switches of 1,200 W, PUE 1.5: ((8 x 50 + 2 x (1,000 + 2 x 25)) / 0.8 + 1,800) x 1.5."""
    machine = Machine(HostPower(host_w=1000.0, gpus=4, psu_efficiency=0.8), servers=2,
                      nics_per_server=2, nic_w=25.0, switches=1.5, switch_w=1200.0)
    gpu = GpuPower(idle_w=50.0, gemm_w=500.0, memory_w=300.0, comm_w=200.0)
    assert idle_facility_w(8, gpu, machine, Site(1.5, 0.0, 0.0)) == pytest.approx(
        ((8 * 50 + 2 * (1000 + 2 * 25)) / 0.8 + 1.5 * 1200) * 1.5)


SCENARIO = {
    "name": "rel-energy", "model": "llama-2-7b",
    "cluster": {"topology": "dgx-h100"},
    "strategy": {"name": "fsdp"},
    "training": {"micro_batch": 1, "seq_len": 2048},
    "simulation": {"variability": "none"},
    "reliability": {
        "job": {"duration": "2 d"},
        "failures": {"software": {"rate": "3 per day"}},
        "checkpoint": {"interval": "30 min"},
        "search": {"points": 0},
    },
}


def _answer(capsys, tmp_path, scenario: dict):
    """(the scenario's file, `reliability --format json`'s answer on it, 4 trials)."""
    path = tmp_path / "rel.yaml"
    path.write_text(yaml.safe_dump(scenario))
    code, out, err = run_main(capsys, "reliability", str(path), "--trials", "4", "--workers",
                              "1", "--format", "json")
    assert code == 0, err
    return path, json.loads(out)


def test_the_reliability_answer_prices_each_cause_at_the_simulated_steps_power(capsys,
                                                                               tmp_path):
    """A simulated step: busy power is that step's facility energy / its time (the same
    scenario through the step simulation), idle power every GPU idle; each cause's kWh is
    its seconds at its power; the table says it. With the iteration time given, no energy."""
    from simulator.energy.timeline import energy_of, job_power
    from simulator.pipeline import build_setup, run_setup
    from simulator.scenario import load_scenario
    path, d = _answer(capsys, tmp_path, SCENARIO)
    e = d["energy"]
    res = run_setup(build_setup(load_scenario(str(path), []), str(path)))
    step = energy_of(res)
    assert e["busy_w"] == pytest.approx(step.facility_j / step.step_time_s)
    assert e["idle_w"] == pytest.approx(job_power(res).idle_w) and e["idle_w"] < e["busy_w"]
    for cause, secs in d["seconds_lost"].items():
        w = e["busy_w"] if cause in ("degraded", "recompute") else e["idle_w"]
        assert e["kwh"][cause] == pytest.approx(secs * w / 3.6e6), cause
    assert e["kwh_lost"] > 0 and e["kwh"]["recompute"] > 0
    code, out, _ = run_main(capsys, "reliability", str(path), "--trials", "4", "--workers", "1")
    assert "energy lost per cause" in out and f"{e['kwh_lost']:,.1f} kWh" in out
    code, _, err = run_main(capsys, "reliability", str(path), "--trials", "4", "--workers",
                            "1", "--out", str(tmp_path / "out"))
    html = (tmp_path / "out" / "report.html").read_text()
    assert code == 0 and f"Failures and restarts cost {e['kwh_lost']:,.0f} kWh a job" in html
    assert "Energy lost per cause (per job, facility)" in html
    given = dict(SCENARIO, reliability={**SCENARIO["reliability"],
                                        "job": {"duration": "2 d", "iteration_time": "5 s"}})
    path.write_text(yaml.safe_dump(given))
    code, out, _ = run_main(capsys, "reliability", str(path), "--trials", "2", "--workers", "1",
                            "--format", "json")
    assert code == 0 and json.loads(out)["energy"] is None


def test_the_reliability_answer_reports_the_mean_jobs_evaluations_written_out(capsys,
                                                                             tmp_path):
    """With `training.evaluation` (every 500 steps, 64 samples): the mean job's productive
    seconds / the step are its steps; they hold 1 + (steps - 500) // 500 evaluations, each
    the simulated evaluation pass's seconds and kWh; the table says it."""
    path, d = _answer(capsys, tmp_path, dict(SCENARIO, training={
        **SCENARIO["training"], "evaluation": {"every_steps": 500, "samples": 64}}))
    ev = d["evaluation"]
    step = d["iteration_time_s"]["healthy"]
    productive = d["wall_s"]["mean"] - sum(d["seconds_lost"].values())
    assert ev["steps"] == int(productive / step) or abs(ev["steps"] - productive / step) < 1
    assert ev["evaluations"] == 1 + (ev["steps"] - 500) // 500
    assert ev["seconds"] == pytest.approx(ev["evaluations"] * ev["pass"]["time_s"])
    assert ev["kwh"] == pytest.approx(ev["evaluations"] * ev["pass"]["kwh"])
    code, out, _ = run_main(capsys, "reliability", str(path), "--trials", "4", "--workers", "1")
    assert f"evaluation                  {ev['evaluations']:,} per job" in out
    path.write_text(yaml.safe_dump(SCENARIO))
    code, out, _ = run_main(capsys, "reliability", str(path), "--trials", "2", "--workers", "1",
                            "--format", "json")
    assert code == 0 and json.loads(out)["evaluation"] is None
