"""Identical micro-steps replayed a few times (simulator/accum.py): the extrapolated step
against the full replay, the arithmetic of the extrapolation, what stays on the exact path,
the fallback and refusal of a step that does not repeat, and what `clustersim run` says."""

from __future__ import annotations

import dataclasses
import json

import pytest

from simulator import accum
from simulator.errors import ConfigError
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario, resolve_scenario
from test_cli import run_main

# GPT-2 small on 2 GPUs: a micro-step of ~1,200 events, so a full replay of 100 is cheap
FSDP = ["model=gpt2-small", "training.seq_len=1024", "cluster.gpus=2"]
SMALL_SETS = [a for s in FSDP for a in ("--set", s)]


def scenario(n: int, name: str = "quickstart", sets=FSDP):
    return load_scenario(resolve_scenario(name), [*sets, f"training.grad_accum={n}"])


def exact(scn):
    return run_setup(build_setup(scn, extrapolate_steps=False))


@pytest.mark.parametrize("name, sets", [("quickstart", FSDP),
                                        ("resnet50-ddp-8gpu", ["cluster.gpus=2"])])
def test_extrapolated_step_equals_the_full_replay(name, sets):
    # bound: PERIOD_RTOL (1e-9) of the iteration time for every time; the same memory
    scn = scenario(100, name, sets)
    ex, full = run_setup(build_setup(scn)), exact(scn)
    assert ex.extrapolation is not None and full.extrapolation is None
    a, b = ex.metrics, full.metrics
    bound = accum.PERIOD_RTOL * b.iteration_time_s
    for key in ("iteration_time_s", "compute_s", "comm_s", "exposed_comm_s", "wait_s",
                "memory_wait_s"):
        assert getattr(a, key) == pytest.approx(getattr(b, key), abs=bound), key
    for key in ("samples_per_s", "tokens_per_s", "tflops_per_gpu", "mfu", "gpu_utilization"):
        assert getattr(a, key) == pytest.approx(getattr(b, key), rel=1e-9), key
    assert (a.peak_memory_gib, a.peak_memory_gib_per_class, a.oom) == \
        (b.peak_memory_gib, b.peak_memory_gib_per_class, b.oom)
    assert ex.setup.trace.meta["global_batch"] == full.setup.trace.meta["global_batch"]
    assert a.events < b.events / 4


def test_extrapolation_is_the_line_through_the_last_two_replays():
    n = 1_000_000
    ex = run_setup(build_setup(scenario(n)))
    t4, t5, t6 = (exact(scenario(k)).metrics for k in accum.REPLAYED)
    step = t6.iteration_time_s - t5.iteration_time_s
    assert ex.metrics.iteration_time_s == t6.iteration_time_s + (n - 6) * step
    assert ex.metrics.compute_s == t6.compute_s + (n - 6) * (t6.compute_s - t5.compute_s)
    # a million micro-steps cost three short replays: 4 + 5 + 6 micro-steps of events
    assert ex.extrapolation.replayed == (4, 5, 6)
    assert ex.extrapolation.events_replayed == t4.events + t5.events + t6.events
    assert ex.metrics.events == ex.extrapolation.events_replayed
    assert sum(len(c.ops) for c in ex.setup.trace.classes) == \
        sum(len(c.ops) for c in exact(scenario(6)).setup.trace.classes)
    batch = 2 * n * 2           # micro_batch 2 x grad_accum x 2 GPUs
    assert ex.setup.trace.meta["global_batch"] == batch
    assert ex.metrics.samples_per_s == pytest.approx(batch / ex.metrics.iteration_time_s)


def test_small_steps_histograms_and_compact_strategies_stay_exact():
    assert build_setup(scenario(accum.THRESHOLD)).accum is None
    assert build_setup(scenario(accum.THRESHOLD + 1)).accum is not None
    hist = "training.sequence_lengths={histogram: wikipedia-bert-512, bin_size: 64}"
    bert = ["model=bert-large", "training.seq_len=512", "cluster.gpus=2", hist]
    assert build_setup(scenario(200, sets=bert)).accum is None
    # TensorFlow strategies write the first k-1 micro-steps once (attrs["repeat"])
    assert build_setup(scenario(200, "resnet50-tf-mirrored-8gpu", [])).accum is None


def test_a_step_that_does_not_repeat_is_replayed_in_full_or_refused(monkeypatch):
    monkeypatch.setattr(accum, "PERIOD_RTOL", -1.0)      # no step passes the check
    scn = scenario(accum.THRESHOLD + 1)
    got, want = run_setup(build_setup(scn)), exact(scn)
    assert got.extrapolation is None
    assert dataclasses.asdict(got.metrics) == dataclasses.asdict(want.metrics)
    with pytest.raises(ConfigError) as err:
        run_setup(build_setup(scenario(accum.FULL_LIMIT + 1)))
    assert err.value.field == "training.grad_accum"
    assert "ops per rank class" in err.value.reason


def test_run_says_the_step_was_extrapolated(capsys, tmp_path):
    sets = [*SMALL_SETS, "--set", "training.grad_accum=1000000"]
    code, out, err = run_main(capsys, "run", *sets, "--format", "json")
    assert code == 0, err
    info = json.loads(out)["extrapolated"]
    assert info["grad_accum"] == 1_000_000 and info["replayed_micro_steps"] == [4, 5, 6]
    code, out, err = run_main(capsys, "run", *sets, "--out", str(tmp_path / "o"))
    assert code == 0, err
    assert "# step extrapolated from replays of 4, 5, 6 micro-steps" in out
    saved = json.loads((tmp_path / "o" / "extrapolation.json").read_text())
    assert saved["timeline"] == "the 6-micro-step replay"
    page = (tmp_path / "o" / "report.html").read_text()
    assert "This step was not replayed in full: step extrapolated from replays of 4, 5, 6" in page
    code, out, err = run_main(capsys, "run", *SMALL_SETS, "--format", "json")
    assert code == 0 and "extrapolated" not in json.loads(out)


def test_trace_writes_every_micro_step(capsys, tmp_path):
    n = accum.THRESHOLD + 1
    code, out, err = run_main(capsys, "trace", "-o", str(tmp_path / "t.json.gz"),
                              *SMALL_SETS, "--set", f"training.grad_accum={n}")
    assert code == 0, err
    whole = build_setup(scenario(n), extrapolate_steps=False).trace
    ops = sum(len(c.ops) for c in whole.classes)
    assert f"{ops} ops" in out
    assert ops > sum(len(c.ops) for c in build_setup(scenario(n)).trace.classes) * 8


def test_a_trace_derived_through_with_trace_is_extrapolated_too():
    # the reliability step table slows rank 0 this way (reliability/steps.py)
    from simulator.pipeline import with_trace
    from simulator.reliability.steps import _straggler_time
    from simulator.trace.transform import apply_stragglers
    scn = scenario(100)
    setup = build_setup(scn)
    slowed = with_trace(setup, lambda t: apply_stragglers(t, {0: 1.5}))
    assert slowed.accum is not None and len(slowed.trace.classes) == 2
    whole = build_setup(scn, extrapolate_steps=False)
    want = run_setup(dataclasses.replace(whole, trace=apply_stragglers(whole.trace, {0: 1.5})))
    got = _straggler_time(setup, 1.5)
    assert got == pytest.approx(want.metrics.iteration_time_s,
                                abs=accum.PERIOD_RTOL * want.metrics.iteration_time_s)
    assert got > 1.4 * run_setup(setup).metrics.iteration_time_s
    # a trace put in by hand is replayed as it is
    assert dataclasses.replace(setup, trace=whole.trace).accum is None
