"""Steps extrapolated from a few micro-steps are said so by compare, capacity and study (as
`run` does), capacity probes extrapolate too, and compare does not replay its own step again
for the capacity rung of the same model."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator import pipeline
from simulator.accum import REPLAYED, brief
from simulator.capacity import probe as probe_mod
from simulator.capacity.ladder import build_ladder
from simulator.capacity.probe import Prober, parse_strategy_specs
from simulator.compare import runner as compare_runner
from simulator.compare.options import parse_strategies
from simulator.compare.runner import compare
from simulator.models import load_model
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario
from simulator.study.report import _extrapolated
from simulator.study.runpoint import run_point

SMALL = ["model=gpt2-small", "training.seq_len=1024", "training.micro_batch=1", "cluster.gpus=2"]
# capacity rungs are Llama-2-sized: 2 GPUs and 1,024 tokens keep a replay short
LLAMA = ["training.seq_len=512", "training.micro_batch=1", "cluster.gpus=2"]


def _count_replays(monkeypatch) -> list:
    seen: list = []
    real = pipeline._replayed
    monkeypatch.setattr(pipeline, "_replayed",
                        lambda s, t, *rest: seen.append(t) or real(s, t, *rest))
    return seen


def _rung(name: str):
    return next(r for r in build_ladder("llama", min_seq_len=512) if r.model.name == name)


def test_compare_says_a_row_was_extrapolated_and_an_exact_row_is_unchanged():
    strategies = parse_strategies("fsdp-full")
    big = compare(load_scenario("quickstart", [*SMALL, "training.grad_accum=80"]), strategies,
                  scaling=False, capacity=False)
    row = big.rows[0]
    assert row.extrapolated["grad_accum"] == 80
    assert row.extrapolated["replayed_micro_steps"] == list(REPLAYED)
    assert row.as_dict()["extrapolated"] == row.extrapolated
    assert f"fsdp-full: step {brief(row.extrapolated)}" in big.notes
    small = compare(load_scenario("quickstart", [*SMALL, "training.grad_accum=2"]), strategies,
                    scaling=False, capacity=False)
    assert "extrapolated" not in small.rows[0].as_dict()
    assert not any("extrapolated" in n for n in small.notes)


def test_capacity_probes_extrapolate_with_the_run_commands_numbers(monkeypatch):
    scn = load_scenario("quickstart", [*LLAMA, "training.grad_accum=70"])
    seen = _count_replays(monkeypatch)
    spec, = parse_strategy_specs("fsdp:FULL_SHARD")
    p = Prober(scn, spec).probe(_rung("llama-2-7b"))
    assert len(seen) == len(REPLAYED)       # 4, 5 and 6 micro-steps, not 70
    assert p.extrapolated["grad_accum"] == 70
    assert p.as_dict()["extrapolated"] == p.extrapolated
    run = run_setup(build_setup(scn))       # what `clustersim run` gives for this model
    assert run.extrapolation is not None
    assert (p.iteration_time_s, p.peak_gib, p.mfu) == \
        (run.metrics.iteration_time_s, run.metrics.peak_memory_gib, run.metrics.mfu)


def test_compare_reuses_its_own_step_for_the_capacity_rung_of_the_same_model(monkeypatch):
    scn = load_scenario("quickstart", LLAMA)
    row = compare_runner.Row(parse_strategies("fsdp-full")[0])
    compare_runner._run_row(row, scn, load_model(scn.model), "<test>")
    seen = _count_replays(monkeypatch)
    ran = []
    real = probe_mod.run_setup
    monkeypatch.setattr(probe_mod, "run_setup", lambda s: ran.append(1) or real(s))
    ladder = [_rung("llama-like-0.953b"), _rung("llama-2-7b")]
    compare_runner._capacity_row(row, scn, ladder, "<test>")
    # bisection probes both rungs; only the 1B one is replayed, the 7B rung is the row's
    # own iteration (the same scenario, strategy, cluster and model)
    assert len(ran) == 1 and len(seen) == 1
    assert row.largest_fit["model"] == "llama-2-7b"
    prober = Prober(scn, probe_mod.spec_of(row.alias))
    again = prober.probe(ladder[1])          # replayed on its own: the same verdict
    assert prober.replays == 1
    assert again.fits and not row.metrics.oom
    assert row.largest_fit["peak_memory_gib"] == again.peak_gib == row.metrics.peak_memory_gib


def test_study_rows_and_report_say_extrapolated():
    scn = load_scenario("quickstart", [*SMALL, "training.grad_accum=80"])
    row, = run_point(scn, {"id": "p"})
    done = run_setup(build_setup(scn)).extrapolation
    assert row["extrapolated"] == brief(done.as_dict())
    exact, = run_point(load_scenario("quickstart", SMALL), {"id": "q"})
    assert exact["extrapolated"] == ""
    ok = pd.DataFrame([row, exact])
    line, blank = _extrapolated(ok)
    assert line == f"1 of 2 results are of steps {row['extrapolated']} (column `extrapolated`)."
    assert _extrapolated(pd.DataFrame([exact])) == []


@pytest.mark.parametrize("command", ["run", "compare"])
def test_study_commands_declare_the_column(command):
    from simulator.study.commands import COMMANDS
    assert "extrapolated" in COMMANDS[command].columns


def test_reliability_says_its_step_was_extrapolated(capsys, tmp_path):
    import json

    from test_cli import run_main
    rel = "reliability={job: {duration: 1 d}, failures: {software: {rate: 2 per day}}, " \
          "search: {points: 0}}"
    args = ["reliability", "quickstart", "--trials", "2", "--workers", "1"]
    for a in [*SMALL, rel, "training.grad_accum=80"]:
        args += ["--set", a]
    code, out, err = run_main(capsys, *args, "--format", "json")
    assert code == 0, err
    done = json.loads(out)["step_extrapolated"]
    assert done["grad_accum"] == 80
    code, text, err = run_main(capsys, *args)
    assert f"the steps {brief(done)}" in text
    args[-1] = "training.grad_accum=2"
    code, out, err = run_main(capsys, *args, "--format", "json")
    assert code == 0 and "step_extrapolated" not in json.loads(out)
