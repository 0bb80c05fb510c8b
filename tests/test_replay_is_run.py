"""One path, one price: a trace written by ``clustersim trace`` and replayed costs what ``run``
costs. The trace carries how ``run`` ran it (``meta.run``: precision, attention kernels,
overlap, variability, seed, NCCL knobs), the replay uses the same compute model, GPU memory
limit and peak FLOP/s; a step ``run`` extrapolates from a few micro-steps is the whole
trace's step. Every shipped scenario (the biggest on fewer servers), in process; and through
the command line in both file formats. A ``meta.run`` value that is not one is refused with
its field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario
from simulator.trace_replay import replay_trace, run_settings
from test_cli import run_main

SCENARIOS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "scenarios")
                   .glob("*.yaml"))
SMALLER = {"gpt3-175b-megatron-tp8-pp16-selene": ["cluster.nodes=16", "training.grad_accum=32"],
           "llama3-405b-tp8-pp8-fsdp-512gpu": ["cluster.nodes=16"],
           "reliability-16384gpu": ["cluster.nodes=64"]}


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_scenarios_trace_replays_at_its_run_cost(name):
    scn = load_scenario(name, SMALLER.get(name, []))
    run = run_setup(build_setup(scn)).metrics
    whole = build_setup(scn, extrapolate_steps=False)
    replayed = replay_trace(whole.trace, cluster=whole.cluster).metrics
    assert replayed.iteration_time_s == pytest.approx(run.iteration_time_s, rel=1e-3)
    assert replayed.mfu == pytest.approx(run.mfu, rel=1e-3)
    assert replayed.tokens_per_s == pytest.approx(run.tokens_per_s, rel=1e-3)
    assert replayed.peak_memory_gib == pytest.approx(run.peak_memory_gib, rel=1e-3)
    assert replayed.oom == run.oom


@pytest.mark.parametrize("fmt", ["json", "chakra"])
def test_trace_then_replay_on_the_command_line_prints_runs_numbers(capsys, tmp_path, fmt):
    scenario = "resnet50-ddp-8gpu"          # fp16, variability on, DDP buckets
    code, out, _ = run_main(capsys, "run", scenario, "--format", "json", "-q")
    assert code == 0
    run = json.loads(out)
    prefix = tmp_path / "t"
    code, _, err = run_main(capsys, "trace", scenario, "-o",
                            str(prefix) + (".json" if fmt == "json" else ""),
                            *(["--format", "chakra"] if fmt == "chakra" else []))
    assert code == 0, err
    trace = str(prefix) + ".json"
    if fmt == "chakra":
        files = sorted(str(p) for p in tmp_path.glob("t.*.et"))
        code, _, err = run_main(capsys, "import", "chakra", *files, "-o", trace)
        assert code == 0, err
    code, out, err = run_main(capsys, "replay", trace, "--format", "json")
    assert code == 0, err
    replayed = json.loads(out)
    for key in ("iteration_time_s", "samples_per_s", "mfu", "peak_memory_gib"):
        assert replayed[key] == pytest.approx(run[key], rel=1e-3), key
    # what neither can give (ResNet has no tokens) is null in both, not 0 in one
    assert run["tokens_per_s"] is None and replayed["tokens_per_s"] is None


@pytest.mark.parametrize("run, field", [
    ({"precision": "fp6"}, "meta.run.precision"),
    ({"attention": "magic"}, "meta.run.attention"),
    ({"overlap_slowdown": -1}, "meta.run.overlap_slowdown"),
    ({"overlap_slowdown": True}, "meta.run.overlap_slowdown"),
    ({"seed": 1.5}, "meta.run.seed"),
    ({"variability": "lots"}, "meta.run.variability"),
    ({"variability": {"matmul": 7}}, "meta.run.variability.matmul"),
    ({"nccl": {"algo": "warp"}}, "meta.run.nccl.algo"),
    ({"nccl": [1]}, "meta.run.nccl"),
    ({"speed": 2}, "meta.run.speed"),
])
def test_a_bad_meta_run_value_is_refused_by_name(run, field):
    with pytest.raises(ConfigError) as info:
        run_settings({"run": run})
    assert info.value.field == field


def test_a_trace_without_meta_run_runs_at_bf16_with_the_defaults():
    settings = run_settings({})
    assert (settings.precision, settings.attention, settings.job.variability,
            settings.job.overlap_slowdown) == ("bf16", "sdpa", None, 0.0)


@pytest.mark.parametrize("name, sets, key", [
    ("quickstart", ["training.compile=true", "training.seq_len=512"], "launch"),
    ("mixtral-8x7b-ep8", ["model=qwen3-30b-a3b", "strategy.virtual_pipeline_model_parallel_size=6",
                          "cluster.nodes=4", "training.grad_accum=4"],
     "groups"),                                      # 16 experts a rank: grouped GEMMs
])
def test_a_chakra_round_trip_keeps_how_kernels_launch_and_group(tmp_path, name, sets, key):
    from simulator.importers.chakra import standard_only, write_chakra
    from simulator.importers.chakra_read import read_chakra
    whole = build_setup(load_scenario(name, sets), extrapolate_steps=False)
    ops = [op for cls in whole.trace.classes for op in cls.ops if op.kind == "compute"]
    assert any(key in op.attrs for op in ops)          # the trace has what is to be kept
    files = write_chakra(whole.trace, tmp_path / "t")
    want = replay_trace(whole.trace, cluster=whole.cluster).metrics
    got = replay_trace(read_chakra(files), cluster=whole.cluster).metrics
    # a plain Chakra reader sees the standard fields only (no clustersim.op attribute, no
    # meta.run): it still reads how each kernel launches and how many GEMMs it groups
    for f in files:
        f.write_bytes(standard_only(f.read_bytes()))
    plain = read_chakra(files)
    assert {op.attrs.get(key) for cls in plain.classes for op in cls.ops} == \
        {op.attrs.get(key) for op in ops} | ({None} if key == "groups" else set())
    assert got.iteration_time_s == pytest.approx(want.iteration_time_s, rel=1e-6)
