"""The lean replay (EngineConfig.lean, the default) against the reference schedule: the
same records in the same order, the same memory timelines, link counters and samples, with
fewer SimPy events; and the pieces it rests on (a wait with AllOf's scheduling, fabric
completions by callback, the counting run loop, a replay that leaves no garbage cycles)."""

from __future__ import annotations

import dataclasses
import gc
import random

import numpy as np
import pytest
import simpy

from simulator.engine import EngineConfig, replay
from simulator.sim import all_done as _all_done
from simulator.network.fabric import Flow, make_fabric
from simulator.sim import Environment
from simulator.sim import Environment as CountingEnvironment
from simulator.pipeline import build_setup
from simulator.scenario import load_scenario
from simulator.trace import Communicator, Op, RankClass, Trace
from simulator.cluster import Cluster
from simulator.collectives.model import CollectiveModel
from simulator.topology.fabrics import single_switch
from test_engine_bundle import PLANS, _setup, _trace


class Timer:
    """1 TFLOP/s, no launch cost."""

    def op_time_s(self, op_class, flops, bytes_accessed, precision):
        return flops / 1e12


def _assert_same(a, b) -> None:
    """Two timelines equal to the last bit, records in the same order."""
    assert a.records == b.records
    assert a.memory == b.memory and a.peak_memory_bytes == b.peak_memory_bytes
    assert a.oom == b.oom and a.memory_wait_s == b.memory_wait_s
    assert a.link_bytes.tobytes() == b.link_bytes.tobytes()
    assert a.link_occupancy_bytes.tobytes() == b.link_occupancy_bytes.tobytes()
    assert [(t, f.tobytes()) for t, f in a.link_samples] == \
        [(t, f.tobytes()) for t, f in b.link_samples]
    assert a.fabric_stats == b.fabric_stats
    assert a.iteration_time_s == b.iteration_time_s


def _both(trace, model, compute, capacity=0, **cfg):
    """(lean, reference) timelines of ``trace``."""
    return [replay(trace, model, compute, EngineConfig(lean=lean, **cfg), capacity)
            for lean in (True, False)]


# ---------------------------------------------------------------- random programs
def _program(rng: random.Random, comms: list[str], peer_of: dict, n: int) -> list[dict]:
    """A rank-class-independent program of ``n`` ops (``comm`` may be a placeholder that
    each class fills in); deps on earlier ops of other streams."""
    ops = []
    for i in range(n):
        kind = rng.choice(["compute", "compute", "delay", "collective", "collective",
                           "send", "host"])
        spec = dict(id=i, kind=kind, deps=(),
                    mem=rng.choice([0, 0, 1, 2, 3]) << 20)
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
        common = dict(deps=s["deps"], mem_alloc_bytes=s["mem"], mem_free_bytes=s["mem"])
        i, name = s["id"], f"{s['kind']}{s['id']}"
        if s["kind"] == "compute":
            out.append(Op(i, s["stream"], "compute", name, flops=s["flops"],
                          op_class="matmul", **common))
        elif s["kind"] == "delay":
            out.append(Op(i, s["stream"], "delay", name, duration_s=s["duration_s"], **common))
        elif s["kind"] == "collective":
            comm = own if s["comm"] == "own" else s["comm"]
            out.append(Op(i, s["stream"], "collective", name, collective=s["collective"],
                          size_bytes=s["size"], comm=comm, **common))
        elif s["kind"] == "send":
            kind = "recv" if receiving else "send"
            out.append(Op(i, s["stream"], kind, name, size_bytes=s["size"], peer=peer,
                          **common))
        else:
            out.append(Op(i, s["stream"], "send", name, size_bytes=s["size"],
                          attrs={"host": 0}, **common))
    return out


def _random_trace(seed: int) -> Trace:
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
    from simulator.collectives.constants import load_constants
    G = single_switch(2, {"type": "dgx_a100"})
    return CollectiveModel(Cluster(G, link_efficiency={}), load_constants())


@pytest.mark.parametrize("seed", range(40))
def test_random_programs_replay_alike_lean_and_reference(seed, small_model):
    trace = _random_trace(seed)
    trace.validate()
    capacity = random.Random(seed).choice([0, 0, 4 << 20, 6 << 20])
    capacity += sum(c.static_memory_bytes for c in trace.classes[:1])
    for fidelity in ("flow", "analytical"):
        lean, ref = _both(trace, small_model, Timer(), capacity, fidelity=fidelity)
        _assert_same(lean, ref)
        assert lean.events <= ref.events


@pytest.mark.parametrize("name", sorted(PLANS))
def test_parallel_plans_replay_alike_lean_and_reference(name):
    setup = _setup(_trace(PLANS[name], 32), nodes=4)
    lean, ref = _both(setup.trace, setup.collectives, setup.compute, setup.capacity_bytes,
                      **{f.name: getattr(setup.engine, f.name)
                         for f in dataclasses.fields(EngineConfig) if f.name != "lean"})
    _assert_same(lean, ref)
    assert lean.events < ref.events


@pytest.mark.parametrize("name, sets", [
    ("quickstart", ["simulation.overlap_slowdown=0.15", "simulation.variability=default"]),
    ("llama3-405b-tp8-pp8-fsdp-512gpu", ["cluster.nodes=16"]),
    ("mixtral-8x7b-ep8", ["simulation.variability=default"]),
])
def test_shipped_scenarios_replay_alike_lean_and_reference(name, sets):
    s = build_setup(load_scenario(name, sets))
    ref_cfg = dataclasses.replace(s.engine, lean=False)
    lean = replay(s.trace, s.collectives, s.compute, s.engine, s.capacity_bytes)
    ref = replay(s.trace, s.collectives, s.compute, ref_cfg, s.capacity_bytes)
    _assert_same(lean, ref)
    assert lean.events < ref.events


# ---------------------------------------------------------------- the pieces
def _log_order(wait):
    """Resume order of processes that wait, through ``wait(env, events)``, on events
    fired in a scrambled order at one instant and at later ones."""
    env = Environment()
    evs = [env.event() for _ in range(6)]
    log = []

    def waiter(name, deps):
        yield wait(env, deps)
        log.append((env.now, name))

    def firer():
        yield env.timeout(1)
        for i in (3, 0, 5):
            evs[i].succeed()
        yield env.timeout(0)
        for i in (1, 2, 4):
            evs[i].succeed()

    env.process(firer())
    for name, deps in [("a", [0]), ("b", [3, 0]), ("c", [1, 5]), ("d", []),
                       ("e", [2, 4, 1]), ("f", [5])]:
        env.process(waiter(name, [evs[i] for i in deps]))
    env.run()

    def late(name, deps):       # waits made after the events were processed
        yield env.timeout(1)
        yield wait(env, deps)
        log.append((env.now, name))
    env.process(late("g", evs[:2]))
    env.process(late("h", [evs[5]]))
    env.run()
    return log


def test_the_dependency_wait_resumes_as_all_of_does():
    assert _log_order(_all_done) == _log_order(lambda env, evs: env.all_of(evs))


def test_a_completion_callback_runs_in_the_fabrics_step_with_the_events_times():
    cap = np.array([10.0, 10.0])
    out = {}
    for how in ("event", "then"):
        env = CountingEnvironment()
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


def test_the_counting_run_loop_counts_what_step_processes():
    def model(env):
        def proc():
            for d in (1, 0, 2):
                yield env.timeout(d)
            yield env.all_of([env.timeout(1), env.timeout(2)])
        env.process(proc())
        env.process(proc())

    env = CountingEnvironment()
    model(env)
    env.run()
    ref = CountingEnvironment()
    model(ref)
    while ref.peek() != float("inf"):
        ref.step()
    assert env.events_processed == ref.events_processed > 0
    assert env.now == ref.now


def test_a_failed_event_raises_from_the_counting_run_loop():
    env = CountingEnvironment()
    env.event().fail(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        env.run()


def test_a_replay_leaves_no_garbage_cycles():
    s = build_setup(load_scenario("llama3-405b-tp8-pp8-fsdp-512gpu", ["cluster.nodes=16"]))
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        replay(s.trace, s.collectives, s.compute, s.engine, s.capacity_bytes)
        assert gc.collect() < 1000      # the replay's ~400,000 events, records and plans
    finally:
        if was:
            gc.enable()
