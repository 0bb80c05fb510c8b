"""Fabrics behind one interface: exact small traces, and contention."""

import numpy as np
import pytest

from simulator.network.fabric import Flow, fractions, make_fabric
from simulator.sim import Environment


def run(fidelity, capacity, flows, starts=None):
    env = Environment()
    fabric = make_fabric(fidelity, env, np.asarray(capacity, float))
    events = {}

    def starter(i, flow, delay):
        yield env.timeout(delay)
        events[i] = fabric.transfer(flow)

    for i, flow in enumerate(flows):
        env.process(starter(i, flow, (starts or [0] * len(flows))[i]))
    env.run()
    return [events[i].value.end_s for i in range(len(flows))], fabric


def flow(size, links, latency=0.0):
    return Flow(size, np.asarray(links), np.ones(len(links)), latency)


def test_flow_fidelity_two_flows_then_one():
    # 100 B and 50 B on a 10 B/s link: both at 5 B/s until the 50 B one ends at t=10;
    # the other then has 50 B left at 10 B/s -> ends at t=15.
    ends, fabric = run("flow", [10.0], [flow(100, [0]), flow(50, [0])])
    assert ends == pytest.approx([15.0, 10.0])
    assert fabric.link_bytes[0] == pytest.approx(150.0)


def test_flow_fidelity_late_arrival_slows_the_first():
    # Flow A 100 B alone at 10 B/s for 5 s (50 B left); B (20 B) arrives: 5 B/s each.
    # B ends at 5 + 20/5 = 9; A has 50 - 20 = 30 B left at 10 B/s -> 12.
    ends, _ = run("flow", [10.0], [flow(100, [0]), flow(20, [0])], starts=[0, 5])
    assert ends == pytest.approx([12.0, 9.0])


def test_latency_precedes_bytes():
    ends, _ = run("flow", [10.0], [flow(100, [0], latency=2.0)])
    assert ends == pytest.approx([12.0])


def test_analytical_fidelity_ignores_other_flows():
    ends, _ = run("analytical", [10.0], [flow(100, [0]), flow(50, [0])])
    assert ends == pytest.approx([10.0, 5.0])


def test_simultaneous_arrivals_are_solved_once_per_connected_set():
    # four flows on one link, arriving together: the first, on an idle link, is solved at
    # once, alone; the three that join it are solved with it once, after the last of them
    # has arrived; none after they all finish together
    _, fabric = run("flow", [10.0], [flow(10, [0]) for _ in range(4)])
    assert fabric.solves == 2
    # four flows on four links: four sets, each solved alone
    _, fabric = run("flow", [10.0] * 4, [flow(10, [i]) for i in range(4)])
    assert fabric.solves == 4


def test_unknown_fidelity_names_the_choices():
    with pytest.raises(KeyError, match="analytical"):
        make_fabric("packet", Environment(), np.ones(1))


def test_a_flow_shorter_than_the_clock_resolution_still_finishes():
    # 4 bytes at 1.2e8 B/s take 3.3e-8 s; at t = 1e9 s, now + dt == now in float64 (the
    # same happens at small t with the few residual bytes float error leaves), so without
    # a minimum step the fabric would re-schedule itself forever.
    start = 1e9
    assert start + 4 / 1.2e8 == start
    ends, _ = run("flow", [1.2e8], [flow(4, [0])], starts=[start])
    assert ends[0] >= start and ends[0] - start < 1e-6


def test_every_fidelity_counts_link_bytes_and_only_flow_samples_the_load():
    # 100 B over links 0 and 1 (10 B/s each), links in groups 0 and 1. Both fidelities count
    # 100 B on each link. The analytical fabric sees the transfer alone: track() is a no-op
    # and samples stay empty. The flow fabric samples at each solve: both groups at 100%
    # from t=0, then 0 once the flow ends at t=10.
    for fidelity in ("analytical", "flow"):
        env = Environment()
        fabric = make_fabric(fidelity, env, np.array([10.0, 10.0]))
        fabric.track(np.array([0, 1]), 2)
        fabric.transfer(flow(100, [0, 1]))
        env.run()
        assert fabric.link_bytes == pytest.approx([100.0, 100.0])
        if fidelity == "analytical":
            assert fabric.samples == []
        else:
            assert [(t, list(f)) for t, f in fabric.samples] == [(0.0, [1.0, 1.0]),
                                                                (10.0, [0.0, 0.0])]


def test_a_flow_solved_alone_again_gives_the_same_rates_and_counters():
    # The second transfer of the same arrays reuses the first solve (read-only arrays);
    # its bytes on every link are counted again.
    import simpy
    from simulator.network.fabric import FlowFabric
    env = Environment()
    fabric = FlowFabric(env, np.array([10.0, 5.0, 20.0]))
    links, coef = np.array([0, 1, 1, 2]), np.array([1.0, 0.5, 0.5, 2.0])
    first = fabric.transfer(Flow(100.0, links, coef))
    env.run()
    second = fabric.transfer(Flow(100.0, links, coef))
    env.run()
    t1 = first.value.end_s - first.value.start_s
    t2 = second.value.end_s - second.value.start_s
    assert t1 == pytest.approx(100.0 / 5.0) and t2 == pytest.approx(t1)   # link 1 binds
    assert fabric.link_bytes.tolist() == pytest.approx([200.0, 200.0, 400.0])
    assert len(fabric._solver._memo) == 1        # one set of flows, solved once
    assert not fabric._solver._memo.popitem()[1][1].occupancy.flags.writeable


def test_a_set_is_not_touched_by_the_events_of_other_sets():
    # Flow A alone on link 0; then the same A while 30 flows come and go on link 1. A's
    # set shares no link with them: its end is the same float, and the time it ends at is
    # its start + size / rate exactly (no bytes subtracted at the others' events); link
    # 0's counters are the same floats too.
    rng = np.random.default_rng(5)
    others = [flow(float(rng.uniform(1, 9)), [1]) for _ in range(30)]
    starts = [0.1] + sorted(rng.uniform(0, 4, 30).tolist())
    alone, f1 = run("flow", [3.0, 7.0], [flow(10.0, [0])], starts=[0.1])
    crowded, f2 = run("flow", [3.0, 7.0], [flow(10.0, [0])] + others, starts=starts)
    assert alone[0] == crowded[0] == 0.1 + 10.0 / 3.0
    assert f1.link_occupancy_bytes[0] == f2.link_occupancy_bytes[0]
    assert f2.link_bytes[1] == pytest.approx(sum(o.size_bytes for o in others))


def test_a_rate_change_subtracts_the_bytes_of_the_stretch_before():
    # A (100 B) alone at 10 B/s from 0; B (20 B) arrives at 5/3 s: 5 B/s each. A has
    # 100 - 10 * 5/3 B left at 5/3 s; B ends at 5/3 + 20/5; A then has
    # left - 5 * (20/5) B at 10 B/s again. Every instant is that arithmetic, in that order.
    t1 = 5 / 3
    ends, _ = run("flow", [10.0], [flow(100, [0]), flow(20, [0])], starts=[0, t1])
    left = 100.0 - 10.0 * (t1 - 0)
    b_end = t1 + 20.0 / 5.0
    left -= 5.0 * (b_end - t1)
    assert ends == [b_end + left / 10.0, b_end]


def test_samples_summed_when_read_are_the_sums_one_at_a_time():
    # Each instant's mix of solutions, summed for all instants at once (padded with a row
    # of zeros), must be the same floats as adding the mix's group loads one after another
    # and dividing by the groups' capacity.
    import simpy
    from simulator.network.fabric import FlowFabric
    from simulator.network.solve import Solution
    rng = np.random.default_rng(7)
    fabric = FlowFabric(Environment(), rng.uniform(1, 9, 6))
    fabric.track(np.array([0, 0, 1, 2, 2, 3]), 4)
    pool = [Solution(np.zeros(0), np.zeros(0, np.int64), np.zeros(0), np.zeros(0),
                     rng.uniform(0, 1e9, 4) * (rng.random(4) < 0.7)) for _ in range(6)]
    mixes = [(float(t), [pool[i] for i in rng.integers(0, 6, int(rng.integers(0, 5)))])
             for t in range(40)]
    got = fractions(mixes, fabric._scale)
    for (t, solutions), (t2, fraction) in zip(mixes, got):
        load = np.zeros(4)
        if solutions:
            load = solutions[0].group_load.copy()
            for s in solutions[1:]:
                load += s.group_load
        assert t2 == t and fraction.tobytes() == (load / fabric._scale).tobytes()
    # instants with no solution at all: no load
    assert [(t, f.tolist()) for t, f in fractions([(0.0, []), (2.5, [])], fabric._scale)] == \
        [(0.0, [0.0] * 4), (2.5, [0.0] * 4)]


def test_deferred_samples_are_the_fabrics_own_rows_summed_only_when_read():
    # Three overlapping flows on two link groups: the deferred rows (taken when the run
    # ends, read later) are the very rows the fabric's ``samples`` gives, and nothing is
    # summed until they are read.
    from simulator.network.fabric import FlowFabric, LazySamples

    def sampled():
        env = Environment()
        fabric = FlowFabric(env, np.array([10.0, 4.0, 7.0]))
        fabric.track(np.array([0, 1, 1]), 2)
        for size, links, at in ((100.0, [0, 1], 0.0), (30.0, [1, 2], 1.5), (12.0, [2], 2.0)):
            def go(size=size, links=links, at=at):
                yield env.timeout(at)
                yield fabric.transfer(flow(size, links))
            env.process(go())
        env.run()
        return fabric

    fabric = sampled()
    lazy = fabric.deferred_samples()
    assert isinstance(lazy, LazySamples) and lazy._rows is None       # nothing summed yet
    own = sampled().samples
    assert len(own) >= 4
    assert [(t, f.tobytes()) for t, f in lazy] == [(t, f.tobytes()) for t, f in own]
    assert lazy == own and len(lazy) == len(own) and lazy[-1][0] == own[-1][0]
    assert lazy != own[:-1] and lazy != [(own[0][0], own[0][1] + 1.0), *own[1:]]
    # the fabric's own rows are still there to read
    assert [(t, f.tobytes()) for t, f in fabric.samples] == \
        [(t, f.tobytes()) for t, f in own]


def test_a_set_left_unconnected_is_cut_where_its_solve_says_so():
    # A (links 0-1) and B (links 1-2) share link 1: one set. A ends at t=4 (20 B at 5 B/s);
    # B then runs alone at 10 B/s. C arrives at t=5 on link 0, which only A crossed: it
    # joins the set (link 0 still counts as the set's), the solve finds two connected
    # sets, and the set is cut in two: C alone at 10 B/s from 5, B untouched by C.
    import simpy
    from simulator.network.fabric import FlowFabric
    env = Environment()
    fabric = FlowFabric(env, np.full(3, 10.0))
    a = fabric.transfer(Flow(20.0, np.array([0, 1]), np.ones(2)))
    b = fabric.transfer(Flow(100.0, np.array([1, 2]), np.ones(2)))
    seen = []

    def late():
        yield env.timeout(5.0)
        c = fabric.transfer(Flow(30.0, np.array([0]), np.ones(1)))
        yield env.timeout(0.5)
        seen.append(sorted(len(s) for s in fabric._sets.values()))
        yield c
        seen.append(c.value.end_s)
    env.process(late())
    env.run()
    assert a.value.end_s == 4.0
    left_b = 100.0 - 5.0 * 4.0
    assert b.value.end_s == 4.0 + left_b / 10.0
    assert seen == [[1, 1], 5.0 + 30.0 / 10.0]


def test_a_completion_callback_runs_in_the_fabrics_step_with_the_events_times():
    cap = np.array([10.0, 10.0])
    out = {}
    for how in ("event", "then"):
        env = Environment()
        fabric = make_fabric("flow", env, cap)
        flows = [Flow(100.0, np.array([0]), np.array([1.0]), latency_s=0.5),
                 Flow(50.0, np.array([0, 1]), np.array([1.0, 1.0])),
                 Flow(0.0, np.array([1]), np.array([1.0]))]
        seen = []
        for f in flows:
            if how == "event":
                fabric.transfer(f).callbacks.append(lambda e: seen.append(e.value.end_s))
            else:
                assert fabric.transfer(f, lambda fl: seen.append(fl.end_s)) is None
        env.run()
        out[how] = (seen, env.events_processed)
    assert out["then"][0] == out["event"][0]
    assert out["then"][1] == out["event"][1] - 3        # one event fewer per flow


def test_a_fresh_flow_is_the_same_transfer_not_started():
    from dataclasses import fields, replace

    flow = Flow(64.0, np.array([1, 2]), np.array([1.0, 0.5]), latency_s=1e-6, max_rate=9.0,
                label="x", wire_coef=np.array([1.0, 1.0]), parts=np.array([0, 1, 2]))
    flow.start_s, flow.end_s = 1.0, 2.0
    copy = flow.fresh()
    want = replace(flow)                    # every init field; start and end not started
    assert copy is not flow and np.isnan(copy.start_s) and np.isnan(copy.end_s)
    assert [getattr(copy, f.name) is getattr(want, f.name) for f in fields(Flow)
            if f.init] == [True] * sum(f.init for f in fields(Flow))
