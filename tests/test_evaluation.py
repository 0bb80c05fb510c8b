"""The evaluation pass (`training.evaluation`, simulator/evaluation.py): forward-only steps cut
from the training step, without its CUDA graphs; a run's evaluations and their time and
energy written out; `run` prints them."""

from __future__ import annotations

import json
import math

import pytest

from simulator.errors import ConfigError
from simulator.evaluation import (EvalPass, eval_rows, eval_scenario, evaluation_pass,
                                  forward_only, run_totals)
from simulator.scenario import Evaluation, load_scenario
from simulator.trace import Communicator, Op, RankClass, Trace
from test_cli import run_main


def test_evaluations_in_a_run_are_counted_from_the_first():
    """MLPerf LoRA: every 48 steps from step 192: a run of 384 steps evaluates at 192, 240,
    288, 336 and 384 (1 + (384 - 192) // 48 = 5); none before step 192; by default the first
    is at every_steps."""
    ev = Evaluation(every_steps=48, samples=173, first_step=192)
    assert [ev.count(n) for n in (191, 192, 239, 240, 384, 432)] == [0, 1, 1, 2, 5, 6]
    assert Evaluation(every_steps=10, samples=1).count(25) == 2       # steps 10 and 20


def _pass(every=40, first=40, time_s=3.0, kwh=0.05) -> EvalPass:
    return EvalPass(every, first, 64, 16, 4, time_s / 4, time_s, kwh, 8000.0, 600.0)


def test_a_runs_time_and_energy_add_its_evaluations_written_out():
    """100 steps of 0.5 s and 0.01 kWh, an evaluation of 3 s and 0.05 kWh every 40 steps:
    evaluations at steps 40 and 80, so 100 x 0.5 + 2 x 3 = 56 s and 100 x 0.01 + 2 x 0.05
    = 1.1 kWh; without an evaluation pass, the steps alone."""
    t = run_totals(100, 0.5, 0.01, _pass())
    assert (t.evaluations, t.train_s, t.eval_s) == (2, 50.0, 6.0)
    assert t.time_s == pytest.approx(56.0) and t.kwh == pytest.approx(1.1)
    alone = run_totals(100, 0.5, 0.01, None)
    assert (alone.evaluations, alone.time_s) == (0, 50.0) and alone.kwh == pytest.approx(1.0)
    assert run_totals(39, 0.5, None, _pass()).kwh is None


def test_run_prints_the_share_of_time_and_energy_written_out():
    """Every 40 steps of 0.5 s: a period of 40 x 0.5 + 3 = 23 s, of which 3 / 23 = 13.0%
    evaluates; energy 0.05 / (40 x 0.01 + 0.05) = 11.1%."""
    class E:
        kwh_per_step = 0.01
    rows = dict(eval_rows(_pass(), 0.5, E()))
    assert rows["eval_time_share"].startswith(f"{3 / 23:.1%}")
    assert rows["eval_energy_share"].startswith(f"{0.05 / 0.45:.1%}")
    assert eval_rows(None, 0.5) == []


def _op(i, phase, stream="compute", kind="compute", name="k", deps=(), **kw):
    return Op(id=i, stream=stream, kind=kind, name=name, phase=phase, deps=deps,
              flops=1e9 if kind == "compute" else 0.0, op_class="matmul" if kind == "compute"
              else "", mem_alloc_bytes=10, mem_free_bytes=0, **kw)


def test_forward_only_keeps_the_forward_and_its_dispatch_and_nothing_else():
    """Kept: forward kernels, their TP collective, the host's forward dispatch, an FSDP
    layer's parameter all-gather; dropped: backward, optimizer, the gradient reduction, the
    backward dispatch and the distributed optimizer's overlapped bucket all-gather (the
    previous update's). A dependency on a dropped op goes; no op allocates memory."""
    ops = [_op(0, "forward", "dp_gather", "collective", "params.bucket0", collective="all_gather",
               size_bytes=8, comm="dp"),
           _op(1, "host", "host", "delay", "dispatch.forward", duration_s=1e-5,
               attrs={"dispatches": "forward"}),
           _op(2, "forward", "dp_gather", "collective", "params.block.0",
               collective="all_gather", size_bytes=8, comm="dp"),
           _op(3, "forward", deps=(0, 1, 2)),
           _op(4, "forward", "tp", "collective", "all_gather.block.0", deps=(3,),
               collective="all_gather", size_bytes=8, comm="dp"),
           _op(5, "host", "host", "delay", "dispatch.backward", duration_s=1e-5,
               attrs={"dispatches": "backward"}),
           _op(6, "backward", deps=(4, 5)),
           _op(7, "backward", "dp", "collective", "grads.bucket0", deps=(6,),
               collective="reduce_scatter", size_bytes=8, comm="dp"),
           _op(8, "optimizer", deps=(7,))]
    trace = Trace(2, [RankClass("c", (0, 1), ops)], {"dp": Communicator("dp", ((0, 1),))},
                  meta={"global_batch": 2})
    got = forward_only(trace)
    kept = got.classes[0].ops
    assert [op.id for op in kept] == [1, 2, 3, 4]
    assert kept[2].deps == (1, 2)
    assert all(op.mem_alloc_bytes == 0 and op.mem_free_bytes == 0 for op in kept)
    assert got.meta["evaluation"] is True and "evaluation" not in trace.meta
    got.validate()


def test_an_evaluation_drops_the_training_steps_cuda_graphs():
    scn = load_scenario("llama2-70b-lora-8gpu",
                        ["strategy.cuda_graph_impl=transformer_engine",
                         "training.evaluation={every_steps: 48, samples: 173}"])
    assert scn.strategy["cuda_graph_impl"] == "transformer_engine"
    assert "cuda_graph_impl" not in eval_scenario(scn).strategy
    assert eval_scenario(scn).training == scn.training


@pytest.fixture(scope="module")
def lora_eval():
    sets = ["strategy.cuda_graph_impl=transformer_engine", "simulation.variability=none",
            "training.evaluation={every_steps: 48, samples: 173, first_step: 192}"]
    scn = load_scenario("llama2-70b-lora-8gpu", sets)
    return scn, evaluation_pass(scn, "llama2-70b-lora-8gpu")


def test_an_evaluation_is_its_batches_of_forward_steps_written_out(lora_eval):
    """173 samples in batches of the global batch 8: ceil(173 / 8) = 22 forward-only
    steps; the evaluation's time and energy are 22 x the forward step's."""
    from simulator.energy.timeline import energy_of
    from simulator.pipeline import build_setup, run_setup, with_trace
    scn, ev = lora_eval
    assert (ev.global_batch, ev.batches) == (8, math.ceil(173 / 8)) == (8, 22)
    setup = with_trace(build_setup(eval_scenario(scn), "x"), forward_only)
    ops = [op for c in setup.trace.classes for op in c.ops]
    assert {op.phase for op in ops} == {"forward", "host"}
    assert not any(op.attrs.get("launch") == "graph" for op in ops)
    res = run_setup(setup)
    e = energy_of(res)
    assert ev.batch_s == res.metrics.iteration_time_s
    assert ev.time_s == pytest.approx(22 * ev.batch_s)
    assert ev.kwh == pytest.approx(22 * e.kwh_per_step)
    assert ev.avg_node_w == pytest.approx(e.avg_node_w) and ev.loader_s == 0.0
    train = run_setup(build_setup(scn, "x")).metrics.iteration_time_s
    assert 0.3 < ev.batch_s / train < 0.6       # a forward of a LoRA step: no weight gradients


def test_an_evaluation_declared_badly_is_refused_naming_the_field():
    for value, field in (("{every_steps: 0, samples: 8}", "training.evaluation.every_steps"),
                         ("{every_steps: 4}", "training.evaluation.samples"),
                         ("{every_steps: 4, samples: 8, often: 1}", "training.evaluation.often")):
        with pytest.raises(ConfigError) as exc:
            load_scenario("quickstart", [f"training.evaluation={value}"])
        assert field in str(exc.value), (value, str(exc.value))


def test_run_reports_the_evaluation_pass_and_nothing_without_one(capsys):
    small = ["--set", "training.seq_len=1024", "--set", "cluster.topology=dgx-h100"]
    code, out, err = run_main(capsys, "run", *small, "--set",
                              "training.evaluation={every_steps: 100, samples: 64}",
                              "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    ev = d["evaluation"]
    assert ev["batches"] == math.ceil(64 / ev["global_batch"])
    assert ev["time_s"] == pytest.approx(ev["batches"] * ev["batch_s"])
    code, out, err = run_main(capsys, "run", *small, "--set",
                              "training.evaluation={every_steps: 100, samples: 64}")
    assert code == 0 and "eval_pass_s" in out and "eval_energy_share" in out
    code, out, err = run_main(capsys, "run", *small)
    assert code == 0 and "eval_pass_s" not in out


def test_an_evaluation_in_its_own_batches_splits_them_over_the_data_parallel_ranks():
    """The quickstart (FSDP on 8 GPUs, micro-batch 2, global batch 16) evaluating 100
    samples in batches of 32: ceil(100 / 32) = 4 forward steps of 32 / (8 x 2) = 2
    micro-batches each; a batch that is not whole micro-steps is refused naming
    training.evaluation.global_batch."""
    base = ["cluster.topology=dgx-h100", "simulation.variability=none"]
    scn = load_scenario("quickstart", base + [
        "training.evaluation={every_steps: 10, samples: 100, global_batch: 32}"])
    ev = evaluation_pass(scn, "quickstart")
    assert (ev.global_batch, ev.batches) == (32, 4)
    same = evaluation_pass(load_scenario("quickstart", base + [
        "training.evaluation={every_steps: 10, samples: 100}"]), "quickstart")
    assert same.global_batch == 8 * 2 * 1                 # GPUs x micro-batch x grad_accum
    assert ev.batch_s > same.batch_s              # twice the samples a forward step
    bad = load_scenario("quickstart", base + [
        "training.evaluation={every_steps: 10, samples: 100, global_batch: 20}"])
    with pytest.raises(ConfigError) as exc:
        evaluation_pass(bad, "quickstart")
    assert exc.value.field == "training.evaluation.global_batch"


def test_a_step_without_forward_kernels_has_no_evaluation_pass_and_says_so(monkeypatch):
    """A trace whose ops mark no forward kernels (an imported trace without phases) leaves
    nothing to evaluate: refused naming training.evaluation, not a zero-second pass."""
    import simulator.evaluation as evaluation
    monkeypatch.setattr(evaluation, "forward_only", lambda trace: Trace(
        trace.world_size, [RankClass(c.id, c.ranks, []) for c in trace.classes],
        trace.communicators, trace.meta))
    scn = load_scenario("quickstart", ["training.evaluation={every_steps: 10, samples: 16}"])
    with pytest.raises(ConfigError) as exc:
        evaluation.evaluation_pass(scn, "quickstart")
    assert exc.value.field == "training.evaluation" and "no forward kernels" in str(exc.value)
