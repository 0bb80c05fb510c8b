"""The replay engine on hand-built traces whose timelines can be worked out on paper."""

import gc

import pytest

from simulator.collectives.run import simulate_plans
from simulator.engine import JobConfig, replay
from simulator.pipeline import build_setup
from simulator.scenario import load_scenario
from simulator.trace import Communicator, Op, RankClass, Trace
from conftest import make_model, star_graph


class TeraflopGPU:
    """Compute model stub: 1 TFLOP/s, no launch cost."""

    def op_time_s(self, op_class, flops, bytes_accessed, precision):
        return flops / 1e12


def comp(i, flops, stream="compute", deps=(), **kw):
    return Op(i, stream, "compute", f"c{i}", flops=flops, op_class="matmul", deps=deps, **kw)


def run(trace, model, **cfg):
    return replay(trace, model, TeraflopGPU(), JobConfig(**cfg))


def by_name(tl, cls="all"):
    return {r.name: r for r in tl.records if r.cls == cls}


@pytest.fixture
def model(ideal_constants):
    return make_model(star_graph(4), ideal_constants)


def test_ops_in_one_stream_run_in_order_and_streams_run_in_parallel(model):
    ops = [comp(0, 1e12), comp(1, 2e12), comp(2, 1e12, stream="side")]
    tl = run(Trace(4, [RankClass("all", (0, 1, 2, 3), ops)], {}), model)
    r = by_name(tl)
    assert (r["c0"].start_s, r["c0"].end_s) == (0.0, 1.0)
    assert (r["c1"].start_s, r["c1"].end_s) == (1.0, 3.0)
    assert (r["c2"].start_s, r["c2"].end_s) == (0.0, 1.0)
    assert tl.iteration_time_s == 3.0


def test_cross_stream_dependency_waits(model):
    ops = [comp(0, 2e12), comp(1, 1e12, stream="side", deps=(0,))]
    r = by_name(run(Trace(4, [RankClass("all", (0, 1, 2, 3), ops)], {}), model))
    assert r["c1"].ready_s == 2.0 and r["c1"].end_s == 3.0


def test_collective_waits_for_the_slowest_class(model):
    # Ranks 0-1 run at half speed (straggler class): their 1 TFLOP takes 2 s; the all_reduce
    # starts at 2 s for everybody, so the fast class waits 1 s.
    comm = {"world": Communicator("world", ((0, 1, 2, 3),))}

    def program():
        return [comp(0, 1e12), Op(1, "comm", "collective", "ar", collective="all_reduce",
                                  size_bytes=1 << 30, comm="world", deps=(0,))]
    trace = Trace(4, [RankClass("slow", (0, 1), program(), slowdown=2.0),
                      RankClass("fast", (2, 3), program())], comm)
    tl = run(trace, model)
    fast, slow = by_name(tl, "fast")["ar"], by_name(tl, "slow")["ar"]
    assert fast.ready_s == 1.0 and fast.start_s == 2.0 and fast.wait_s == 1.0
    assert slow.wait_s == 0.0
    plan = model.plan("all_reduce", 1 << 30, [0, 1, 2, 3])
    (alone,), _ = simulate_plans(model.cluster, [plan], "flow")
    assert fast.end_s == pytest.approx(2.0 + alone)


def test_every_instance_group_runs_and_the_op_ends_with_the_last(model):
    # Two disjoint pairs all-reduce at once (like HSDP replicas); on one switch they do not
    # share links, so the op takes as long as one pair alone.
    comm = {"pairs": Communicator("pairs", ((0, 1), (2, 3)))}
    ops = [Op(0, "comm", "collective", "ar", collective="all_reduce", size_bytes=1 << 28,
              comm="pairs")]
    tl = run(Trace(4, [RankClass("all", (0, 1, 2, 3), ops)], comm), model)
    plan = model.plan("all_reduce", 1 << 28, [0, 1])
    (alone,), _ = simulate_plans(model.cluster, [plan], "flow")
    assert by_name(tl)["ar"].end_s == pytest.approx(alone)


def test_compute_overlapping_communication_is_slowed(model):
    comm = {"world": Communicator("world", ((0, 1, 2, 3),))}
    ops = [Op(0, "comm", "collective", "ar", collective="all_reduce", size_bytes=1 << 34,
              comm="world"), comp(1, 1e12)]
    r = by_name(run(Trace(4, [RankClass("all", (0, 1, 2, 3), ops)], comm), model,
                    overlap_slowdown=0.25))
    assert r["ar"].end_s > 1.25                     # the collective outlasts the compute
    assert r["c1"].end_s == pytest.approx(1.25)


def test_memory_peak_and_oom_verdict_name_the_op(model):
    ops = [comp(0, 1e12, mem_alloc_bytes=600), comp(1, 1e12, mem_alloc_bytes=500,
                                                     mem_free_bytes=1100)]
    trace = Trace(4, [RankClass("all", (0, 1, 2, 3), ops, static_memory_bytes=100)], {})
    tl = replay(trace, model, TeraflopGPU(), capacity_bytes=1000)
    assert tl.peak_memory_bytes["all"] == 1200
    assert tl.oom["all"] == "c1"
    assert tl.memory["all"][-1] == (2.0, 100)


def test_broken_trace_is_refused(model):
    ops = [comp(0, 1.0, deps=(5,))]
    with pytest.raises(ValueError, match="op 0 .* depends on"):
        run(Trace(4, [RankClass("all", (0, 1, 2, 3), ops)], {}), model)


def test_a_straggler_splits_its_class_and_delays_everyone(model):
    from simulator.trace.transform import apply_stragglers
    comm = {"world": Communicator("world", ((0, 1, 2, 3),))}
    ops = [comp(0, 1e12), Op(1, "comm", "collective", "ar", collective="all_reduce",
                             size_bytes=1 << 20, comm="world", deps=(0,))]
    trace = Trace(4, [RankClass("all", (0, 1, 2, 3), ops, static_memory_bytes=7)], comm)
    split = apply_stragglers(trace, {2: 1.5})
    assert [(c.id, c.ranks, c.slowdown) for c in split.classes] == [
        ("all", (0, 1, 3), 1.0), ("all@x1.5", (2,), 1.5)]
    assert [c.static_memory_bytes for c in split.classes] == [7, 7]
    tl = run(split, model)
    assert by_name(tl, "all")["ar"].start_s == pytest.approx(1.5)
    from simulator.errors import ConfigError
    with pytest.raises(ConfigError, match="stragglers: rank 9 is outside"):
        apply_stragglers(trace, {9: 2.0})


def test_collectives_on_one_communicator_from_two_streams_do_not_mix(model):
    # An all_gather on "unshard" and a reduce_scatter on "post_backward" share a
    # communicator; the reduce_scatter must start when its own stream reaches it.
    comm = {"shard": Communicator("shard", ((0, 1, 2, 3),))}
    ops = [Op(0, "unshard", "collective", "ag", collective="all_gather", size_bytes=1 << 20,
              comm="shard"),
           comp(1, 1e12),
           Op(2, "post", "collective", "rs", collective="reduce_scatter", size_bytes=1 << 20,
              comm="shard", deps=(1,))]
    r = by_name(run(Trace(4, [RankClass("all", (0, 1, 2, 3), ops)], comm), model))
    assert r["rs"].start_s == pytest.approx(1.0) and r["rs"].end_s > 1.0


def _mem_trace(ops, static=0):
    return Trace(4, [RankClass("all", (0, 1, 2, 3), ops, static_memory_bytes=static)], {})


def test_a_later_issued_op_waits_for_memory_instead_of_failing(model):
    # c0 holds 500 for 1 s, then c1 (issued before c2) needs 400; c2 on another stream
    # needs 400 at t=0: 500 + 400 fits, but not with room for c1, so it waits for c0's free.
    ops = [comp(0, 1e12, mem_alloc_bytes=500, mem_free_bytes=500),
           comp(1, 1e12, deps=(0,), mem_alloc_bytes=400, mem_free_bytes=400),
           comp(2, 0.5e12, stream="side", mem_alloc_bytes=400, mem_free_bytes=400)]
    unlimited = replay(_mem_trace(ops), model, TeraflopGPU())
    assert by_name(unlimited)["c2"].start_s == 0.0
    tl = replay(_mem_trace(ops), model, TeraflopGPU(), capacity_bytes=1000)
    recs = by_name(tl)
    assert recs["c2"].ready_s == 0.0 and recs["c2"].start_s == pytest.approx(1.0)
    assert tl.memory_wait_s["all"] == pytest.approx(1.0)
    assert tl.oom["all"] is None and tl.peak_memory_bytes["all"] == 800
    assert tl.iteration_time_s == pytest.approx(2.0)


def test_a_working_set_that_cannot_fit_is_oom_at_the_first_waiter(model):
    # c0 keeps 600 until c2, which needs c1, which needs 600 more: nothing can ever free.
    ops = [comp(0, 1e12, mem_alloc_bytes=600),
           comp(1, 1e12, stream="side", mem_alloc_bytes=600, mem_free_bytes=600),
           comp(2, 1e12, deps=(1,), mem_free_bytes=600)]
    tl = replay(_mem_trace(ops, static=100), model, TeraflopGPU(),
                capacity_bytes=1000)
    assert tl.oom["all"] == "c1"
    assert tl.peak_memory_bytes["all"] == 1300
    assert tl.iteration_time_s == pytest.approx(3.0)      # c1 let through at t=1, c2 after
    assert tl.memory["all"][-1][1] == 100


def test_a_replay_leaves_no_garbage_cycles():
    s = build_setup(load_scenario("llama3-405b-tp8-pp8-fsdp-512gpu", ["cluster.nodes=16"]))
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        replay(s.trace, s.collectives, s.compute, s.job, s.machine, s.capacity_bytes)
        assert gc.collect() < 1000      # the replay's ~400,000 events, records and plans
    finally:
        if was:
            gc.enable()


def test_an_op_record_names_the_op_and_how_it_ran_field_by_field():
    from dataclasses import fields

    from simulator.engine import OpRecord

    class Plan:
        algo, proto = "ring", "LL128"

    op = Op(id=7, stream="tp", kind="collective", name="ag", layer="block.3",
            phase="forward", collective="all_gather", size_bytes=4096, comm="tp.s0",
            op_class="elementwise")
    got = OpRecord.of("c1", op, ready_s=1.0, start_s=2.0, end_s=3.5, plan=Plan())
    want = OpRecord(cls="c1", op_id=7, name="ag", stream="tp", kind="collective",
                    layer="block.3", phase="forward", ready_s=1.0, start_s=2.0, end_s=3.5,
                    size_bytes=4096, algorithm="ring", protocol="LL128",
                    op_class="elementwise", comm="tp.s0", collective="all_gather")
    assert [getattr(got, f.name) for f in fields(OpRecord)] == \
        [getattr(want, f.name) for f in fields(OpRecord)]
    bare = OpRecord.of("c1", op, 0.0, 0.0, 0.0)
    assert (bare.algorithm, bare.protocol, bare.wait_s) == ("", "", 0.0)
