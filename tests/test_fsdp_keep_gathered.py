"""FSDP2 with ``reshard_after_forward=False`` (torchtitan's ``fsdp_reshard_after_forward:
never``) on both generators: a block is gathered once a micro-batch, kept from its forward
to its backward, freed and reduce-scattered after its backward. torchtitan's spelling
without a pipeline used to run as ZeRO-2 (parameters held whole all step, gathered after
the optimizer); it now costs what ``strategy: fsdp`` with ``reshard_after_forward: false``
costs, and with tensor parallelism the model-parallel generator gathers the same blocks
the same number of times."""

from __future__ import annotations

import copy

import pytest

from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.models.costs import layer_costs
from simulator.pipeline import build_setup, run_setup
from simulator.planner.space import Candidate
from simulator.planner.strategy import strategy_of
from simulator.scenario import scenario_from_dict
from simulator.strategies import FSDPConfig, World
from simulator.strategies.fsdp import fsdp
from simulator.strategies.frameworks.torchtitan import TorchtitanConfig
from simulator.strategies.frameworks.translate import data_parallel_config, pure_data_parallel
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.generate import build_parallel
from simulator.strategies.parallel.memory import stage_weights
from simulator.strategies.parallel.memory import _working as working_bytes

GPT2 = load_model("gpt2-small")
H = GPT2.hidden


def _titan(reshard: str, **par) -> TorchtitanConfig:
    return TorchtitanConfig(micro_batch=1, grad_accum=2, parallelism={
        "fsdp_reshard_after_forward": reshard, **par})


def _gathers(ops, layer: str) -> list:
    """A block's parameter all-gathers (not tensor parallelism's)."""
    return [o for o in ops if o.collective == "all_gather" and o.layer == layer
            and not o.comm.startswith("tp")]


def _scatters(ops, layer: str) -> list:
    return [o for o in ops if o.collective == "reduce_scatter" and o.layer == layer]


def test_never_without_a_pipeline_is_fsdp_kept_gathered():
    world = World(8, 8)
    plan = _titan("never", data_parallel_shard_degree=8).plan(world)
    assert (plan.dp_mode, plan.reshard_after_forward) == ("fsdp", False)
    assert pure_data_parallel(plan)
    dp_cfg = data_parallel_config(_titan("never"), plan)
    assert isinstance(dp_cfg, FSDPConfig) and dp_cfg.reshard_after_forward is False
    for reshard in ("default", "always"):
        assert _titan(reshard, data_parallel_shard_degree=8).plan(world).reshard_after_forward
    # under a pipeline FSDP keeps its blocks anyway: the plan's field stays at its default
    piped = _titan("never", pipeline_parallel_degree=2, data_parallel_shard_degree=4)
    assert piped.plan(world).reshard_after_forward


def test_both_generators_gather_a_kept_block_once_a_micro_batch():
    """2 micro-batches: a resharded block is gathered 4 times (forward and backward of
    each), a kept one twice; both reduce-scatter after each backward. The model-parallel
    generator (torchtitan's plan) and the data-parallel one (``strategy: fsdp``) agree."""
    world = World(8, 8)
    layers = layer_costs(GPT2, 1, 256, "bf16")
    for keep in (False, True):
        plan = ParallelPlan(dp_shard=8, reshard_after_forward=not keep)
        planned = build_parallel(GPT2, plan, _titan("never" if keep else "always"), world,
                                 seq_len=256).classes[0].ops
        flat = fsdp(layers, FSDPConfig(mesh=[1, 8], grad_accum=2,
                                       reshard_after_forward=not keep), world).classes[0].ops
        for b in range(GPT2.layers):
            layer = f"block.{b}"
            want = 2 if keep else 4
            assert len(_gathers(planned, layer)) == len(_gathers(flat, layer)) == want
            assert len(_scatters(planned, layer)) == len(_scatters(flat, layer)) == 2
            assert [o.size_bytes for o in _gathers(planned, layer)] == \
                [o.size_bytes for o in _gathers(flat, layer)]


def test_a_kept_block_is_freed_after_its_backward_not_its_forward():
    """With TP2 x FSDP4 (the model-parallel generator only), 2 micro-batches: a kept block
    frees its gathered parameters after its backward only, a resharded one after its
    forward too (a forward frees nothing else: its activations stay for the backward)."""
    world = World(8, 8)
    for reshard, forward_frees in (("never", 0), ("always", 2)):
        cfg = _titan(reshard, tensor_parallel_degree=2, data_parallel_shard_degree=4)
        plan = cfg.plan(world)
        assert not pure_data_parallel(plan) and plan.dp_mode == "fsdp"
        ops = build_parallel(GPT2, plan, cfg, world, seq_len=256).classes[0].ops
        for b in range(GPT2.layers):
            layer = f"block.{b}"
            size = _gathers(ops, layer)[0].mem_alloc_bytes
            assert size > 0 and len(_gathers(ops, layer)) == 2 + forward_frees
            frees = [o.phase for o in ops if o.layer == layer and o.mem_free_bytes >= size
                     and o.kind == "compute"]
            assert frees.count("forward") == forward_frees, (reshard, b)
            assert frees.count("backward") >= 2, (reshard, b)


BASE = {"name": "keep", "model": "gpt2-small", "cluster": {"topology": "dgx-a100"},
        "simulation": {"variability": "none"},
        "training": {"seq_len": 1024, "micro_batch": 2, "global_batch": 32}}


def _run(strategy: dict):
    data = copy.deepcopy(BASE)
    data["strategy"] = strategy
    return run_setup(build_setup(scenario_from_dict(data))).metrics


def test_torchtitan_never_costs_what_fsdp_kept_gathered_costs():
    """One path, one price: the same job spelled two ways (8 GPUs, 2 micro-batches)."""
    titan = _run({"name": "torchtitan", "parallelism": {
        "data_parallel_shard_degree": 8, "fsdp_reshard_after_forward": "never"}})
    flat = _run({"name": "fsdp", "reshard_after_forward": False})
    assert titan.iteration_time_s == flat.iteration_time_s
    assert titan.peak_memory_gib == flat.peak_memory_gib
    resharded = _run({"name": "fsdp", "reshard_after_forward": True})
    assert resharded.peak_memory_gib < flat.peak_memory_gib


def test_the_analytical_memory_holds_every_block_gathered():
    """plan's memory model: a kept plan's working bytes hold the stage's weights (e bytes
    each, 2 for bf16) and one block's gradients (fp32), where a resharded plan holds two
    blocks' weights and one block's gradients."""
    kw = dict(b=1, s=256, e=2, ac="none", flash=True, grad_dtype="fp32", precision="bf16")
    kept = ParallelPlan(dp_shard=8, reshard_after_forward=False)
    resharded = ParallelPlan(dp_shard=8)
    base = working_bytes(GPT2, ParallelPlan(dp_shard=1, dp_mode="ddp"), 0, **kw)
    block = 12 * H * H + 13 * H
    assert working_bytes(GPT2, resharded, 0, **kw) - base == block * (2 * 2 + 4)
    weights = stage_weights(GPT2, kept, 0, "bf16").trainable
    assert working_bytes(GPT2, kept, 0, **kw) - base == weights * 2 + block * 4


def test_only_fsdp_without_a_pipeline_keeps_blocks_gathered():
    for bad in ({"dp_mode": "zero1", "dp_shard": 8}, {"pp": 2, "dp_shard": 4}):
        with pytest.raises(ConfigError) as info:
            ParallelPlan(reshard_after_forward=False, **bad)
        assert info.value.field == "plan.reshard_after_forward"
    with pytest.raises(ConfigError):
        ParallelPlan(reshard_after_forward="no")


def test_plan_replays_a_kept_fsdp_candidate_as_torchtitan_never():
    kept = Candidate(ParallelPlan(tp=2, dp_shard=4, sequence_parallel=True,
                                  reshard_after_forward=False), 1, 2, "none")
    resharded = Candidate(ParallelPlan(tp=2, dp_shard=4, sequence_parallel=True), 1, 2, "none")
    assert strategy_of(kept, GPT2.layers)["parallelism"]["fsdp_reshard_after_forward"] == \
        "never"
    assert strategy_of(resharded, GPT2.layers)["parallelism"][
        "fsdp_reshard_after_forward"] == "always"
    # ZeRO-2 has no torchtitan spelling (DeepSpeed's stage 2)
    assert strategy_of(Candidate(ParallelPlan(dp_shard=8, dp_mode="zero2"), 1, 2, "none"),
                       GPT2.layers) is None
