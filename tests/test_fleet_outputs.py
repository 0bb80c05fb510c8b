"""The fleet's answer (simulator/fleet/summary.py, outputs.py, the `cluster` command):
time-weighted utilisation by the arithmetic, and the files of --out."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest

from simulator.cli import main
from simulator.fleet.simulate import Fleet, JobSpec
from simulator.fleet.summary import comparison, decision, summarize, time_weighted
from test_fleet_scheduler import LAYOUT, FixedSteps


def test_utilisation_is_time_weighted():
    # 32 GPUs. A (8 GPUs) runs 0-100, B (16 GPUs) 50-150, C (8 GPUs, checkpoints costing
    # save/interval = 1/4 of each step) 100-150 on 40 s of steps: 8, 24, then 24 GPUs held
    # over [0, 50), [50, 100), [100, 150): (8*50 + 24*50 + 24*50) / 150 = 18.67 of 32;
    # C does useful work on 8 / (1 + 1/4) = 6.4 of its 8 GPUs.
    work = SimpleNamespace(name="stub")
    specs = [JobSpec("A", 0.0, work, 8, duration_s=100.0),
             JobSpec("B", 50.0, work, 16, duration_s=100.0),
             JobSpec("C", 100.0, work, 8, duration_s=40.0, checkpoint_s=40.0, save_s=10.0)]
    result = Fleet(LAYOUT, specs, "fifo", "packed", step_times=FixedSteps(LAYOUT)).run()
    s = summarize(result)
    assert result.end_s == 150.0
    assert s["allocated"] == pytest.approx((8 * 50 + 24 * 50 + 24 * 50) / 150 / 32)
    assert s["useful"] == pytest.approx((8 * 50 + 24 * 50 + (16 + 6.4) * 50) / 150 / 32)
    # while jobs arrive (to C's arrival at 100): (8*50 + 24*50) / 100 of 32
    assert s["allocated_arrivals"] == pytest.approx((8 * 50 + 24 * 50) / 100 / 32)
    assert time_weighted(result.samples, "running", 150.0) == pytest.approx(
        (1 * 50 + 2 * 50 + 2 * 50) / 150)
    assert (s["jobs_done"], s["queue_s_median"], s["slowdown_median"]) == (3, 0.0, 1.0)
    slower = {**s, "slowdown_median": 1.07, "queue_s_mean": s["queue_s_mean"] + 2400}
    assert comparison(s, slower, "2:1").startswith(
        "With 2:1, the median job runs 7.0% longer than alone instead of 0.0% (+7.0 points), "
        "the mean queue time grows by 40.0 min")
    assert "cost_usd" not in s
    priced = summarize(result, usd_per_gpu_hour=2.0)
    # the whole cluster over the run: 32 GPUs x 150 s at 2 USD per GPU-hour, over the
    # useful GPU-hours
    assert priced["cost_usd"] == pytest.approx(32 * 150 / 3600 * 2.0)
    assert priced["usd_per_useful_gpu_hour"] == pytest.approx(
        priced["cost_usd"] / (s["useful"] * 32 * 150 / 3600))
    assert "median job waits 0.0 s" in decision(s, "three jobs")


def test_out_writes_the_tables_the_plots_and_the_report(tmp_path, capsys):
    mix = tmp_path / "two.yaml"
    mix.write_text("name: two\ncluster: {topology: dgx-a100-superpod, nodes: 2}\n"
                   "jobs:\n"
                   "  - {name: a, arrival: 0 s, scenario: quickstart, gpus: 16, steps: 5}\n"
                   "  - {name: b, arrival: 1 s, scenario: quickstart, gpus: 8, steps: 5}\n")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        main(["cluster", str(mix), "--out", str(out), "-q", "--against", "scheduler=fifo"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for name in ("jobs.csv", "fleet.csv", "summary.json", "utilisation.png", "jct_cdf.png",
                 "report.html"):
        assert (out / name).stat().st_size > 0, name
    jobs = pd.read_csv(out / "jobs.csv")
    a, b = jobs.iloc[0], jobs.iloc[1]
    assert list(jobs.job) == ["a", "b"] and a.queue_s == 0 and b.start_s == a.end_s
    summary = json.loads((out / "summary.json").read_text())
    sentence = summary["answer"][0]
    assert sentence in (out / "report.html").read_text() and f"# {sentence}" in text
    assert summary["answer"][1].startswith("With scheduler=fifo")


def test_a_mix_with_failures_gives_the_same_bytes_twice(tmp_path):
    from simulator.fleet.build import build_fleet
    from simulator.fleet.mix import load_mix
    mix = tmp_path / "f.yaml"
    mix.write_text("name: f\ncluster: {topology: dgx-a100-superpod, nodes: 4}\nseed: 7\n"
                   "failures: {node: '1 per node-hour', repair: 10 min}\n"
                   "jobs:\n"
                   "  - {arrival: 0 s, scenario: quickstart, gpus: 16, duration: 3 h,\n"
                   "     checkpoint: {interval: 20 min, restore: 1 min}}\n"
                   "  - {arrival: 1 min, scenario: quickstart, gpus: 8, duration: 2 h}\n")
    runs = [pd.DataFrame(build_fleet(*load_mix(mix)).run().jobs) for _ in range(2)]
    assert runs[0].to_csv() == runs[1].to_csv()
    assert runs[0].restarts.sum() > 0           # the failures did hit the jobs
    other = mix.read_text().replace("seed: 7", "seed: 8")
    mix.write_text(other)
    assert pd.DataFrame(build_fleet(*load_mix(mix)).run().jobs).to_csv() != runs[0].to_csv()
