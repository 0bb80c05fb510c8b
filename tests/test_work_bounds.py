"""Work bounds (issue 42): ``plan``, ``reliability`` and ``study`` count their work before
doing any and refuse past a limit in one line naming the option that raises it."""

from __future__ import annotations

import time

import pytest

from simulator.models import load_model
from simulator.planner import Limits, candidates
from simulator.planner import work
from simulator.strategies.parallel import ParallelPlan
from simulator.planner.space import Candidate
from test_cli import run_main

LLAMA7 = load_model("llama-2-7b")
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
    """Units: candidates x (1 + gpus // 16,384) + distinct schedules' slots / 100 +
    replays x (500 + gpus / 10 + the largest schedule's slots / 100)."""
    pp2 = ParallelPlan(pp=2, tp=1, cp=1, dp_replicate=1, dp_shard=4, dp_mode="zero2")
    pp4 = ParallelPlan(pp=4, tp=1, cp=1, dp_replicate=1, dp_shard=2, dp_mode="zero2",
                       schedule="interleaved_1f1b", vp=2)
    flat = ParallelPlan(pp=1, tp=1, cp=1, dp_replicate=1, dp_shard=8, dp_mode="fsdp")
    cands = [Candidate(pp2, 1, 400, "none"), Candidate(pp2, 1, 400, "full"),   # one schedule
             Candidate(pp4, 1, 800, "none"), Candidate(flat, 1, 2, "none")]
    w = work.count(cands, replay=3, gpus=40_000)
    assert (w.candidates, w.replays, w.gpus) == (4, 3, 40_000)
    assert w.schedule_slots == 2 * 1 * 400 + 4 * 2 * 800
    assert w.replay_slots == 4 * 2 * 800
    assert w.units == 4 * (1 + 2) + (800 + 6400) // 100 + 3 * (500 + 4000 + 6400 // 100)


def test_plan_work_counts_the_real_candidates():
    cands = list(candidates(LLAMA7, 8, 16, 512, Limits(), model_parallel=True))
    w = work.count(cands, replay=100, gpus=8)
    assert w.candidates == len(cands) and w.replays == min(100, len(cands))
    work.check(w, None)                              # the README's example fits


def test_plan_every_max_option_on_16384_nodes_is_refused_promptly(capsys):
    t0 = time.perf_counter()
    code, out, err = run_main(capsys, "plan", "llama2-7b-fsdp-128gpu",
                              "--set", "cluster.nodes=16384", *MAX_OPTIONS)
    line = one_line_refusal(code, out, err, "--max-work", "119,919 candidates",
                            "100 replays on 131,072 GPUs", "100,000")
    assert time.perf_counter() - t0 < 60, line          # the graph of 16,384 servers: ~3 s


def test_plan_default_options_on_16384_nodes_are_refused_not_run_for_minutes(capsys):
    code, out, err = run_main(capsys, "plan", "llama2-7b-fsdp-128gpu",
                              "--set", "cluster.nodes=16384")
    one_line_refusal(code, out, err, "--max-work", "28,242 candidates")


def test_plan_huge_global_batch_is_refused(capsys):
    code, out, err = run_main(capsys, "plan", "quickstart", "--global-batch", str(10 ** 21))
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
