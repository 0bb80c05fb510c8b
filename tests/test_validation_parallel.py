"""The parallel validation suite: its inputs (copied rows, model configs, the declaration of
what is calibrated), the Selene memory rows against the memory model, the mapping of each
measured run to a plan and a scenario, the median gate and the command's exit code."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from click.testing import CliRunner

from simulator.cli import cli
from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.validation.commands import parallel_cases
from simulator.validation.parallel import cases as pc
from simulator.validation.parallel.iteration import (analytical_gib, iteration_rows,
                                                     median_case, scenario_of)
from simulator.validation.parallel.memory import memory_rows
from simulator.validation.parallel.report import validate, write_report
from simulator.validation.suite.runners import RUNNERS

ROOT = pc.default_root()
SHARED = Path(__file__).resolve().parents[1].parent.parent / "shared" / "validation-data"


@pytest.fixture(scope="module")
def spec():
    return pc.load(ROOT)


def test_nothing_is_calibrated_and_the_rows_keep_their_source(spec):
    assert all(c.startswith(spec.files.simumax) for c in spec.calibrated)  # the Blackwell fit
    for name in (spec.files.iteration, spec.files.memory, spec.files.nemo, spec.files.bridge):
        df = pd.read_csv(ROOT / name)
        assert df.source.str.len().min() > 0
        original = SHARED / "training" / name
        if original.is_file():                  # the copy is the shared file, unedited
            assert (ROOT / name).read_bytes() == original.read_bytes()


def test_model_configs_are_the_rows_columns(spec):
    df = pc.read_rows(ROOT, spec.files.iteration, ["model", "num_layers", "hidden",
                                                   "feedforward", "attn_heads",
                                                   "attn_size_per_head", "seq_len"])
    for row in df.to_dict("records"):
        m = pc.model_for(ROOT, spec.models[row["model"]])
        assert (m.layers, m.hidden, m.ffn_hidden, m.heads, m.head_dim) == (
            row["num_layers"], row["hidden"], row["feedforward"], row["attn_heads"],
            row["attn_size_per_head"])
        assert m.max_seq_len >= row["seq_len"]


def test_each_run_becomes_its_plan(spec):
    df = pc.read_rows(ROOT, spec.files.iteration)
    runs = {(r["model"], r["activation_recompute"]): pc.run_of(r, spec, "x")
            for r in df.to_dict("records")}
    gpt3 = runs["175B (GPT-3)", "attn_only"]
    assert (gpt3.plan.tp, gpt3.plan.pp, gpt3.plan.vp) == (8, 8, 3)
    assert gpt3.plan.schedule == "interleaved_1f1b" and gpt3.plan.sequence_parallel
    assert gpt3.ac == "selective" and gpt3.mode == "seqsel"
    assert gpt3.micro_batches == 64                     # global 64 / (micro 1 x dp 1)
    full = runs["1T", "full"]
    assert (full.plan.schedule, full.ac, full.mode, full.micro_batches) == (
        "1f1b", "full", "full", 512)
    assert all(r.plan.size == r.gpus for r in runs.values())


def test_selene_memory_rows_within_ten_percent(spec):
    rows = memory_rows(ROOT, spec)
    assert len(rows) == 36
    gated = [r for r in rows if r["ok"] is not None]
    assert len(gated) == 32                              # Figure 7's 100% rows not gated
    worst = max(gated, key=lambda r: abs(r["error"]))
    assert abs(worst["error"]) <= 0.10, worst
    fig1 = {r["case"]: r for r in rows}
    # the first stage holds the most micro-batches: Korthikanti's L (1 + (p-1)/(p v)) x
    # sbh (10 + 24/t + 5as/(ht)) for GPT-3 175B, t 8, p 8, v 3, b 1, s 2048
    act = fig1["parallel/selene/175b/fig1/none/activations"]
    sbh = 2048 * 12288
    per_layer = sbh * (10 + 24 / 8 + 5 * 96 * 2048 / (12288 * 8))
    assert act["simulated"] * 2 ** 30 == pytest.approx(96 * (1 + 7 / 24) * per_layer)


def test_scenario_spells_megatron_arguments(spec):
    df = pc.read_rows(ROOT, spec.files.iteration)
    row = df[(df.model == "175B (GPT-3)") & (df.activation_recompute == "full")].iloc[0]
    scn = scenario_of(pc.run_of(row, spec, "x"), ROOT, "dgx-a100-superpod", "c")
    assert scn["strategy"] == {
        "name": "megatron", "tensor_model_parallel_size": 8,
        "pipeline_model_parallel_size": 8, "virtual_pipeline_model_parallel_size": 3,
        "sequence_parallel": False, "use_distributed_optimizer": False, "optimizer": "adam",
        "recompute_granularity": "full", "recompute_method": "uniform",
        "recompute_num_layers": 1}
    assert scn["cluster"] == {"topology": "dgx-a100-superpod", "nodes": 8}
    assert scn["training"]["grad_accum"] == 64 and scn["training"]["precision"] == "fp16"


def _fake(times):
    def simulate(scenario, case):
        return SimpleNamespace(iteration_time_s=times[case], peak_memory_gib=79.0,
                               oom=case.startswith("parallel/selene/1t"))
    return simulate


def test_the_gate_is_the_median_absolute_error(spec):
    df = pc.read_rows(ROOT, spec.files.iteration)
    cases = [f"parallel/selene/{pc.short(r['model'])}/"
             f"{'full' if r['activation_recompute'] == 'full' else 'seqsel'}/iteration"
             for r in df.to_dict("records")]
    measured = dict(zip(cases, df.iteration_time_s))
    # errors +2, -4, +6, -8, +20, -30, +40, -50 %: median |error| = (8 + 20) / 2 = 14 %
    factors = [1.02, 0.96, 1.06, 0.92, 1.2, 0.7, 1.4, 0.5]
    times = {c: measured[c] * f for c, f in zip(cases, factors)}
    every = spec.model_copy(update={"selene_max_gpus": 512})     # all eight runs
    rows = iteration_rows(ROOT, every, simulate_fn=_fake(times))
    gate = median_case(rows, every)
    assert gate["error"] == pytest.approx(0.14) and gate["ok"] is False
    assert all(r["ok"] is None for r in rows if r["kind"] == "iteration")   # reported
    fits = {r["case"]: r["ok"] for r in rows if r["kind"] == "fits"}
    assert len(fits) == 8 and sum(fits.values()) == 6   # the two 1T runs "OOM" here
    assert fits["parallel/selene/1t/full/fits"] is False


def test_a_row_not_simulated_fails_the_gate(spec):
    from simulator.errors import ConfigError

    def refuse(scenario, case):
        raise ConfigError("unknown strategy 'megatron'", field="strategy.name")
    rows = iteration_rows(ROOT, spec, only={"parallel/selene/22b/full/iteration"},
                          simulate_fn=refuse)
    assert len(rows) == 1 and "not simulated" in rows[0]["note"]
    assert math.isnan(rows[0]["error"])
    assert median_case(rows, spec)["ok"] is False


def test_report_and_cases_for_validate_all(tmp_path, spec):
    times = {}

    def simulate(scenario, case):
        times[case] = 1.0
        return SimpleNamespace(iteration_time_s=1.1, peak_memory_gib=1.0, oom=False)
    df = validate(ROOT, only=set(), simulate_fn=simulate, nemo=False)
    assert times == {}                                   # no iteration row run
    report = write_report(df, tmp_path, ROOT)
    text = report.read_text()
    assert "**Calibrated on these rows:** simumax_b200_measured.csv: the 24 rows" in text
    assert (tmp_path / "results.csv").is_file()
    cases = {c["case"]: c for c in parallel_cases(df)}
    assert cases["parallel/selene/175b/fig1/none/activations"]["ok"] is True
    assert "parallel" in RUNNERS


def test_command_is_registered():
    result = CliRunner().invoke(cli, ["validate", "parallel", "--help"])
    assert result.exit_code == 0 and "Selene" in result.output


def test_the_22b_run_goes_through_the_simulator(spec):
    # the cheapest Selene run (8 GPUs, one stage, one micro-batch): the full suite runs
    # only through `clustersim validate parallel`
    case = "parallel/selene/22b/full/iteration"
    it, fits = iteration_rows(ROOT, spec, only={case})
    assert it["case"] == case and it["simulated"] > 0 and math.isfinite(it["error"])
    assert fits["ok"] is True              # it ran on 80 GB A100s: it fits in the simulation
    run = pc.run_of(pc.read_rows(ROOT, spec.files.iteration).iloc[0], spec, "x")
    analytical = analytical_gib(load_model(ROOT / spec.models[run.label]), run)
    # the analytical memory model and the replay's memory agree to 15%
    assert analytical == pytest.approx(fits["simulated"], rel=0.15)


def _by_size(scenario, case):
    if case == "bad":
        from simulator.errors import ConfigError
        raise ConfigError("refused")
    return SimpleNamespace(iteration_time_s=float(scenario["cluster"]["nodes"]),
                           peak_memory_gib=2.0, oom=False)


def test_runs_in_worker_processes_give_the_serial_outcomes():
    from simulator.validation.parallel.runs import run_jobs
    jobs = {c: {"cluster": {"nodes": n}, "training": {"grad_accum": 1}}
            for c, n in (("a", 1), ("b", 3), ("bad", 2))}
    serial = run_jobs(jobs, _by_size, workers=1)
    assert run_jobs(jobs, _by_size, workers=2) == serial
    assert serial["b"].iteration_time_s == 3.0 and serial["bad"].error.endswith("refused")


def _pid(scenario, case):
    import os
    return SimpleNamespace(iteration_time_s=float(os.getpid()), peak_memory_gib=0.0, oom=False)


def test_one_worker_still_runs_each_simulation_in_a_fresh_process():
    """What a run leaves in its process dies with it, one worker too (validate all runs the
    suite with one: in one process it grew past 24 GB)."""
    import os
    from simulator.validation.parallel.runs import run_jobs
    jobs = {c: {"cluster": {"nodes": 1}, "training": {"grad_accum": 1}} for c in "abc"}
    pids = {o.iteration_time_s for o in run_jobs(jobs, _pid, workers=1).values()}
    assert len(pids) == 3 and float(os.getpid()) not in pids


def test_nemo_rows_beyond_the_gpu_cap_are_listed_not_simulated(spec):
    from simulator.validation.parallel.nemo import nemo_rows
    seen = []

    def simulate(scenario, case):
        seen.append(case)
        return SimpleNamespace(iteration_time_s=1.0, peak_memory_gib=1.0, oom=False)
    rows = {r["case"]: r for r in nemo_rows(ROOT, spec, simulate_fn=simulate)}
    big = "parallel/bridge/26.06/llama3-1-405b-1024gpu"
    assert big not in seen and "nemo_max_gpus 512" in rows[big]["note"]
    assert "parallel/nemo/gpt3-175b-512gpu" in seen
    assert "parallel/bridge/26.04/llama3-70b-64gpu" in seen
    assert all(r["ok"] is None for r in rows.values())          # reported, not gated
    # a model without a config is listed with its reason, never dropped
    ultra = rows["parallel/bridge/gb300/26.08/nemotron-3-ultra-256gpu-mxfp8-gbs256"]
    assert math.isnan(ultra["error"]) and "no sourced layer config" in ultra["note"]
    assert "parallel/bridge/26.06/nemotron-3-nano-16gpu" in seen    # hybrid models now
    assert "parallel/bridge/gb300/26.08/nemotron-3-super-64gpu-mxfp8-gbs512" in seen
    blackwell = pd.read_csv(ROOT / spec.files.bridge_blackwell)
    assert len(rows) == len(pd.read_csv(ROOT / spec.files.nemo)) + \
        len(pd.read_csv(ROOT / spec.files.bridge)) + (blackwell.variant == "primary").sum()


def _row(spec, kind, case):
    from simulator.validation.parallel import nemo
    file, cols = ((spec.files.nemo, nemo.NEMO_COLUMNS) if kind == "nemo"
                  else (spec.files.bridge, nemo.BRIDGE_COLUMNS))
    return next(r for r in pc.read_rows(ROOT, file, cols).to_dict("records")
                if nemo.case_id(kind, r) == case)


def test_a_table_row_becomes_the_megatron_run_it_describes(spec):
    from simulator.validation.parallel.nemo import scenario_of
    row = _row(spec, "bridge", "parallel/bridge/26.04/llama3-70b-64gpu")
    sc = scenario_of(row, ROOT, spec, "x", "bridge")
    st, tr = sc["strategy"], sc["training"]
    assert (st["tensor_model_parallel_size"], st["pipeline_model_parallel_size"],
            st["virtual_pipeline_model_parallel_size"], st["context_parallel_size"]) == \
        (4, 8, 5, 1)
    assert st["use_distributed_optimizer"] and st["overlap_grad_reduce"]
    assert st["tp_comm_overlap"] and st["grad_reduce_in_bf16"]      # cases.yaml, by model
    # 256 samples on 64 GPUs as TP4 x PP8: data parallel 2, 128 micro-batches of 1
    assert (tr["grad_accum"], tr["micro_batch"], tr["seq_len"]) == (256 // (1 * 2), 1, 8192)
    assert (tr["precision"], tr["fp8_recipe"]) == ("fp8", "current")   # FP8-CS: TE current scaling
    assert sc["cluster"]["nodes"] == 8
    fsdp = scenario_of(_row(spec, "bridge", "parallel/bridge/25.11/llama3-8b-8gpu"), ROOT,
                       spec, "x", "bridge")["strategy"]
    assert fsdp["use_megatron_fsdp"] and "use_torch_fsdp2" not in fsdp
    moe = scenario_of(_row(spec, "bridge", "parallel/bridge/26.04/qwen3-30b-a3b-16gpu"), ROOT,
                      spec, "x", "bridge")["strategy"]
    assert moe["expert_model_parallel_size"] == 16
    nemo = scenario_of(_row(spec, "nemo", "parallel/nemo/llama2-7b-8gpu"), ROOT, spec, "x")
    assert (nemo["training"]["precision"], nemo["training"]["fp8_recipe"]) == \
        ("fp8", "delayed")                                    # NeMo 24.07: TE delayed scaling


def test_qwen3_235b_runs_as_its_recipe_sets_it(spec):
    # Megatron-Bridge's H100 preset: TP2 x PP8 x VP4 x EP32 with expert tensor parallelism 1
    # on 256 GPUs, the embedding and the loss counted as pipeline layers (its recipe)
    from simulator.strategies import parse_strategy
    from simulator.validation.parallel.nemo import scenario_of
    sc = scenario_of(_row(spec, "bridge", "parallel/bridge/26.04/qwen3-235b-a22b-256gpu"),
                     ROOT, spec, "x", "bridge")
    model = pc.model_for(ROOT, spec.nemo_models["Qwen3_235B_a22B"])
    # Qwen/Qwen3-235B-A22B's config.json, the query width tied to hidden (the file says so)
    assert (model.layers, model.hidden, model.head_dim, model.kv_heads, model.num_experts,
            model.top_k, model.moe_ffn_hidden, model.vocab) == \
        (94, 4096, 128, 4, 128, 8, 1536, 151936)
    cfg = parse_strategy(sc["strategy"])
    plan = cfg.plan(256)
    plan.check(model, 256, seq_len=4096, names=cfg.plan_fields())
    # EP32 x ETP1 folds over a stage's TP2 x DP16 = 32 ranks (Megatron's MoE parallel folding)
    assert (plan.tp, plan.dp, plan.ep, plan.expert_tp, plan.vp) == (2, 16, 32, 1, 4)
    # 94 blocks + embedding + loss = 96 over 32 model stages: 3 each, less E and L at the ends
    assert plan.model_stage_blocks(94) == [3 - 1] + [3] * 30 + [3 - 1]
    assert sc["training"]["grad_accum"] == 8192 // (1 * 16)
    assert sc["strategy"]["grad_reduce_in_bf16"] and "tp_comm_overlap" not in sc["strategy"]


def test_a_run_simulated_out_of_memory_is_not_compared(spec):
    from simulator.validation.parallel.nemo import nemo_rows

    def simulate(scenario, case):
        return SimpleNamespace(iteration_time_s=1.0, peak_memory_gib=90.1, oom=True)
    rows = nemo_rows(ROOT, spec, simulate_fn=simulate, kinds=("nemo",))
    done = [r for r in rows if "simulated out of memory" in r["note"]]
    assert done and all(math.isnan(r["error"]) and "90.1 GiB of 80" in r["note"]
                        for r in done)


@pytest.mark.parametrize("kind,case", [("nemo", "parallel/nemo/llama2-7b-8gpu"),
                                       ("nemo", "parallel/nemo/gpt3-20b-64gpu"),
                                       ("bridge", "parallel/bridge/25.11/llama3-8b-8gpu")])
def test_nvidias_h100_runs_within_20_percent_of_their_measurement(spec, kind, case):
    # dense Megatron on DGX H100, nothing fitted on these rows: the GPU's kernel factors
    # (fitted on llm-foundry's FSDP rows) and Transformer Engine's fused kernels
    from simulator.validation.parallel.nemo import nemo_rows
    row = next(r for r in nemo_rows(ROOT, spec, kinds=(kind,),
                                    simulate_fn=_only(case)) if r["case"] == case)
    measured = float(_row(spec, kind, case)["tokens_per_s_per_gpu"])
    assert row["measured"] == measured
    assert abs(row["simulated"] / measured - 1) <= 0.20, row


def _only(case):
    from simulator.validation.parallel.iteration import simulate

    def run(scenario, name):
        if name != case:
            raise ConfigError("not this test's row")
        return simulate(scenario, name)
    return run


def _strict_xfail_if_known(case: str):
    from simulator.validation import known_misses as km
    known = km.load()
    return pytest.mark.xfail(case in known, reason=known.get(case, ""), strict=True)


@_strict_xfail_if_known("parallel/selene/22b/seqsel/fits")
def test_the_22b_sp_selective_run_fits_in_80_gb(spec):
    # a recorded known miss runs as a strict expected failure: it turns into an error when
    # the simulator models selective recompute, so the record cannot go stale
    case = "parallel/selene/22b/seqsel/iteration"
    _, fits = iteration_rows(ROOT, spec, only={case})
    assert fits["ok"] is True


def test_selene_runs_above_max_gpus_are_listed_not_simulated_and_left_out_of_the_median(spec):
    seen = []

    def simulate(scenario, case):
        seen.append(case)
        return SimpleNamespace(iteration_time_s=1.0, peak_memory_gib=1.0, oom=False)
    small = spec.model_copy(update={"selene_max_gpus": 8})
    rows = iteration_rows(ROOT, small, simulate_fn=simulate)
    runs = [r for r in rows if r["kind"] == "iteration"]
    skipped = [r for r in runs if r.get("skipped")]
    # only the 22B runs (8 GPUs) are simulated; 175B (64), 530B (280) and 1T (512) listed
    assert {c.split("/")[2] for c in seen} == {"22b"}
    assert len(skipped) == 6 and all("selene_max_gpus 8" in r["note"] for r in skipped)
    gate = median_case(rows, small)
    # every simulated row is measured/1.0 - 1 off: the median of the 22B rows only
    errors = sorted(abs(1.0 - r["measured"]) / r["measured"] for r in runs
                    if not r.get("skipped"))
    assert gate["error"] == pytest.approx((errors[0] + errors[1]) / 2)
    assert gate["note"] == "2 of 8 rows simulated (6 above selene_max_gpus)"


def test_every_recorded_run_of_the_reported_kinds_can_be_ordered(spec):
    """`validate parallel` records every run, then starts the biggest first (runs._size:
    nodes x micro-batches): each kind's scenario must say both, the MLPerf rows' too."""
    from simulator.validation.parallel.mlperf import mlperf_rows
    from simulator.validation.parallel.nemo import nemo_rows
    from simulator.validation.parallel.runs import _size, recorder
    from simulator.validation.parallel.simumax import simumax_rows
    jobs: dict = {}
    for rows in (nemo_rows, simumax_rows, mlperf_rows):
        rows(ROOT, spec, simulate_fn=recorder(jobs))
    assert any(case.startswith("parallel/mlperf/") for case in jobs)
    assert all(_size(scenario) >= 1 for scenario in jobs.values())
