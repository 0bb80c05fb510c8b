"""Shared by the replay tests: small parallel-plan traces on small clusters, and a replay on
a fabric of the test's choosing (the reference fabric of tests/reference_fabric.py)."""

from __future__ import annotations

import dataclasses

import numpy as np

from simulator.engine import Job, Machine, Placement, run_jobs
from simulator.models import load_model
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.parallel.generate import build_parallel
from simulator.pipeline import build_setup
from simulator.scenario import load_scenario, resolve_scenario
from simulator.strategies import World

GPT = dataclasses.replace(load_model("gpt3-1.3b"), layers=4)
SAMPLE_RTOL = 1e-12

PLANS = {                          # 32 GPUs, 4 servers
    "tp-only": ParallelPlan(tp=8, dp_replicate=4, dp_mode="ddp"),
    "pp+dp": ParallelPlan(pp=4, dp_replicate=8, dp_mode="ddp"),
    "tp+pp+fsdp": ParallelPlan(tp=2, pp=2, dp_shard=8, dp_mode="fsdp"),
    "tp+pp interleaved, distributed optimizer": ParallelPlan(
        tp=8, pp=2, vp=2, dp_shard=2, schedule="interleaved_1f1b", dp_mode="zero1"),
}


def plan_trace(plan: ParallelPlan, gpus: int, m: int = 2, model=GPT, seq_len: int = 128,
               **cfg):
    """A Megatron trace of ``plan`` on ``gpus`` GPUs, ``m`` micro-batches."""
    cfg = MegatronConfig(micro_batch=1, grad_accum=m, **cfg)
    return build_parallel(model, plan, cfg, World(gpus, 8), seq_len=seq_len)


def plan_setup(trace, nodes: int, topology: str = "dgx-a100-superpod", sets=()):
    """The quickstart's setup on ``nodes`` servers of ``topology``, replaying ``trace``."""
    scn = load_scenario(resolve_scenario("quickstart"),
                        [f"cluster.topology={topology}", f"cluster.nodes={nodes}",
                         "training.seq_len=128", "simulation.variability=none", *sets])
    return dataclasses.replace(build_setup(scn, extrapolate_steps=False), trace=trace)


def replay_on(setup, make):
    """``setup``'s trace replayed as ``replay`` does, on the fabric ``make(env, capacity)``
    builds (the timeline; its machine record carries that fabric's counters)."""
    machine = Machine(setup.collectives.cluster, setup.machine, make=make)
    job = Job(machine, setup.trace, Placement.first(setup.trace.world_size),
              setup.collectives, setup.compute, setup.job, setup.capacity_bytes)
    job.start()
    run_jobs(machine, [job])
    return job.timeline(machine.record())


def a_nic_link(cluster) -> int:
    """A link between a NIC and its switch (the slowest class of link of a server)."""
    for (u, v), i in cluster.link_id.items():
        if "nic" in u.lower() and "nic" not in v.lower():
            return i
    raise AssertionError("no NIC link")


def assert_same_replay(a, b) -> None:
    """Two timelines alike to the last bit (records, step time, link counters, sample
    instants), the utilisation samples within a few ulps."""
    key = lambda r: (r.cls, r.op_id)       # noqa: E731
    ra, rb = sorted(a.records, key=key), sorted(b.records, key=key)
    assert [(r.cls, r.op_id, r.start_s, r.end_s) for r in ra] == \
        [(r.cls, r.op_id, r.start_s, r.end_s) for r in rb]
    assert a.iteration_time_s == b.iteration_time_s
    assert a.memory == b.memory and a.oom == b.oom
    ma, mb = a.machine, b.machine
    assert ma.link_bytes.tobytes() == mb.link_bytes.tobytes()
    assert ma.link_occupancy_bytes.tobytes() == mb.link_occupancy_bytes.tobytes()
    assert [t for t, _ in ma.link_samples] == [t for t, _ in mb.link_samples]
    for (_, fa), (_, fb) in zip(ma.link_samples, mb.link_samples):
        np.testing.assert_allclose(fa, fb, rtol=SAMPLE_RTOL, atol=0)
