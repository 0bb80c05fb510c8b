"""torchtitan's Interleaved1F1B as torch.distributed.pipelining runs it: a table of time
steps walked in lockstep (``ScheduleInterleaved1F1B`` + ``PipelineScheduleMulti.
_step_microbatches``, torch 2.5-2.6; :func:`schedules.lockstep_steps`, :mod:`.generate`).

The table, as torch builds it, for rank ``r`` of ``p`` with ``v`` chunks and ``m``
micro-batches: ``r`` empty steps, ``w = (v - 1) p + 2 (p - 1 - r)`` warm-up forwards,
empty steps up to step ``v p + 2 (p - 1 - r)`` (``p - r`` of them), then forward/backward
pairs, then (empty, backward) pairs for the last ``w`` backwards.

The bubble on an idle fabric (the model of tests/test_pipeline_bubbles.py: each chunk's
forward 1 s, backward 2 s, zero-byte messages): torch's table aligns the ranks' steady
phases (every rank runs a forward in the same step, a backward in the next), so the step is
Megatron's interleaved step plus one forward: the last rank waits an empty step after its
warm-up (``p - r = 1``) while rank ``p - 2`` runs the forward it will receive, where a rank
that waits only for its data would start that forward one step earlier.

    T = m v (t_f + t_b) + (p - 1)(t_f + t_b) + t_f
"""

from __future__ import annotations

import dataclasses

import pytest

from simulator.errors import ConfigError
from simulator.strategies import World
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.frameworks.torchtitan import TorchtitanConfig
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.generate import build_parallel
from simulator.strategies.parallel.schedules import Action, lockstep_steps, schedule

from test_pipeline_bubbles import GPT, LATENCY_BOUND, build_setup, load_scenario, \
    resolve_scenario, run_setup


MESSAGE_S = 2e-5     # a zero-byte message's fixed cost (NCCL p2p latency), at most


def _steps_bound(pp: int, m: int, vp: int) -> float:
    """Lockstep pays a message's latency in every time step: the bound on the step."""
    return MESSAGE_S * max(len(row) for row in lockstep_steps(pp, m, vp))


def _text(row) -> str:
    return " ".join(f"{a.kind}{a.micro}c{a.chunk}" if a else "-" for a in row)


def test_the_table_is_torchs():
    # p 2, v 2, m 4. Rank 0: no leading empty step, w = 1 x 2 + 2 x 1 = 4 forwards,
    # p - r = 2 empty steps (first pair at step v p + 2 (p - 1) = 6), four (F, B) pairs,
    # four (-, B). Rank 1: one empty step, w = 2, 1 empty step (first pair at step 4).
    rows = lockstep_steps(2, 4, 2)
    assert _text(rows[0]) == ("F0c0 F1c0 F0c1 F1c1 - - F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 "
                              "B1c0 - B2c1 - B3c1 - B2c0 - B3c0")
    assert _text(rows[1]) == ("- F0c0 F1c0 - F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 "
                              "B2c1 F3c1 B3c1 - B2c0 - B3c0")


@pytest.mark.parametrize("pp, m, vp", [(2, 4, 2), (4, 8, 2), (8, 16, 2), (4, 12, 3)])
def test_its_passes_are_megatrons_order_when_m_exceeds_p(pp, m, vp):
    table = lockstep_steps(pp, m, vp)
    assert [[a for a in row if a is not None] for row in table] == \
        schedule("interleaved_1f1b", pp, m, vp)


def test_at_m_equal_p_torch_interleaves_where_megatron_runs_every_forward_first():
    # p 4, v 2, m 4, rank 2: torch's w = 4 + 2 = 6 forwards (F0c0..F3c0, F0c1, F1c1),
    # then F2c1 B0c1; Megatron runs its 8 forwards first (F3c1 seventh)
    passes = [a for a in lockstep_steps(4, 4, 2)[2] if a is not None]
    assert passes[6:8] == [Action("F", 2, 1), Action("B", 0, 1)]
    assert schedule("interleaved_1f1b", 4, 4, 2)[2][6:8] == [Action("F", 2, 1),
                                                             Action("F", 3, 1)]


def _engine_step(plan: ParallelPlan, m: int, slow_forward: dict[int, float]) -> float:
    """The engine's step of ``plan`` with one block per model stage, each forward 1 s and
    backward 2 s (``slow_forward``: model stage -> its forward), every message of zero
    bytes, the rest free."""
    model = dataclasses.replace(GPT, layers=plan.pp * plan.vp)
    trace = build_parallel(model, plan, MegatronConfig(micro_batch=1, grad_accum=m),
                           World(plan.size, min(8, plan.size)), seq_len=128)
    for cls in trace.classes:
        for op in cls.ops:
            if op.kind != "compute":
                op.size_bytes = 0
                continue
            block = int(op.layer.split(".")[1]) if op.layer.startswith("block") else -1
            forward = slow_forward.get(block, 1.0)
            op.duration_s = {"qkv_proj": forward, "qkv_proj.dgrad": 2.0}.get(op.name, 0.0) \
                if block >= 0 else 0.0
    scn = load_scenario(resolve_scenario("quickstart"), [f"cluster.gpus={plan.pp}",
                                                        "training.seq_len=128",
                                                        "simulation.variability=none"])
    setup = dataclasses.replace(build_setup(scn, extrapolate_steps=False), trace=trace)
    return run_setup(setup).metrics.iteration_time_s


def idle_step(pp: int, m: int, vp: int, lockstep: bool) -> float:
    return _engine_step(ParallelPlan(pp=pp, vp=vp, schedule="interleaved_1f1b", dp_mode="ddp",
                                     lockstep=lockstep), m, {})


@pytest.mark.parametrize("pp, m, vp, megatron, torch", [
    # p 4, v 2, m 8: Megatron 8 x 2 x 3 + 3 x 3 = 57; lockstep 57 + 1 = 58
    (4, 8, 2, 57.0, 58.0),
    # p 2, v 2, m 4: 4 x 2 x 3 + 1 x 3 = 27; 28
    (2, 4, 2, 27.0, 28.0),
    # p 4, v 3, m 8: 8 x 3 x 3 + 3 x 3 = 81; 82
    (4, 8, 3, 81.0, 82.0),
])
def test_the_lockstep_bubble_on_an_idle_fabric(pp, m, vp, megatron, torch):
    assert idle_step(pp, m, vp, False) == pytest.approx(megatron, rel=LATENCY_BOUND)
    assert idle_step(pp, m, vp, True) == pytest.approx(torch, abs=_steps_bound(pp, m, vp))


def test_a_rank_waits_for_its_neighbours_pass_of_the_same_step():
    # p 2, v 2, m 2; every chunk's forward 1 s and backward 2 s, except model stage 1
    # (rank 1, chunk 0) whose forward takes 5 s. The table:
    rows = lockstep_steps(2, 2, 2)
    assert _text(rows[0]) == "F0c0 F1c0 F0c1 F1c1 - - - B0c1 - B1c1 - B0c0 - B1c0"
    assert _text(rows[1]) == "- F0c0 F1c0 - F0c1 B0c1 F1c1 B1c1 - B0c0 - B1c0"
    # Step by step (a step ends, on both ranks where they exchange, with the later pass):
    # t0 rank 0 F0c0 -> 1. t1 F1c0 (1 s) and rank 1's F0c0 (5 s), exchanged: 1 + 5 = 6.
    # t2 F0c1 and F1c0 (5 s): 11. t3 rank 0 F1c1: 12 (rank 1 receives it: 12).
    # t4 rank 1 F0c1 (last stage): 13. t5 B0c1, sent to rank 0: 15. t6 F1c1: 16.
    # t7 rank 0 B0c1 (15 + 2 = 17) with rank 1's B1c1 (16 + 2 = 18): 18.
    # t9 B1c1 / B0c0: 20. t11 B0c0 / B1c0: 22. t13 rank 0 B1c0: 24.
    plan = ParallelPlan(pp=2, vp=2, schedule="interleaved_1f1b", dp_mode="ddp", lockstep=True)
    assert _engine_step(plan, 2, {1: 5.0}) == pytest.approx(24.0, abs=_steps_bound(2, 2, 2))
    # Megatron's data-driven run of the same plan (its own order: every forward first
    # at m = p): rank 0 F0c0 F1c0 [0, 2], rank 1 F0c0 [1, 6] F1c0 [6, 11]; rank 0 F0c1
    # [6, 7] F1c1 [11, 12]; rank 1 F0c1 [11, 12] F1c1 [12, 13] B0c1 [13, 15] B1c1
    # [15, 17]; rank 0 B0c1 [15, 17] B1c1 [17, 19]; rank 1 B0c0 [17, 19] B1c0 [19, 21];
    # rank 0 B0c0 [19, 21] B1c0 [21, 23]: 23
    data = dataclasses.replace(plan, lockstep=False)
    assert _engine_step(data, 2, {1: 5.0}) == pytest.approx(23.0, rel=LATENCY_BOUND)


def test_torchtitan_interleaved_runs_in_lockstep_and_megatron_does_not():
    titan = TorchtitanConfig(parallelism={"pipeline_parallel_degree": 4,
                                          "pipeline_parallel_schedule": "Interleaved1F1B"})
    assert titan.plan(8, layers=16).lockstep is True
    one = TorchtitanConfig(parallelism={"pipeline_parallel_degree": 4})
    assert one.plan(8, layers=16).lockstep is False
    mega = MegatronConfig(pipeline_model_parallel_size=4,
                          virtual_pipeline_model_parallel_size=2, grad_accum=8)
    assert mega.plan(8).lockstep is False


def test_lockstep_needs_the_interleaved_schedule():
    with pytest.raises(ConfigError) as err:
        ParallelPlan(pp=2, schedule="1f1b", lockstep=True)
    assert err.value.field == "plan.lockstep"
    with pytest.raises(ConfigError) as err:
        ParallelPlan(pp=2, vp=2, schedule="interleaved_1f1b", lockstep="yes")
    assert err.value.field == "plan.lockstep"
