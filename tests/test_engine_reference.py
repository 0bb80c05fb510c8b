"""Whole replays on the product's flow fabric (connected sets, link classes, bundles of
identical instances, remembered solves) against the same replays on the reference fabric
of tests/reference_fabric.py (every active flow solved at every event on every link): the
same records, step time and link counters to the last bit, the utilisation samples at the
same instants within a few ulps. Parallel plans, expert all-to-alls with uneven routing,
a degraded NIC (bundles split), uneven leaves on an oversubscribed fabric, and random
programs of every op kind on one, two or four rank classes."""

from __future__ import annotations

import dataclasses
import random

import pytest

from reference_fabric import ListFabric
from replay_helpers import (PLANS, a_nic_link, assert_same_replay, plan_setup, plan_trace,
                            replay_on)
from simulator.cluster import Cluster
from simulator.constants import load_constants
from simulator.collectives.model import CollectiveModel
from simulator.engine import JobConfig, MachineConfig, replay
from simulator.models import load_model
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.moe import ExpertLoad
from simulator.pipeline import run_setup
from simulator.topology.fabrics import single_switch
from simulator.trace import Communicator, Op, RankClass, Trace


def _check(setup):
    """The product replay of ``setup``, after checking it against the reference's."""
    product = run_setup(setup).timeline
    assert_same_replay(product, replay_on(setup, ListFabric))
    return product


@pytest.mark.parametrize("name", sorted(PLANS))
def test_parallel_plans_replay_as_on_the_reference_fabric(name):
    _check(plan_setup(plan_trace(PLANS[name], 32), nodes=4))


def test_expert_all_to_all_with_uneven_routing_replays_as_on_the_reference_fabric():
    model = dataclasses.replace(load_model("mixtral-8x7b"), layers=2)
    plan = ParallelPlan(pp=2, dp_shard=8, ep=8, dp_mode="zero1")
    trace = plan_trace(plan, 16, m=2, model=model, use_distributed_optimizer=True,
                       moe_load=ExpertLoad(distribution="zipf", zipf_s=1.0))
    _check(plan_setup(trace, nodes=2, topology="dgx-h100-superpod"))


def test_a_degraded_nic_splits_the_bundles_and_the_replay_stays_exact():
    setup = plan_setup(plan_trace(ParallelPlan(tp=8, pp=2, dp_replicate=2, dp_mode="ddp"),
                                  32), nodes=4)
    # one NIC of one server at a quarter of its rate: its instances leave their bundles
    setup.cluster.capacity_bytes_per_s[a_nic_link(setup.cluster)] *= 0.25
    assert _check(setup).machine.fabric_stats["splits"] > 0


def test_uneven_leaves_on_an_oversubscribed_fabric_replay_exactly():
    # 6 servers, 4 a leaf: one full leaf and one half-full, spines at 4:1; some replicas'
    # sends and rings cross the spines and others do not
    plan = ParallelPlan(tp=8, pp=2, dp_replicate=3, dp_mode="ddp")
    setup = plan_setup(plan_trace(plan, 48), nodes=6, topology="a100-roce-leaf-spine",
                       sets=["topology.params.oversubscription=4"])
    assert _check(setup).machine.fabric_stats["splits"] > 0


def test_the_analytical_fabric_times_a_bundle_by_its_slowest_instance():
    # one NIC at a quarter of its rate: every collective whose bundle holds that server's
    # instance ends when that instance would alone (latency + size / its bottleneck)
    setup = plan_setup(plan_trace(PLANS["tp+pp+fsdp"], 32), nodes=4,
                       sets=["simulation.fidelity=analytical"])
    healthy = run_setup(setup).timeline
    setup.cluster.capacity_bytes_per_s[a_nic_link(setup.cluster)] *= 0.25
    degraded = run_setup(setup).timeline
    assert degraded.iteration_time_s > healthy.iteration_time_s


def test_events_do_not_grow_with_the_data_parallel_replicas():
    events = []
    for nodes in (4, 8, 16):        # TP8 x PP2: 2, 4, 8 replicas
        plan = ParallelPlan(tp=8, pp=2, dp_replicate=nodes // 2, dp_mode="ddp")
        events.append(run_setup(plan_setup(plan_trace(plan, 8 * nodes), nodes=nodes))
                      .timeline.events)
    # doubling the replicas adds no event (from 2 to 4 a few: some sends between stages
    # then cross a spine, a latency of their own, a bundle of their own)
    assert events[1] == events[2] and events[0] <= events[1]


# ---------------------------------------------------------------- random programs
class Timer:
    """1 TFLOP/s, no launch cost."""

    def op_time_s(self, op_class, flops, bytes_accessed, precision):
        return flops / 1e12


def _program(rng: random.Random, comms: list[str], peer_of: dict | None, n: int) -> list:
    """A rank-class-independent program of ``n`` ops (``comm`` may be a placeholder that
    each class fills in); deps on earlier ops of other streams."""
    ops = []
    for i in range(n):
        kind = rng.choice(["compute", "compute", "delay", "collective", "collective",
                           "send", "host"])
        spec = dict(id=i, kind=kind, deps=(), mem=rng.choice([0, 0, 1, 2, 3]) << 20)
        if kind == "compute":
            spec.update(stream=rng.choice(["compute", "side"]), flops=rng.randint(1, 4) * 1e11)
        elif kind == "delay":
            spec.update(stream="side", duration_s=rng.choice([0.0, 1e-4, 2e-4]))
        elif kind == "collective":
            spec.update(stream=rng.choice(["comm", "comm2"]), comm=rng.choice(comms),
                        collective=rng.choice(["all_reduce", "all_gather", "reduce_scatter"]),
                        size=rng.choice([0, 1 << 16, 1 << 22, 1 << 24]))
        elif kind == "send":
            spec.update(stream="p2p", size=rng.choice([1 << 16, 1 << 22]))
        else:
            spec.update(stream="host", size=1 << 20)
        earlier = [o for o in ops if o["stream"] != spec["stream"]]
        if earlier and rng.random() < 0.7:
            picked = rng.sample(earlier, min(2, len(earlier)))
            spec["deps"] = tuple(sorted({o["id"] for o in picked}))
        if kind == "send" and peer_of is None:
            spec.update(kind="compute", stream="compute", flops=1e11)
        ops.append(spec)
    return ops


def _ops(program, own: str, peer: int | None, receiving: bool) -> list[Op]:
    out = []
    for s in program:
        common = dict(id=s["id"], stream=s["stream"], name=f"{s['kind']}{s['id']}",
                      deps=s["deps"], mem_alloc_bytes=s["mem"], mem_free_bytes=s["mem"])
        if s["kind"] == "compute":
            out.append(Op(kind="compute", flops=s["flops"], op_class="matmul", **common))
        elif s["kind"] == "delay":
            out.append(Op(kind="delay", duration_s=s["duration_s"], **common))
        elif s["kind"] == "collective":
            comm = own if s["comm"] == "own" else s["comm"]
            out.append(Op(kind="collective", collective=s["collective"],
                          size_bytes=s["size"], comm=comm, **common))
        elif s["kind"] == "send":
            out.append(Op(kind="recv" if receiving else "send", size_bytes=s["size"],
                          peer=peer, **common))
        else:
            out.append(Op(kind="send", size_bytes=s["size"], attrs={"host": 0}, **common))
    return out


def random_trace(seed: int) -> Trace:
    """16 ranks (two DGX A100 servers) as one, two or four rank classes running one random
    program: collectives on the world, on two groups and on the class's own ranks, sends
    from the first class to the second, host copies, memory."""
    rng = random.Random(seed)
    n_classes = rng.choice([1, 2, 4])
    size = 16 // n_classes
    classes = [(f"c{k}", tuple(range(k * size, (k + 1) * size))) for k in range(n_classes)]
    comms = {"world": Communicator("world", (tuple(range(16)),)),
             "halves": Communicator("halves", (tuple(range(8)), tuple(range(8, 16))))}
    for cid, ranks in classes:
        comms[f"own.{cid}"] = Communicator(f"own.{cid}", (ranks,))
    two = n_classes == 2
    program = _program(rng, ["world", "halves", "own", "own"], {} if two else None,
                       rng.randint(8, 30))
    out = []
    for k, (cid, ranks) in enumerate(classes):
        peer = (8 if k == 0 else 0) if two else None
        out.append(RankClass(cid, ranks, _ops(program, f"own.{cid}", peer, k == 1),
                             slowdown=rng.choice([1.0, 1.0, 1.5])))
    return Trace(16, out, comms)


@pytest.fixture(scope="module")
def small_model():
    G = single_switch(2, {"type": "dgx_a100"})
    return CollectiveModel(Cluster(G, link_efficiency={}), load_constants())


@pytest.mark.parametrize("seed", range(40))
def test_random_programs_replay_as_on_the_reference_fabric(seed, small_model):
    trace = random_trace(seed)
    trace.validate()
    capacity = random.Random(seed).choice([0, 0, 4 << 20, 6 << 20])
    setup = _Setup(trace, small_model, Timer(), capacity)
    product = replay(trace, small_model, Timer(), setup.job, setup.machine, capacity)
    assert_same_replay(product, replay_on(setup, ListFabric))
    _keeps_deps_and_streams(trace, product)
    _keeps_deps_and_streams(trace, replay(trace, small_model, Timer(), setup.job,
                                          MachineConfig(fidelity="analytical"), capacity))


def _keeps_deps_and_streams(trace: Trace, tl) -> None:
    """What any schedule must keep: every op of every class recorded once, ready after its
    deps and its stream's previous op have ended, started when ready or later."""
    assert len(tl.records) == sum(len(c.ops) for c in trace.classes)
    ends = {(r.cls, r.op_id): r.end_s for r in tl.records}
    for cls in trace.classes:
        mine = {r.op_id: r for r in tl.records if r.cls == cls.id}
        last: dict[str, float] = {}
        for op in cls.ops:
            r = mine[op.id]
            assert r.ready_s >= max((ends[(cls.id, d)] for d in op.deps), default=0.0)
            assert r.ready_s >= last.get(op.stream, 0.0) and r.end_s >= r.start_s >= r.ready_s
            last[op.stream] = r.end_s


@dataclasses.dataclass
class _Setup:
    """What :func:`replay_helpers.replay_on` reads of a pipeline Setup."""

    trace: Trace
    collectives: CollectiveModel
    compute: Timer
    capacity_bytes: int
    job: JobConfig = JobConfig()
    machine: MachineConfig = MachineConfig()
