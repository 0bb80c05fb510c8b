"""Pipeline bubbles on an idle fabric equal the schedules' formulas (issue 41), replayed by
the engine on the generator's own trace: equal stages (one block per model chunk; the
embedding, the head and the optimizer free), each chunk's forward 1 s and backward 2 s
(zero-bubble schedules: B 1 s, W 1 s), every send, receive and collective of zero bytes, so
that communication costs only its fixed per-message latency (microseconds against passes of
a second: the bound below).

The arithmetic, per schedule (p stages, m micro-batches, v chunks a rank, t_f and t_b one
rank's forward and backward of one micro-batch over all its chunks):

* GPipe and 1F1B: T = (m + p - 1)(t_f + t_b); bubble (p - 1)/(m + p - 1).
* Interleaved 1F1B (Narayanan et al. 2021, SC21, section 2.2.2): the bubble shrinks v times,
  t_pb = (p - 1)(t_f + t_b) / v, so T = m (t_f + t_b) + (p - 1)(t_f + t_b) / v and the
  bubble fraction is (p - 1)/(v m + p - 1).
* ZB-H1 (Qi et al. 2023): T = m (t_f + t_b + t_w) + (p - 1)(t_f + t_b - t_w).
* ZB-V: T = 6 m + (p - 1) in chunk units (the last rank's wait for the p - 1 upstream
  chunk forwards, which no order avoids; schedules.bubble_fraction).
"""

from __future__ import annotations

import dataclasses

import pytest

from simulator.models import load_model
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario, resolve_scenario
from simulator.strategies import World
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.generate import build_parallel
from simulator.strategies.parallel.schedules import SPLIT_W, bubble_fraction

GPT = load_model("gpt3-1.3b")
LATENCY_BOUND = 1e-5        # of the step: zero-byte messages cost microseconds each


def idle_fabric_step(schedule: str, pp: int, m: int, vp: int) -> float:
    """The engine's step time of the idealised pipeline described in the module doc."""
    plan = ParallelPlan(pp=pp, vp=vp, schedule=schedule, dp_mode="ddp")
    model = dataclasses.replace(GPT, layers=pp * vp)
    trace = build_parallel(model, plan, MegatronConfig(micro_batch=1, grad_accum=m),
                           World(plan.size, min(8, plan.size)), seq_len=128)
    split = schedule in SPLIT_W
    unit = {"qkv_proj": 1.0, "qkv_proj.dgrad": 1.0 if split else 2.0,
            "qkv_proj.wgrad": 1.0 if split else 0.0}
    for cls in trace.classes:
        for op in cls.ops:
            if op.kind == "compute":
                block = op.layer.startswith("block")
                op.duration_s = unit.get(op.name, 0.0) if block else 0.0
            else:
                op.size_bytes = 0
    scn = load_scenario(resolve_scenario("quickstart"), [f"cluster.gpus={pp}",
                                                        "training.seq_len=128",
                                                        "simulation.variability=none"])
    setup = dataclasses.replace(build_setup(scn, extrapolate_steps=False), trace=trace)
    return run_setup(setup).metrics.iteration_time_s


@pytest.mark.parametrize("schedule, pp, m, vp, step, bubble", [
    # 1F1B, p 4, m 8: T = (8 + 4 - 1)(1 + 2) = 33; bubble 3 x 3 / 33 = 3/11
    ("1f1b", 4, 8, 1, 33.0, 3 / 11),
    # 1F1B, p 8, m 24: T = (24 + 7) x 3 = 93; bubble 7/31
    ("1f1b", 8, 24, 1, 93.0, 7 / 31),
    # GPipe, p 4, m 4: T = (4 + 3) x 3 = 21; bubble 3/7
    ("gpipe", 4, 4, 1, 21.0, 3 / 7),
    # interleaved, p 4, v 2, m 8: a rank's t_f + t_b = 2 x 3 = 6 s a micro-batch;
    # T = 8 x 6 + 3 x 6 / 2 = 57; bubble 9/57 = 3/19 = (p - 1)/(v m + p - 1)
    ("interleaved_1f1b", 4, 8, 2, 57.0, 3 / 19),
    # interleaved, p 8, v 3, m 16: t_f + t_b = 9; T = 16 x 9 + 7 x 9 / 3 = 165; bubble
    # 21/165 = 7/55 = 7/(3 x 16 + 7)
    ("interleaved_1f1b", 8, 16, 3, 165.0, 7 / 55),
    # ZB-H1, p 4, m 8: T = 8 x 3 + 3 x (1 + 1 - 1) = 27; bubble 3/27 = 1/9
    ("zb_h1", 4, 8, 1, 27.0, 1 / 9),
    # ZB-V, p 4, m 8 (two chunks, 1 s each pass): T = 6 x 8 + 3 = 51; bubble 3/51
    ("zbv", 4, 8, 2, 51.0, 3 / 51),
])
def test_the_bubble_on_an_idle_fabric_is_the_formula(schedule, pp, m, vp, step, bubble):
    assert bubble_fraction(schedule, pp, m, vp) == pytest.approx(bubble, rel=1e-12)
    t = idle_fabric_step(schedule, pp, m, vp)
    assert t == pytest.approx(step, rel=LATENCY_BOUND)
    busy = 3.0 * m * vp                  # every rank's passes, no wait
    assert 1 - busy / t == pytest.approx(bubble, abs=LATENCY_BOUND)
