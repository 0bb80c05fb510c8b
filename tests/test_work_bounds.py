"""Work bounds (issue 42): ``plan``, ``reliability`` and ``study`` count their work before
doing any and refuse past a limit in one line naming the option that raises it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.planner import Limits, candidates
from simulator.planner import work
from simulator.strategies.parallel import ParallelPlan
from simulator.planner.space import Candidate
from test_cli import run_main

REPO = Path(__file__).resolve().parents[1]
LLAMA7 = load_model("llama-2-7b")
# the batch plan took by default before it took 4M tokens a step (micro-batch 2 x 131,072
# GPUs), the case issue 42 reported
OLD_BATCH = ["--global-batch", str(2 * 131072)]
MAX_OPTIONS = ["--max-tp", "64", "--max-pp", "128", "--max-cp", "32",
               "--max-micro-batch", "1024", "--replay", "100"]


def one_line_refusal(code: int, out: str, err: str, *words: str) -> str:
    assert code == 2, (out, err)
    assert out == ""
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line, err
    assert line.startswith("clustersim: error:"), line
    for word in words:
        assert word in line, line
    return line


# ------------------------------------------------------------------------------- plan
def test_plan_work_is_the_documented_sum():
    """Units at once: candidates x (1 + gpus // 16,384) + distinct schedules' slots / 100 +
    replays x gpus / 10; each replay's ops / 47 are added once its trace is built (below)."""
    pp2 = ParallelPlan(pp=2, tp=1, cp=1, dp_replicate=1, dp_shard=4, dp_mode="zero2")
    pp4 = ParallelPlan(pp=4, tp=1, cp=1, dp_replicate=1, dp_shard=2, dp_mode="zero2",
                       schedule="interleaved_1f1b", vp=2)
    flat = ParallelPlan(pp=1, tp=1, cp=1, dp_replicate=1, dp_shard=8, dp_mode="fsdp")
    cands = [Candidate(pp2, 1, 400, "none"), Candidate(pp2, 1, 400, "full"),   # one schedule
             Candidate(pp4, 1, 800, "none"), Candidate(flat, 1, 2, "none")]
    w = work.count(cands, replay=3, gpus=40_000)
    assert (w.candidates, w.replays, w.gpus) == (4, 3, 40_000)
    assert w.schedule_slots == 2 * 1 * 400 + 4 * 2 * 800
    assert w.estimate_units == 4 * (1 + 2) + (800 + 6400) // 100
    assert w.units == w.estimate_units + 3 * 4000
    replays = work.Replays(w, (120_000, 7), 3)
    assert replays.units == w.estimate_units + (120_000 // 47 + 4000) + (7 // 47 + 4000)


def test_plan_work_counts_the_real_candidates():
    cands = list(candidates(LLAMA7, 8, 16, 512, Limits(), model_parallel=True))
    w = work.count(cands, replay=100, gpus=8)
    assert w.candidates == len(cands) and w.replays == min(100, len(cands))
    work.check(w, None)                              # the README's example fits


def test_plan_every_max_option_on_16384_nodes_is_refused_promptly(capsys):
    t0 = time.perf_counter()
    code, out, err = run_main(capsys, "plan", "llama2-7b-fsdp-128gpu",
                              "--set", "cluster.nodes=16384", *MAX_OPTIONS, *OLD_BATCH)
    line = one_line_refusal(code, out, err, "--max-work", "119,919 candidates",
                            "100 replays on 131,072 GPUs",
                            "100,000")
    assert time.perf_counter() - t0 < 60, line          # the graph of 16,384 servers: ~3 s


def test_plan_default_options_on_16384_nodes_are_refused_not_run_for_minutes(capsys):
    """The refusal docs/plan.md quotes, word for word, from the command it names."""
    code, out, err = run_main(capsys, "plan", "llama2-7b-fsdp-128gpu",
                              "--set", "cluster.nodes=16384", *OLD_BATCH)
    line = one_line_refusal(code, out, err, "--max-work", "28,242 candidates")
    page = (REPO / "docs" / "plan.md").read_text()
    assert f"--set cluster.nodes=16384 {' '.join(OLD_BATCH)}`" in page
    quoted = page.split("clustersim: error: --max-work: this search", 1)[1].split("```")[0]
    assert line == "clustersim: error: --max-work: this search " + " ".join(quoted.split())


def test_plan_huge_global_batch_is_refused(capsys):
    code, out, err = run_main(capsys, "plan", "quickstart", "--global-batch", str(10 ** 21))
    one_line_refusal(code, out, err, "--global-batch", f"must be 1 to {2 ** 40} samples")
    # inside that range, the work the pipeline candidates' schedules would take
    code, out, err = run_main(capsys, "plan", "quickstart", "--global-batch", str(2 ** 22))
    one_line_refusal(code, out, err, "--max-work", "pipeline schedule slots", "--global-batch")
    code, out, err = run_main(capsys, "plan", "quickstart", "--global-batch", "1e21")
    one_line_refusal(code, out, err, "--global-batch", "not a valid integer")


def test_plan_max_work_lifts_and_lowers_the_bound(capsys):
    args = ["plan", "quickstart", "--set", "training.seq_len=512", "--global-batch", "16",
            "--max-tp", "2", "--max-pp", "2", "--max-cp", "1", "--max-micro-batch", "2",
            "--replay", "1", "-q"]
    code, out, err = run_main(capsys, *args, "--max-work", "10")
    one_line_refusal(code, out, err, "--max-work", "more than 10 ")
    code, out, err = run_main(capsys, *args, "--max-work", "1000000")
    assert code == 0, err


SMALL_PLAN = ["plan", "quickstart", "--set", "training.seq_len=512", "--global-batch", "16",
              "--max-tp", "2", "--max-pp", "2", "--max-cp", "1", "--max-micro-batch", "2",
              "--replay", "2", "-q"]


def replayed_setups() -> tuple[list, work.Replays]:
    """The setups SMALL_PLAN's search replays, built as it builds them, and its count."""
    import importlib
    from simulator.scenario import load_scenario
    search = importlib.import_module("simulator.planner.search")
    scn = load_scenario("quickstart", ["training.seq_len=512"])
    setups, counted = [], {}
    real_prepared, real_check, real_run = search._prepared, work.check_replays, search.run_setup

    def keep(row, scn, cluster, source):
        setups.append(real_prepared(row, scn, cluster, source))
        return setups[-1]

    def seen(replays, most):
        counted["replays"] = replays

    def stop(setup):
        raise ConfigError("stop before the first replay")
    search._prepared, work.check_replays, search.run_setup = keep, seen, stop
    try:
        search.search(scn, 16, replay=2, limits=Limits(max_tp=2, max_pp=2, max_cp=1,
                                                       max_micro_batch=2))
    finally:
        search._prepared, work.check_replays, search.run_setup = real_prepared, real_check, \
            real_run
    return setups, counted["replays"]


def test_plan_replays_are_counted_from_the_traces_they_run():
    """Each replay's ops are its trace's: every rank class's ops, counted here op by op."""
    setups, replays = replayed_setups()
    assert len(setups) == 2 and all(setups)
    by_hand = [sum(1 for cls in s.trace.classes for _op in cls.ops) if s.accum is None
               else sum(1 for t in s.accum.traces for cls in t.classes for _op in cls.ops)
               for s in setups]
    assert replays.ops == tuple(by_hand)
    assert replays.units == replays.before.estimate_units + sum(n // 47 for n in by_hand)
    assert replays.before.units == replays.before.estimate_units == \
        replays.before.candidates * 1 + replays.before.schedule_slots // 100


def test_an_extrapolated_step_counts_only_its_replayed_micro_steps():
    from simulator.pipeline import build_setup, replayed_ops
    from simulator.scenario import load_scenario
    from simulator.accum import THRESHOLD
    sets = ["model=gpt2-small", "training.seq_len=1024", "cluster.gpus=2",
            f"training.grad_accum={THRESHOLD + 1}"]
    short = build_setup(load_scenario("quickstart", sets))
    full = build_setup(load_scenario("quickstart", [*sets, "simulation.full_replay=true"]))
    assert short.accum is not None and full.accum is None
    per_trace = [sum(len(c.ops) for c in t.classes) for t in short.accum.traces]
    assert replayed_ops(short) == sum(per_trace)
    assert replayed_ops(full) == sum(len(c.ops) for c in full.trace.classes)
    assert replayed_ops(short) < replayed_ops(full)


def test_plan_replays_past_the_bound_are_refused_before_any_runs(capsys, monkeypatch):
    import importlib
    search = importlib.import_module("simulator.planner.search")
    _, replays = replayed_setups()
    monkeypatch.setattr(search, "run_setup", lambda *a: pytest.fail("a replay ran"))
    most = replays.units - 1
    assert most >= replays.before.units                 # the estimates alone fit
    code, out, err = run_main(capsys, *SMALL_PLAN, "--max-work", str(most))
    one_line_refusal(code, out, err, "--max-work", f"2 replays run {sum(replays.ops):,} ops",
                     f"about {replays.units:,} units", f"more than {most:,} ")


def test_plan_replay_refusal_docs_quote_is_what_the_command_says(capsys):
    """docs/plan.md quotes the refusal of the counted replays from the command it names."""
    page = (REPO / "docs" / "plan.md").read_text()
    command = page.split("ops it counted (`clustersim ", 1)[1].split("`", 1)[0].split()
    code, out, err = run_main(capsys, *command, "-q")
    line = one_line_refusal(code, out, err, "--max-work", "replays run")
    quoted = page.split("ops it counted (`", 1)[1].split("```")[1]
    assert line == " ".join(quoted.split())


# ------------------------------------------------------------------------ reliability
FAST = ["--set", "reliability.job.iteration_time=10 s", "--workers", "1", "-q"]


def rel(capsys, *args: str):
    return run_main(capsys, "reliability", *FAST, *args)


def test_reliability_events_are_the_documented_product():
    from simulator.reliability import work as rwork
    from simulator.reliability.plan import build_plan
    from simulator.scenario import load_scenario, resolve_scenario
    path = resolve_scenario("reliability-1024gpu")
    scn = load_scenario(path, ["reliability.job.iteration_time=10 s"])
    plan, _ = build_plan(scn, str(path))
    rate = sum(c.rate_per_s for c in plan.classes) + plan.stragglers[0]
    arrivals = rate * 30 * 86400.0                      # the scenario's 30-day job
    assert rwork.arrivals_per_trial(plan) == pytest.approx(arrivals)
    per_trial = 1 + 3 * arrivals
    assert rwork.events(arrivals, 200, 13, 200) == pytest.approx(per_trial * (200 + 16 * 200))
    assert rwork.events(arrivals, 200, 0, 200) == pytest.approx(per_trial * 200)
    rwork.check(arrivals, 200, 13, 200)                 # the shipped study fits
    seen = []
    build_plan(scn, str(path), before_steps=seen.append)
    assert seen == [pytest.approx(arrivals)]            # known before the step simulations


def test_reliability_refuses_before_the_step_simulations(capsys, monkeypatch):
    """A duration job's events are counted before its (long) step simulations."""
    from simulator.reliability import plan as rplan

    def no_steps(*_args, **_kwargs):
        raise AssertionError("the step simulations ran before the refusal")
    monkeypatch.setattr(rplan, "step_table", no_steps)
    code, out, err = run_main(capsys, "reliability", "--trials", "1000000", "-q")
    one_line_refusal(code, out, err, "--max-events", "x 1,000,000 trials")


@pytest.mark.parametrize("sets, words", [
    (["reliability.failures.gpu.rate=1e300 per 1000 gpu-days"], ["3.", "e+30"]),
    (["reliability.job.duration=1e30 d"], ["e+"]),
    (["reliability.job={iterations: 1000000000000000}"], ["failures and stragglers"]),
    (["reliability.search.trials=1000000"], ["1,000,000 for each of up to 16"]),
])
def test_reliability_magnitudes_are_refused_before_any_trial(capsys, sets, words):
    args = [a for s in sets for a in ("--set", s)]
    t0 = time.perf_counter()
    code, out, err = rel(capsys, *args, "--trials", "2")
    one_line_refusal(code, out, err, "--max-events", "5,000,000", *words)
    assert time.perf_counter() - t0 < 30


def test_reliability_its_own_maximum_trials_is_refused(capsys):
    code, out, err = rel(capsys, "--trials", "1000000")
    one_line_refusal(code, out, err, "--max-events", "x 1,000,000 trials")


def test_reliability_max_events_lifts_and_lowers_the_bound(capsys):
    code, out, err = rel(capsys, "--trials", "2", "--max-events", "100")
    one_line_refusal(code, out, err, "--max-events", "more than 100 ")
    code, out, err = rel(capsys, "--trials", "2", "--set", "reliability.search.points=0",
                         "--max-events", "1000")
    assert code == 0, err


def test_reliability_billion_hour_repair_without_spares_ends(capsys):
    """Waiting 10^9 h for a repair: the 30-day job ends at its budget; an iteration job
    at its cap (50 x its length + 30 days); neither loops per failure of the wait."""
    t0 = time.perf_counter()
    for job in ("reliability.job.duration=30 d", "reliability.job={iterations: 200000}"):
        code, out, err = rel(capsys, "--trials", "5", "--set", "reliability.search.points=3",
                             "--set", "reliability.failures.node.repair=1e9 h",
                             "--set", "reliability.restart.spare_nodes=0", "--set", job)
        assert code == 0, err
        assert "ETTR" in out
    assert time.perf_counter() - t0 < 60


@pytest.mark.parametrize("key, value, words", [
    ("reliability.failures.node.repair", "1e400 h", "past the largest number a float"),
    ("reliability.failures.gpu.rate", "1e400 per 1000 gpu-days", "past the largest number"),
    ("reliability.job", "{iterations: 1" + "0" * 400 + "}", "less than or equal to"),
    ("reliability.checkpoint", "{every_iterations: 1" + "0" * 400 + "}", "less than or equal"),
    ("reliability.checkpoint.replicas", "1" + "0" * 40, "less than or equal to"),
])
def test_reliability_numbers_past_a_float_are_refused_by_name(capsys, key, value, words):
    code, out, err = rel(capsys, "--set", f"{key}={value}", "--trials", "2")
    one_line_refusal(code, out, err, key, words)


# ------------------------------------------------------------------------------ study
def write_study(tmp_path, command="run", options=None, **axes):
    import yaml
    spec = {"name": "w", "command": command, "base": {"scenario": "quickstart"},
            "axes": {"grid": axes}}
    if options:
        spec["options"] = options
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_study_point_units_are_the_documented_prices():
    from simulator.study import work as swork
    replay = 500 + 16384 * 8 // 10                      # a replay on 16,384 servers of 8
    assert swork.point_units("run", {}, {"cluster.nodes": 16384}) == replay
    assert swork.point_units("run", {}, {"training.seq_len": 512}) == 500
    cmp = {"strategies": ["fsdp-full", "ddp"], "scaling": True, "capacity": True}
    assert swork.point_units("compare", cmp, {}) == (2 * 2 + 2 * 7) * 500
    assert swork.point_units("reliability", {"trials": 100, "search": True}, {}) == \
        500 + 100 * 4 * 17


def test_study_of_100000_points_is_refused_before_they_are_resolved(capsys, tmp_path):
    path = write_study(tmp_path, **{"training.seq_len": [256 * (i + 1) for i in range(100)],
                                    "simulation.seed": list(range(1000))})
    t0 = time.perf_counter()
    code, out, err = run_main(capsys, "study", str(path), "--out", str(tmp_path / "o"))
    one_line_refusal(code, out, err, str(path), "axes", "50,000,000 units",
                     "100,000 points of run", "--max-work")
    assert time.perf_counter() - t0 < 30           # resolving them all: ~2 minutes
    assert not (tmp_path / "o").exists()


def test_study_nodes_axis_counts_the_gpus_and_max_work_lifts_it(capsys, tmp_path):
    path = write_study(tmp_path, **{"training.seq_len": [512, 1024]})
    code, out, err = run_main(capsys, "study", str(path), "--max-work", "999", "-q")
    one_line_refusal(code, out, err, "1,000 units", "2 points of run", "more than 999 ")
    from simulator.study import work as swork
    from simulator.study.spec import parse_study
    big = parse_study({"name": "n", "base": {"scenario": "llama2-7b-fsdp-128gpu"},
                       "axes": {"grid": {"cluster.nodes": [16384] * 1,
                                         "simulation.seed": list(range(300))}}}, "x.yaml")
    with pytest.raises(ConfigError) as exc:
        swork.check(big, {}, "x.yaml")
    assert "300 points of run" in str(exc.value) and "--max-work" in str(exc.value)
    swork.check(big, {}, "x.yaml", most=300 * (500 + 16384 * 8 // 10))


def test_shipped_studies_fit_the_default_bound():
    from simulator.study import work as swork
    from simulator.study.commands import parse_options
    from simulator.study.spec import parse_study
    from simulator.yamlio import read_yaml
    files = sorted(str(f) for f in (REPO / "scenarios" / "studies").glob("*.yaml"))
    assert files
    for f in files:
        spec = parse_study(read_yaml(f, "study file"), f)
        swork.check(spec, parse_options(spec.command, spec.options, f), f)
