"""Pipeline steps of many micro-batches replayed a few times and extrapolated
(simulator/accum.py): against the full replay for every schedule a scenario can name
(uneven stages, tensor and data parallelism with the distributed optimizer's overlapped
reduce-scatter, MoE), what stays exact (GPipe, short steps), the fallback when the replays
do not repeat, and the bounds on micro-batch counts that refuse a typo before any work."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from simulator import accum
from simulator.errors import ConfigError
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import MAX_GRAD_ACCUM, load_scenario, resolve_scenario
from simulator.strategies.parallel.memory import STEADY
from simulator.strategies.parallel.schedules import peak_in_flight, schedule
from test_cli import run_main

# the largest |extrapolated - full| of a time, relative to the full step, measured on these
# cases (maxdiff below, PERIOD_RTOL and BREAKDOWN_RTOL in accum.py):
# issue 43 asks for 0.1%
RTOL = 1e-3
TIMES = ("iteration_time_s", "compute_s", "comm_s", "exposed_comm_s", "wait_s",
         "memory_wait_s")


def torchtitan(schedule_name: str, pp: int, m: int, gpus: int = 8, *extra: str):
    """Llama-2-7B (32 blocks) under torchtitan's pipeline on ``gpus`` H100s: 3 stages split
    the blocks 11/11/10 with the embedding and head at the ends (uneven stages). With one
    stage a GPU FSDP does not shard, and torchtitan runs the step in fp32."""
    par = f"{{pipeline_parallel_degree: {pp}, pipeline_parallel_schedule: {schedule_name}}}"
    sets = ["model=llama-2-7b", "training.seq_len=512", "training.micro_batch=1",
            *(["training.precision=fp32"] if gpus == pp else []),
            f"cluster.gpus={gpus}", "cluster.topology=dgx-h100",
            f"strategy={{name: torchtitan, parallelism: {par}}}",
            f"training.grad_accum={m}", *extra]
    return load_scenario(resolve_scenario("quickstart"), sets)


def megatron(pp: int, m: int, vp: int | None = None):
    """GPT-3 1.3B under Megatron TP2 x PP x DP2 with the distributed optimizer (its
    gradient reduce-scatter overlapped with the last micro-batch's backward)."""
    strategy = (f"strategy={{name: megatron, tensor_model_parallel_size: 2, "
                f"pipeline_model_parallel_size: {pp}, use_distributed_optimizer: true, "
                f"overlap_grad_reduce: true"
                + (f", virtual_pipeline_model_parallel_size: {vp}}}" if vp else "}"))
    sets = ["model=gpt3-1.3b", "training.seq_len=512", "training.micro_batch=1",
            f"cluster.gpus={4 * pp}", "cluster.topology=dgx-a100-superpod",
            "cluster.nodes=2", strategy, f"training.grad_accum={m}"]
    return load_scenario(resolve_scenario("quickstart"), sets)


def megatron_h100(pp: int, m: int, vp: int | None = None, precision: str = "fp8",
                  overlap: bool = True, seq_len: int = 4096, dp: int = 2):
    """Llama 3 8B under Megatron's pipeline over ``pp`` x ``dp`` H100, ``seq_len``-token
    sequences, in ``precision``, with or without the gradient reduce-scatter overlapped."""
    strategy = (f"strategy={{name: megatron, pipeline_model_parallel_size: {pp}, "
                f"use_distributed_optimizer: true, overlap_grad_reduce: {str(overlap).lower()}"
                + (f", virtual_pipeline_model_parallel_size: {vp}}}" if vp else "}"))
    sets = ["model=llama-3-8b", f"training.seq_len={seq_len}", "training.micro_batch=1",
            f"training.precision={precision}", f"cluster.gpus={dp * pp}",
            "cluster.topology=dgx-h100", strategy, f"training.grad_accum={m}"]
    return load_scenario(resolve_scenario("quickstart"), sets)


def converging(m: int):
    """Llama 3 8B in FP8 under Megatron's 1F1B over 4 H100 (TP1), 8,192-token sequences:
    the last stage, with the 128k-token vocabulary's head, is the busiest, and it sets the
    pace only gradually (its idle time falls ever more slowly from one replay to the next)."""
    return megatron_h100(4, m, seq_len=8192, dp=1)


def random_cases(n: int, seed: int = 43) -> list[tuple[str, tuple]]:
    """``n`` different pipelines drawn with ``seed``: torchtitan's 1F1B (2-4 stages, 3
    uneven), interleaved and ZB-V schedules with and without a second data-parallel rank,
    or Megatron's 1F1B and interleaved in bf16 or FP8 with and without the overlapped
    gradient reduce-scatter; 70-120 micro-batches (a multiple of pp interleaved)."""
    rng, out = random.Random(seed), {}
    while len(out) < n:
        if rng.random() < 0.5:
            sched, pp = rng.choice([("1F1B", 2), ("1F1B", 3), ("1F1B", 4),
                                    ("Interleaved1F1B", 2), ("Interleaved1F1B", 4),
                                    ("ZBVZeroBubble", 2), ("ZBVZeroBubble", 4)])
            dp, m = rng.choice([1, 2]), rng.randrange(70, 121)
            m -= m % pp if sched == "Interleaved1F1B" else 0
            out[f"torchtitan-{sched}-pp{pp}-dp{dp}-m{m}"] = ("torchtitan", sched, pp, m,
                                                             pp * dp)
        else:
            pp, vp = rng.choice([2, 4]), rng.choice([None, 2])
            precision, overlap = rng.choice(["bf16", "fp8"]), rng.choice([True, False])
            m = rng.randrange(70, 121)
            m -= m % pp if vp else 0
            out[f"megatron-pp{pp}-vp{vp}-{precision}-overlap{overlap}-m{m}"] = (
                "megatron", pp, m, vp, precision, overlap)
    return list(out.items())


def both(scn):
    """The extrapolated and the fully replayed result of ``scn``."""
    return run_setup(build_setup(scn)), run_setup(build_setup(scn, extrapolate_steps=False))


def assert_close(ex, full):
    a, b = ex.metrics, full.metrics
    for key in TIMES:
        assert getattr(a, key) == pytest.approx(getattr(b, key),
                                                abs=RTOL * b.iteration_time_s), key
    for key in ("samples_per_s", "tokens_per_s", "tflops_per_gpu", "mfu"):
        assert getattr(a, key) == pytest.approx(getattr(b, key), rel=RTOL), key
    # the memory of a pipeline peaks in its warm-up, which every replay runs whole
    assert (a.peak_memory_gib, a.peak_memory_gib_per_class, a.oom) == \
        (b.peak_memory_gib, b.peak_memory_gib_per_class, b.oom)
    assert ex.setup.trace.meta["global_batch"] == full.setup.trace.meta["global_batch"]
    assert ex.setup.trace.meta["grad_accum"] == full.setup.trace.meta["grad_accum"]
    assert a.events < b.events


@pytest.mark.parametrize("scn, replayed", [
    (torchtitan("1F1B", 4, 80), (8, 9, 10)),
    (torchtitan("1F1B", 3, 90, 6), (6, 7, 8)),                 # uneven stages
    (torchtitan("Interleaved1F1B", 4, 100), (8, 12, 16)),      # d = pp
    (torchtitan("Interleaved1F1B", 2, 70), (4, 6, 8)),
    # ZB-V: the step from 8 to 10 micro-batches is not periodic, but from 9 on it grows
    # by stage 0's work exactly: converging on stage 0, its idle time no longer falling
    (torchtitan("ZBVZeroBubble", 4, 160), (8, 9, 10)),
    (megatron(2, 80), (4, 5, 6)),
    (megatron(2, 96, vp=2), (4, 6, 8)),
])
def test_extrapolated_pipeline_equals_the_full_replay(scn, replayed):
    ex, full = both(scn)
    assert ex.extrapolation is not None and full.extrapolation is None
    assert ex.extrapolation.replayed == replayed
    assert_close(ex, full)


def test_a_step_converging_on_its_busiest_stage_is_extrapolated_at_its_pace():
    ex, full = both(converging(120))
    runs = [run_setup(build_setup(converging(k))) for k in (8, 9, 10)]
    t = [r.metrics.iteration_time_s for r in runs]
    busy = [accum.class_busy(r.timeline)["stage3"] for r in runs]
    # the step does not repeat exactly: it grows more each time, towards stage 3's work
    # per micro-batch, which does repeat
    assert (t[2] - t[1]) - (t[1] - t[0]) > accum.PERIOD_RTOL * t[2]
    assert abs((busy[2] - busy[1]) - (busy[1] - busy[0])) <= accum.PERIOD_RTOL * t[2]
    assert t[2] - t[1] < busy[2] - busy[1]
    # T(m) = T(k+2) + (m - k - 2) x stage 3's work per micro-batch, at most (m - k - 2) x
    # the last fall of its idle time above the full step
    info = ex.extrapolation
    assert info.replayed == (8, 9, 10) and info.pace_class == "stage3"
    assert ex.metrics.iteration_time_s == t[2] + 110 * (busy[2] - busy[1])
    fall = (t[1] - busy[1]) - (t[2] - busy[2])
    assert 0 < fall <= (t[0] - busy[0]) - (t[1] - busy[1])
    assert info.bound_s == 110 * fall
    assert info.bound_s <= accum.CONVERGE_RTOL * ex.metrics.iteration_time_s
    assert 0 <= ex.metrics.iteration_time_s - full.metrics.iteration_time_s <= info.bound_s
    assert_close(ex, full)
    assert "converging on stage3" in info.note() and info.as_dict()["bound_s"] == info.bound_s


def test_random_pipelines_equal_their_full_replay():
    # issue 43: on random schedules the answer is the full replay's within 0.1% where it
    # is extrapolated (periodic or converging), and is the full replay where it is not;
    # the draw holds all three
    paces = set()
    for name, case in random_cases(10):
        scn = torchtitan(*case[1:]) if case[0] == "torchtitan" else megatron_h100(*case[1:])
        ex, full = both(scn)
        got = ex.extrapolation
        paces.add(None if got is None else got.pace_class is None)
        if got is None:
            assert dataclasses.asdict(ex.metrics) == dataclasses.asdict(full.metrics), name
            continue
        assert_close(ex, full)
        t = full.metrics.iteration_time_s
        tol = accum.PERIOD_RTOL * t
        # never below the full step; above it by at most its bound (0 when periodic)
        assert t - tol <= ex.metrics.iteration_time_s <= t + got.bound_s + tol, name
    assert paces == {None, True, False}       # full, periodic, converging


def test_the_extrapolation_is_the_line_through_the_last_two_replays():
    # 1F1B over p stages: T(m) = T(k+2) + (m - k - 2) * (T(k+2) - T(k+1)) from the replays
    # of k = 2 p, k+1, k+2 micro-batches; interleaved: steps of p micro-batches
    n = 1_000_000
    ex = run_setup(build_setup(torchtitan("Interleaved1F1B", 4, n)))
    t8, t12, t16 = (run_setup(build_setup(torchtitan("Interleaved1F1B", 4, k))).metrics
                    for k in (8, 12, 16))
    per_micro = (t16.iteration_time_s - t12.iteration_time_s) / 4
    assert ex.metrics.iteration_time_s == t16.iteration_time_s + (n - 16) // 4 * (
        t16.iteration_time_s - t12.iteration_time_s)
    assert ex.extrapolation.micro_step_s == pytest.approx(per_micro, rel=1e-12)
    assert ex.extrapolation.events_replayed == t8.events + t12.events + t16.events
    assert ex.setup.trace.meta["global_batch"] == n * 2      # 2 data-parallel ranks


def test_a_later_steady_state_is_found_by_longer_replays_counted_in_the_events(
        monkeypatch):
    monkeypatch.setattr(accum, "CONVERGE_RTOL", -1.0)     # periodic replays only
    ex = run_setup(build_setup(torchtitan("ZBVZeroBubble", 4, 160)))
    # replays of 8, 9, 10 (not periodic), then 12, 13, 14 micro-batches
    runs = {k: run_setup(build_setup(torchtitan("ZBVZeroBubble", 4, k))).metrics.events
            for k in (8, 9, 10, 12, 13, 14)}
    assert ex.extrapolation.replayed == (12, 13, 14)
    assert ex.extrapolation.events_replayed == sum(runs.values())


def test_full_replay_stays_an_option_and_is_bounded():
    scn = torchtitan("1F1B", 4, 80, 8, "simulation.full_replay=true")
    assert build_setup(scn).accum is None
    with pytest.raises(ConfigError) as err:
        build_setup(torchtitan("1F1B", 4, accum.FULL_LIMIT + 1, 8,
                               "simulation.full_replay=true"))
    assert err.value.field == "training.grad_accum" and "whole step" in err.value.reason


def test_short_pipelines_and_gpipe_stay_exact_and_long_gpipe_is_refused_first():
    # below twice the replays' micro-batches the full replay is replayed straight away
    assert build_setup(torchtitan("Interleaved1F1B", 4, 68)).accum is None   # 2 x 36
    assert build_setup(torchtitan("Interleaved1F1B", 4, 72)).accum is not None
    assert build_setup(torchtitan("1F1B", 4, accum.THRESHOLD)).accum is None
    assert build_setup(torchtitan("GPipe", 4, 200)).accum is None   # memory grows with m
    with pytest.raises(ConfigError) as err:
        build_setup(torchtitan("GPipe", 4, accum.FULL_LIMIT + 1))
    assert err.value.field == "training.grad_accum" and "gpipe" in err.value.reason


def test_a_pipeline_that_does_not_repeat_is_replayed_in_full(monkeypatch):
    monkeypatch.setattr(accum, "PERIOD_RTOL", -1.0)      # no replay passes the check
    scn = torchtitan("1F1B", 4, 70)       # replays of 8-10, then all 70
    got = run_setup(build_setup(scn))
    want = run_setup(build_setup(scn, extrapolate_steps=False))
    assert got.extrapolation is None
    assert dataclasses.asdict(got.metrics) == dataclasses.asdict(want.metrics)


def test_peak_in_flight_reaches_its_steady_count_within_steady_micro_batches_per_stage():
    # memory.in_flight counts at most STEADY x pp micro-batches: no schedule grows after
    for name, vps in (("1f1b", [1]), ("zb_h1", [1]), ("interleaved_1f1b", [2, 3, 8]),
                      ("zbv", [2])):
        for pp in (2, 3, 4, 8, 16):
            for vp in vps:
                want = [peak_in_flight(a) for a in schedule(name, pp, STEADY * pp, vp)]
                for m in (STEADY * pp + pp, 9 * pp):
                    assert [peak_in_flight(a) for a in schedule(name, pp, m, vp)] == want


def test_a_million_micro_batches_run_in_seconds_and_say_so(capsys):
    code, out, err = run_main(capsys, "run", "mixtral-8x7b-ep8", "--set",
                              "training.grad_accum=1000000", "--format", "json")
    assert code == 0, err
    info = json.loads(out)["extrapolated"]
    assert info["grad_accum"] == 1_000_000 and info["replayed_micro_steps"] == [8, 12, 16]


@pytest.mark.parametrize("args, words", [
    (["run", "mixtral-8x7b-ep8", "--set", f"training.grad_accum={MAX_GRAD_ACCUM + 1}"],
     "training.grad_accum"),
    (["run", "quickstart", "--set", "training.global_batch=1000000000000000000000"],
     "training.global_batch"),
    (["run", "quickstart", "--set", "training.global_batch=1099511627776"],
     "training.global_batch: gives 68719476736 micro-batches"),
    (["plan", "quickstart", "--global-batch", "1000000000000000000000"], "--global-batch"),
    (["trace", "mixtral-8x7b-ep8", "-o", "t.json", "--set", "training.grad_accum=1000000"],
     "a whole step of 1000000 micro-steps is not built"),
])
def test_counts_past_the_bounds_are_refused_in_one_line(capsys, tmp_path, monkeypatch, args,
                                                        words):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(capsys, *args)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("value, words", [
    ("1e18", "gradient_accumulation_steps: Input should be less than or equal to"),
    ("2.5", "gradient_accumulation_steps: must be a whole number, got 2.5"),
])
def test_a_deepspeed_count_is_a_bounded_whole_number_named_as_the_file_spells_it(
        capsys, tmp_path, value, words):
    ds = tmp_path / "ds.json"
    ds.write_text(f'{{"gradient_accumulation_steps": {value}, '
                  f'"train_micro_batch_size_per_gpu": 1}}')
    code, out, err = run_main(capsys, "run", "quickstart", "--config", str(ds))
    assert code == 2 and f"{ds}: {words}" in err and len(err.strip().splitlines()) == 1, err
    ds.write_text('{"train_batch_size": 1e21}')
    code, out, err = run_main(capsys, "run", "quickstart", "--config", str(ds))
    assert code == 2 and f"{ds}: train_batch_size: " in err and "at most" in err, err


def test_a_stage_busier_than_the_step_grows_sets_the_pace_within_a_bound():
    # GB200's Llama 3.1 405B at PP16 x VP8: from 32 to 64 micro-batches the step grows
    # 2.9049 s per 16 and repeats exactly, but stage 8's own work grows 2.9297 s: it sets
    # the pace later (the full 384-micro-batch step grows 2.9292 s per 16), so a line
    # through the replays would be 0.69% short; such replays are not periodic, and the
    # step is extrapolated at the busiest stage's pace only where the bound allows
    plan = build_setup(torchtitan("1F1B", 4, 80)).accum
    runs = [run_setup(build_setup(torchtitan("1F1B", 4, k))).metrics for k in plan.replayed]
    step = runs[2].iteration_time_s - runs[1].iteration_time_s
    assert accum.extrapolate(plan, runs, 1.0,
                             busy=[{"s": 1.0 - step}, {"s": 1.0}, {"s": 1.0 + step}])
    # stage s works 1.001 step per micro-batch: its idle time falls by 0.001 step each
    # time, so the step is extrapolated at s's pace, at most 70 x 0.001 step above (the
    # idle time falling at most as fast for the 70 micro-batches still to come)
    busier = [{"s": 1.0 - 1.001 * step}, {"s": 1.0}, {"s": 1.0 + 1.001 * step}]
    got, info = accum.extrapolate(plan, runs, 1.0, busy=busier)
    assert info.pace_class == "s" and info.micro_step_s == busier[2]["s"] - busier[1]["s"]
    assert got.iteration_time_s == runs[2].iteration_time_s + 70 * info.micro_step_s
    assert info.bound_s == pytest.approx(70 * 0.001 * step, rel=1e-6)
    # 1.01 step: up to 0.7 step above, more than CONVERGE_RTOL of the step allows
    busier = [{"s": 1.0 - 1.01 * step}, {"s": 1.0}, {"s": 1.0 + 1.01 * step}]
    assert 70 * 0.01 * step > accum.CONVERGE_RTOL * (runs[2].iteration_time_s + 70 * step)
    assert accum.extrapolate(plan, runs, 1.0, busy=busier) is None
    # the classes of a real replay: none busier than the step
    timeline = run_setup(build_setup(torchtitan("1F1B", 4, 10))).timeline
    busy = accum.class_busy(timeline)
    assert set(busy) == {"stage0", "stage1", "stage2", "stage3"}
    assert all(0 < b < timeline.iteration_time_s for b in busy.values())
