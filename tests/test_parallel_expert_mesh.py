"""The routed experts' own mesh (Megatron-Core's expert RankGenerator): EP, expert-tensor and
expert-data-parallel groups laid out by hand, and the expert gradients reduced and their
optimizer state sharded over the expert-data-parallel ranks, with the bytes the formulas
give."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.models.moe import expert_params, moe_block_params
from simulator.strategies import World
from simulator.strategies.fsdp_units import padded_numel
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.generate import build_parallel
from simulator.strategies.parallel.memory import stage_params
from simulator.strategies.parallel.plan import DIMS

MIXTRAL = load_model("mixtral-8x7b")          # 8 experts, top 2, h 4096, expert f 14336
SMALL = dataclasses.replace(MIXTRAL, layers=4)
SEQ = 1024


def old_carving(plan: ParallelPlan) -> list[tuple[int, ...]]:
    """EP groups as the plan carved them before the expert mesh: ``ep`` consecutive ranks of
    the ``dp x cp`` ranks of one (pp, tp) coordinate."""
    out = []
    for g in plan.groups("dp_cp"):
        out += [g[i:i + plan.ep] for i in range(0, len(g), plan.ep)]
    return sorted(out)


@pytest.mark.parametrize("order", list(itertools.permutations(DIMS)))
def test_ep_groups_with_experts_split_as_tp_are_the_old_carving_in_every_order(order):
    for kw in (dict(dp_shard=8, tp=2, ep=4),
               dict(pp=2, dp_replicate=2, dp_shard=2, cp=2, tp=2, ep=8),
               dict(pp=2, dp_replicate=3, dp_shard=2, cp=2, tp=2, ep=2)):
        plan = ParallelPlan(order=order, **kw)
        assert plan.groups("ep") == old_carving(plan)


def test_expert_data_parallel_groups_hold_the_same_experts():
    # 8 ranks of one stage, tp 1: EP groups {0..3}, {4..7}; rank j of each holds the same
    # 2 experts, so the expert-data-parallel groups pair rank j with rank j + 4
    plan = ParallelPlan(pp=2, dp_shard=8, ep=4)
    assert plan.edp == 8 // 4
    assert plan.groups("ep")[:2] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert plan.groups("edp")[:4] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert plan.groups("edp")[4] == (8, 12)             # stage 1: ranks 8..15


def _trace(plan: ParallelPlan, m: int = 2, **cfg):
    cfg = MegatronConfig(micro_batch=1, grad_accum=m, **cfg)
    return build_parallel(SMALL, plan, cfg, World(plan.size, 8), seq_len=SEQ)


def _grads(cls, prefix: str):
    return [op for op in cls.ops if op.kind == "collective"
            and op.name.startswith(prefix + "grads.")]


def _stage_experts(plan: ParallelPlan) -> int:
    """The routed experts' parameters on one rank of a stage of SMALL under ``plan``: its
    blocks x E / ep experts x 3 h f (SwiGLU, no biases)."""
    blocks = SMALL.layers // plan.pp
    return blocks * (MIXTRAL.num_experts // plan.ep) * 3 * MIXTRAL.hidden * 14336


def test_expert_gradients_reduce_over_their_own_data_parallel_ranks():
    plan = ParallelPlan(pp=2, dp_shard=8, ep=4, dp_mode="zero1")
    trace = _trace(plan, use_distributed_optimizer=True)
    cls = trace.classes[0]
    experts = _stage_experts(plan)
    assert experts == 2 * 2 * expert_params(MIXTRAL)
    dense = stage_params(SMALL, plan, 0) - experts
    expert_ops, dense_ops = _grads(cls, "expert_"), _grads(cls, "")
    # fp32 gradients: 4 bytes per parameter, every one in one bucket of its group
    assert sum(op.size_bytes for op in expert_ops) == 4 * experts
    assert sum(op.size_bytes for op in dense_ops) == 4 * dense
    assert {op.comm for op in expert_ops} == {"edp.s0"}
    assert {op.comm for op in dense_ops} == {"dp.s0"}
    assert {op.collective for op in expert_ops} == {"reduce_scatter"}
    assert trace.communicators["edp.s0"].groups == ((0, 4), (1, 5), (2, 6), (3, 7))
    # the distributed optimizer: 2 + 4 bytes of every parameter, the 12 of master weights
    # and Adam over dp 8 for the dense ones and over edp 8 / 4 = 2 for the experts
    assert cls.static_memory_bytes == (6 * (dense + experts) + 12 * -(-dense // 8)
                                       + 12 * -(-experts // 2))


def test_an_expert_data_parallel_group_of_one_reduces_nothing():
    plan = ParallelPlan(pp=2, dp_shard=8, ep=8, dp_mode="zero1")
    cls = _trace(plan, use_distributed_optimizer=True).classes[0]
    experts = _stage_experts(plan)
    dense = stage_params(SMALL, plan, 0) - experts
    assert plan.edp == 1 and not _grads(cls, "expert_")
    assert cls.static_memory_bytes == 18 * experts + 6 * dense + 12 * -(-dense // 8)


def test_without_expert_parallelism_the_experts_stay_in_the_dense_buckets():
    plan = ParallelPlan(pp=2, dp_shard=8, dp_mode="zero1")
    trace = _trace(plan, use_distributed_optimizer=True)
    assert not _grads(trace.classes[0], "expert_")
    assert "edp.s0" not in trace.communicators


def test_fsdp_gathers_and_reduces_the_experts_over_their_group():
    plan = ParallelPlan(dp_shard=8, ep=4, dp_mode="fsdp")
    cls = _trace(plan, m=1, use_torch_fsdp2=True).classes[0]
    per_block = (MIXTRAL.num_experts // 4) * expert_params(MIXTRAL)
    dense_block = moe_block_params(MIXTRAL, 2) - per_block     # attention, norms, router
    gathers = {op.name: op for op in cls.ops if op.kind == "collective"
               and op.collective == "all_gather" and op.layer == "block.1"}
    experts, dense = gathers["expert_params.block.1"], gathers["params.block.1"]
    assert experts.comm == "edp.s0" and experts.size_bytes == padded_numel(per_block, 2) * 2
    assert dense.comm == "shard.s0" and dense.size_bytes == padded_numel(dense_block, 8) * 2
    reduce = [op for op in _grads(cls, "expert_") if op.layer == "block.1"]
    assert [(op.collective, op.size_bytes) for op in reduce] == [
        ("reduce_scatter", padded_numel(per_block, 2) * 4)]
    # static: 16 bytes (fp32 shard, gradient, Adam) of each part's shard
    blocks = SMALL.layers
    assert cls.static_memory_bytes == 16 * (
        -(-(stage_params(SMALL, plan, 0) - blocks * per_block) // 8)
        + -(-(blocks * per_block) // 2))


def test_hsdp_with_expert_parallelism_is_refused_in_one_line():
    plan = ParallelPlan(dp_replicate=2, dp_shard=4, ep=4, dp_mode="fsdp")
    with pytest.raises(ConfigError, match="HSDP") as info:
        plan.check(SMALL, 8, seq_len=SEQ)
    assert info.value.field == "strategy.ep"
