"""Pipeline schedules: every pass once and in order, the cross-stage dependencies
satisfiable, and on an idealised uniform model (a tiny event loop below: each pass a fixed
number of time units, communication free) the step length the published bubble formulas
give; peak in-flight micro-batches; bad input."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.strategies.parallel.schedules import (
    SCHEDULES, SPLIT_W, Action, bubble_fraction, check_schedule, peak_in_flight, schedule,
    stage_location, virtual_stage)

# (name, pp, micro-batches, vp) cases small enough to replay in a millisecond each
CASES = [(n, p, m, 1) for n in ("gpipe", "1f1b", "zb_h1") for p in (1, 2, 4, 5)
         for m in (1, 3, 4, 8)]
CASES += [("interleaved_1f1b", p, m, v) for p in (2, 4) for m in (p, 2 * p, 3 * p)
          for v in (2, 3)]
CASES += [("zbv", p, m, 2) for p in (1, 2, 4) for m in (1, 2, 3, 5, 8, 9)]


def _dependency(pp: int, vp: int, stage: int, action: Action):
    """The pass (kind, micro, stage) that must end before ``action`` on ``stage`` starts."""
    last = pp * vp - 1                               # zbv: vp = 2, a V over 2 pp stages
    if action.kind == "F":
        return ("F", action.micro, stage - 1) if stage > 0 else None
    if action.kind == "B":
        return ("B", action.micro, stage + 1) if stage < last else ("F", action.micro, stage)
    return ("B", action.micro, stage)


def replay(name: str, pp: int, m: int, vp: int, f: int, b: int, w: int = 0) -> int:
    """Step length when each rank runs its actions in order, one at a time, each starting
    when the rank is free and the pass it depends on (on whichever rank) has ended."""
    ranks = schedule(name, pp, m, vp)
    ends: dict[tuple, int] = {}
    free, nxt = [0] * pp, [0] * pp
    units = {"F": f, "B": b, "W": w}
    while any(nxt[r] < len(ranks[r]) for r in range(pp)):
        moved = False
        for r in range(pp):
            while nxt[r] < len(ranks[r]):
                action = ranks[r][nxt[r]]
                stage = virtual_stage(name, pp, vp, r, action.chunk)
                dep = _dependency(pp, vp, stage, action)
                if dep is not None and dep not in ends:
                    break
                start = max(free[r], ends[dep] if dep else 0)
                ends[action.kind, action.micro, stage] = free[r] = start + units[action.kind]
                nxt[r] += 1
                moved = True
        assert moved, f"{name} pp={pp} m={m} vp={vp}: ranks wait on each other (deadlock)"
    return max(free)


@pytest.mark.parametrize("name,pp,m,vp", CASES)
def test_each_pass_once_and_f_before_b_before_w_on_every_virtual_stage(name, pp, m, vp):
    kinds = "FBW" if name in SPLIT_W else "FB"
    for rank, actions in enumerate(schedule(name, pp, m, vp)):
        position = {(a.kind, a.micro, a.chunk): i for i, a in enumerate(actions)}
        assert len(position) == len(actions) == len(kinds) * m * vp
        for micro in range(m):
            for chunk in range(vp):
                order = [position[k, micro, chunk] for k in kinds]
                assert order == sorted(order), (rank, micro, chunk, order)


@pytest.mark.parametrize("name,pp,m,vp", CASES)
def test_the_cross_stage_order_is_satisfiable(name, pp, m, vp):
    assert replay(name, pp, m, vp, f=1, b=2) > 0


@pytest.mark.parametrize("pp,m", [(1, 3), (2, 4), (4, 8), (4, 3), (5, 12)])
@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(name, pp, m):
    # F = 1, B = 2 units: m (F + B) = 3 m units of work per rank, and the fill and drain add
    # (p - 1)(F + B): step = 3 (m + p - 1), idle share (p - 1) / (m + p - 1).
    step = replay(name, pp, m, 1, f=1, b=2)
    assert step == 3 * (m + pp - 1)
    assert 1 - 3 * m / step == pytest.approx(bubble_fraction(name, pp, m))
    assert bubble_fraction(name, pp, m) == pytest.approx((pp - 1) / (m + pp - 1))


@pytest.mark.parametrize("pp,m,vp", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (4, 12, 3), (8, 16, 2)])
def test_interleaved_bubble_is_the_1f1b_bubble_divided_by_vp(pp, m, vp):
    # Each chunk is 1/vp of a stage: F = 1, B = 2 units per chunk, so 3 m vp units of work
    # per rank; the fill and drain are (p - 1)(F + B) = 3 (p - 1) units, vp times less than
    # 1F1B's 3 (p - 1) vp in these units: step = 3 m vp + 3 (p - 1).
    step = replay("interleaved_1f1b", pp, m, vp, f=1, b=2)
    assert step == 3 * m * vp + 3 * (pp - 1)
    assert 1 - 3 * m * vp / step == pytest.approx(bubble_fraction("interleaved_1f1b", pp, m, vp))
    one_f_one_b = 3 * (pp - 1) * vp                  # the 1F1B bubble in chunk units
    assert step - 3 * m * vp == one_f_one_b / vp


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 5), (8, 16)])
def test_zb_h1_bubble_is_a_third_of_1f1b(pp, m):
    # F = B = W = 1 unit: 3 m units of work; the bubble is (p - 1)(F + B - W) = p - 1 units
    # against 1F1B's (p - 1)(F + B + W) = 3 (p - 1).
    step = replay("zb_h1", pp, m, 1, f=1, b=1, w=1)
    assert step == 3 * m + (pp - 1)
    assert (step - 3 * m) * 3 == replay("1f1b", pp, m, 1, f=1, b=2) - 3 * m
    assert 1 - 3 * m / step == pytest.approx(bubble_fraction("zb_h1", pp, m))


@pytest.mark.parametrize("pp,m", [(2, 4), (2, 6), (4, 8), (4, 12), (8, 16)])
def test_zbv_leaves_only_the_last_ranks_warm_up(pp, m):
    # Two chunks of half a stage, F = B = W = 1 unit per chunk: 6 m units of work per rank;
    # rank p - 1 cannot start before the p - 1 upstream chunk forwards, and nothing else
    # idles once m >= 2 p: step = 6 m + p - 1.
    step = replay("zbv", pp, m, 2, f=1, b=1, w=1)
    assert step == 6 * m + pp - 1
    assert 1 - 6 * m / step == pytest.approx(bubble_fraction("zbv", pp, m, 2))


@pytest.mark.parametrize("pp,m", [(4, 8), (4, 2), (8, 16), (1, 3)])
def test_1f1b_rank_r_holds_p_minus_r_micro_batches_and_gpipe_all_m(pp, m):
    assert [peak_in_flight(a) for a in schedule("1f1b", pp, m)] == \
        [min(pp - r, m) for r in range(pp)]
    assert [peak_in_flight(a) for a in schedule("gpipe", pp, m)] == [m] * pp


def test_zero_bubble_memory_matches_1f1b_first_stage():
    # ZB-H1 keeps every rank at p in flight (Qi et al.: "the same number of in-flight
    # micro-batches" on all stages); ZB-V holds 2 p half-stage chunks = p stages' worth.
    assert [peak_in_flight(a) for a in schedule("zb_h1", 4, 8)] == [4, 4, 4, 4]
    assert [peak_in_flight(a) for a in schedule("zbv", 4, 8, 2)] == [8, 8, 8, 8]


def test_interleaved_first_rank_holds_p_plus_p_minus_1_over_v_stages():
    # Megatron's warm-up on rank r: 2 (p - r - 1) + (v - 1) p chunk forwards, one more in
    # the steady phase; rank 0: (v + 1) p - 1 chunks = p + (p - 1) / v stages' worth
    # (Korthikanti et al. 2022, the 1 + (p - 1) / (p v) factor on p micro-batches).
    pp, vp = 4, 2
    peaks = [peak_in_flight(a) for a in schedule("interleaved_1f1b", pp, 8, vp)]
    assert peaks == [2 * (pp - r - 1) + (vp - 1) * pp + 1 for r in range(pp)]
    assert peaks[0] / vp == pp + (pp - 1) / vp


def test_virtual_stages_and_their_inverse():
    assert [virtual_stage("interleaved_1f1b", 4, 2, 1, c) for c in (0, 1)] == [1, 5]
    assert [virtual_stage("zbv", 4, 2, 1, c) for c in (0, 1)] == [1, 6]
    for name, pp, vp in (("interleaved_1f1b", 4, 3), ("zbv", 4, 2), ("1f1b", 4, 1)):
        for rank in range(pp):
            for chunk in range(vp):
                stage = virtual_stage(name, pp, vp, rank, chunk)
                assert stage_location(name, pp, vp, stage) == (rank, chunk)


def test_every_name_is_covered():
    assert {c[0] for c in CASES} == set(SCHEDULES)


@pytest.mark.parametrize("args,field,words", [
    (("pipedream", 4, 8, 1), "strategy.schedule", "unknown pipeline schedule"),
    (("1f1b", 0, 8, 1), "strategy.pp", ">= 1"),
    (("1f1b", 4, 0, 1), "training.grad_accum", ">= 1"),
    (("1f1b", 4, 8, 2), "strategy.vp", "one model chunk per rank"),
    (("gpipe", 4, 8, 3), "strategy.vp", "one model chunk per rank"),
    (("interleaved_1f1b", 4, 6, 2), "training.grad_accum", "multiple of the pipeline size"),
    (("interleaved_1f1b", 4, 8, 1), "strategy.vp", "at least 2 model chunks"),
    (("interleaved_1f1b", 1, 8, 2), "strategy.pp", "at least 2 pipeline stages"),
    (("zbv", 4, 8, 3), "strategy.vp", "exactly 2 model chunks"),
])
def test_bad_input_names_the_field(args, field, words):
    with pytest.raises(ConfigError, match=words) as info:
        schedule(*args)
    assert info.value.field == field
    with pytest.raises(ConfigError):
        bubble_fraction(*args)


def test_a_framework_spelling_can_name_its_own_field():
    with pytest.raises(ConfigError) as info:
        check_schedule("interleaved_1f1b", 4, 6, 2,
                       fields={"micro_batches": "strategy.num_microbatches"})
    assert info.value.field == "strategy.num_microbatches"
