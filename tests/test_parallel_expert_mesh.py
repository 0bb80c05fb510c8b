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


# ---------------------------------------------------------------- expert tensor parallelism
QWEN = load_model("qwen3-30b-a3b")            # 128 experts of 768, top 8, h 2048


def megatron_rank(plan: ParallelPlan, stage: int, etp: int, ep: int, edp: int) -> int:
    """Megatron-Core's expert RankGenerator (order tp-ep-dp-pp, the default order's
    experts): etp fastest, then ep, then the expert data parallel index, then the stage."""
    per_stage = plan.size // plan.pp
    return stage * per_stage + etp + plan.expert_tp * (ep + plan.ep * edp)


@pytest.mark.parametrize("kw", [
    dict(pp=2, tp=2, dp_shard=16, ep=32, etp=1),          # Megatron's folding example
    dict(pp=2, tp=2, dp_shard=4, ep=4, etp=1),
    dict(tp=2, cp=2, dp_shard=2, ep=2, etp=2),
    dict(tp=4, dp_replicate=2, dp_shard=2, ep=4, etp=2),
    dict(tp=1, cp=2, dp_shard=4, ep=2, etp=4),            # experts split wider than tp
])
def test_the_expert_mesh_is_megatrons_rank_generator(kw):
    plan = ParallelPlan(**kw)
    etp, ep = plan.expert_tp, plan.ep
    edp = plan.size // plan.pp // (etp * ep)
    assert plan.edp == edp
    want = {"ep": set(), "etp": set(), "edp": set()}
    for stage in range(plan.pp):
        for a in range(edp):
            for j in range(etp):
                want["ep"].add(tuple(megatron_rank(plan, stage, j, e, a) for e in range(ep)))
            for e in range(ep):
                want["etp"].add(tuple(megatron_rank(plan, stage, j, e, a)
                                      for j in range(etp)))
        for e in range(ep):
            for j in range(etp):
                want["edp"].add(tuple(megatron_rank(plan, stage, j, e, a)
                                      for a in range(edp)))
    for dim, groups in want.items():
        assert plan.groups(dim) == sorted(groups), dim


def test_folding_ep32_on_tp2_dp16_takes_the_tp_ranks_into_the_ep_group():
    cfg = MegatronConfig(tensor_model_parallel_size=2, sequence_parallel=True,
                         pipeline_model_parallel_size=2, expert_model_parallel_size=32,
                         expert_tensor_parallel_size=1, use_distributed_optimizer=True)
    plan = cfg.plan(64)
    plan.check(QWEN, 64, seq_len=SEQ, names=cfg.plan_fields())
    assert (plan.tp, plan.dp, plan.ep, plan.expert_tp, plan.edp) == (2, 16, 32, 1, 1)
    # one EP group per stage: its 32 ranks, TP pairs included; no expert data parallelism
    assert plan.groups("ep") == [tuple(range(32)), tuple(range(32, 64))]
    assert plan.groups("edp") == [(r,) for r in range(64)]
    assert plan.describe().endswith("(ep 32, etp 1)")
    # unset, the experts split as the tensor-parallel size (Megatron-Core's default)
    assert MegatronConfig(tensor_model_parallel_size=2).plan(64).expert_tp == 2


def test_an_expert_split_over_etp_ranks_is_etp_times_narrower_on_etp_times_the_copies():
    from simulator.strategies.parallel.moe import ep_block_cost, ep_loads
    t, ep = 2048, 4
    loads = ep_loads(QWEN, t, ep)
    h, f, k = QWEN.hidden, QWEN.moe_ffn_hidden, QWEN.top_k
    for etp in (1, 2, 4):
        block = ep_block_cost(QWEN, 1, t, 2, True, loads, ep, etp=etp)
        gemm = {op.name: op for op in block.forward}
        copies = etp * t * k              # even routing: t k per EP rank, from etp peers
        local = 128 // ep
        assert gemm["moe_expert_gate_up"].flops == 2 * copies * h * 2 * (f // etp)
        assert gemm["moe_expert_down"].flops == 2 * copies * (f // etp) * h
        assert gemm["moe_expert_gate_up"].params == local * h * 2 * f // etp
        assert gemm["moe_expert_down"].params == local * f * h // etp
    # the same FLOPs whatever the split: 2 t k h 3f on a rank
    flops = {etp: {op.name: op.flops for op in ep_block_cost(
        QWEN, 1, t, 2, True, loads, ep, etp=etp).forward}["moe_expert_down"]
        for etp in (1, 2, 4)}
    assert flops[1] == flops[2] == flops[4] == 2 * t * k * f * h


def test_expert_tp_gathers_after_the_dispatch_and_scatters_before_the_combine():
    from parallel_helpers import emit_with_hooks
    from simulator.strategies.parallel.moe import (EPHooks, EpSizes, all_to_all_size_bytes,
                                                   ep_block_cost, ep_loads, ep_sizes,
                                                   expert_gather_size_bytes)
    t, ep, etp = 1024, 4, 2
    loads = ep_loads(QWEN, t, ep)
    block = ep_block_cost(QWEN, 1, t, 2, True, loads, ep, etp=etp)
    a2a, gather = (all_to_all_size_bytes(QWEN, loads, 2),
                   expert_gather_size_bytes(QWEN, loads, 2, etp))
    assert (a2a, gather) == (t * 8 * 2048 * 2, 2 * t * 8 * 2048 * 2)   # t k h e, etp x it
    sizes = ep_sizes(QWEN, loads, 2, etp)
    assert sizes == EpSizes(tokens=a2a, probs=t * 8 * 4, counts=ep * 128 * 8, etp=gather)
    ol = emit_with_hooks(block, lambda i, c: EPHooks(i, c, size_bytes=sizes))
    comm = [op for op in ol.ops if op.kind == "collective"]
    assert [(op.collective, op.comm, op.size_bytes) for op in comm] == [
        ("all_gather", "ep", ep * 128 * 8),                                 # token counts
        ("all_to_all", "ep", a2a), ("all_to_all", "ep", t * 8 * 4),         # dispatch, probs
        ("all_gather", "etp", gather),                                       # expert-TP gather
        ("reduce_scatter", "etp", gather), ("all_to_all", "ep", a2a),      # combine
        ("all_to_all", "ep", a2a), ("all_gather", "etp", gather),          # combine.bwd
        ("reduce_scatter", "etp", gather), ("all_to_all", "ep", a2a),      # dispatch.bwd
        ("all_to_all", "ep", t * 8 * 4)]                                     # probs.bwd
    (counts, dispatch, probs, gather_op, scatter, combine, combine_b, scatter_b, gather_b,
     dispatch_b, probs_b) = comm
    fwd = {op.name: op for op in ol.ops if op.kind == "compute" and op.phase == "forward"}
    bwd = {op.name: op for op in ol.ops if op.kind == "compute" and op.phase == "backward"}
    assert dispatch.deps == probs.deps == (fwd["moe_permute"].id,)
    assert gather_op.deps == (dispatch.id,)          # it sends what the dispatch received
    assert fwd["moe_sort_chunks"].deps == (probs.id, gather_op.id)
    assert scatter.deps == (fwd["moe_expert_down"].id,)
    assert fwd["moe_unsort_chunks"].deps == (scatter.id,)
    assert combine.deps == (fwd["moe_unsort_chunks"].id,)
    assert fwd["moe_unpermute"].deps == (combine.id,)
    assert bwd["moe_unsort_chunks.bwd"].deps == (combine_b.id,)
    assert bwd["moe_expert_down.dgrad"].deps == (scatter_b.id,)
    assert gather_b.deps == (bwd["moe_sort_chunks.bwd"].id,)
    assert dispatch_b.deps == (gather_b.id,)
    assert bwd["moe_permute.bwd"].deps == (dispatch_b.id, probs_b.id)


def _qwen_trace(plan: ParallelPlan, layers: int = 2):
    cfg = MegatronConfig(micro_batch=1, grad_accum=1, use_distributed_optimizer=True)
    return build_parallel(dataclasses.replace(QWEN, layers=layers), plan, cfg,
                          World(plan.size, 8), seq_len=SEQ)


def test_the_folded_trace_runs_the_all_to_alls_over_the_tp_ranks_too():
    plan = ParallelPlan(tp=2, sequence_parallel=True, dp_shard=16, ep=32, etp=1,
                        dp_mode="zero1")
    trace = _qwen_trace(plan)
    cls = trace.classes[0]
    a2a = [op for op in cls.ops if op.kind == "collective" and op.collective == "all_to_all"]
    tokens = [op for op in a2a if "_probs" not in op.name]
    # 2 blocks x 4; each rank routes its sequence-parallel share, SEQ / tp tokens, top 8
    assert len(tokens) == 2 * 4 and len(a2a) - len(tokens) == 2 * 2    # + the probabilities
    assert {(op.comm, op.size_bytes) for op in tokens} == {("ep.s0", SEQ // 2 * 8 * 2048 * 2)}
    assert {(op.comm, op.size_bytes) for op in a2a if op not in tokens} == \
        {("ep.s0", SEQ // 2 * 8 * 4)}                                  # fp32 probabilities
    assert trace.communicators["ep.s0"].groups == (tuple(range(32)),)
    # etp 1: no expert-TP collectives; edp 1: the expert gradients are not reduced
    assert "etp.s0" not in trace.communicators and "edp.s0" not in trace.communicators
    experts = 2 * (128 // 32) * expert_params(QWEN)       # 2 blocks x 4 whole experts
    dense = stage_params(dataclasses.replace(QWEN, layers=2), plan, 0) - experts
    assert cls.static_memory_bytes == 18 * experts + 6 * dense + 12 * -(-dense // 16)


def test_experts_split_as_tp_gather_over_the_tp_group():
    plan = ParallelPlan(tp=2, sequence_parallel=True, dp_shard=16, ep=16, dp_mode="zero1")
    trace = _qwen_trace(plan)
    ops = [op for op in trace.classes[0].ops if op.kind == "collective"
           and op.comm == "etp.s0"]
    assert trace.communicators["etp.s0"].groups == trace.communicators["tp.s0"].groups
    assert {op.collective for op in ops} == {"all_gather", "reduce_scatter"}
    assert {op.size_bytes for op in ops} == {2 * (SEQ // 2) * 8 * 2048 * 2}
    assert len(ops) == 2 * 4


def test_etp_given_as_tp_is_the_default_to_the_last_op():
    plan = ParallelPlan(tp=2, sequence_parallel=True, dp_shard=16, ep=16, dp_mode="zero1")
    given = dataclasses.replace(plan, etp=2)
    assert given.expert_tp == plan.expert_tp == 2
    a, b = _qwen_trace(plan), _qwen_trace(given)
    assert [c.ops for c in a.classes] == [c.ops for c in b.classes]


def test_the_memory_model_splits_the_experts_over_etp_and_shards_them_over_edp():
    from simulator.strategies.parallel.memory import rank_memory
    model = dataclasses.replace(QWEN, layers=2)
    for etp, ep in ((1, 32), (2, 16), (1, 8)):
        plan = ParallelPlan(tp=2, sequence_parallel=True, dp_shard=16, ep=ep, etp=etp,
                            dp_mode="zero1")
        experts = 2 * (128 // ep) * expert_params(QWEN) // etp
        dense = stage_params(model, plan, 0) - experts
        edp = 32 // (etp * ep)
        r = rank_memory(model, plan, seq_len=SEQ, micro_batch=1, micro_batches=1,
                        flash=True)
        assert r.params_bytes == 2 * (dense + experts)
        assert r.optimizer_bytes == -(-dense * 12 // 16) + -(-experts * 12 // edp)
        # the trace keeps the same state: the static bytes the replay starts from
        assert _qwen_trace(plan).classes[0].static_memory_bytes == (
            6 * (dense + experts) + 12 * -(-dense // 16) + 12 * -(-experts // edp))


def test_expert_tensor_parallelism_must_divide_the_experts_width():
    model = dataclasses.replace(QWEN, moe_ffn_hidden=100)
    plan = ParallelPlan(tp=2, sequence_parallel=True, dp_shard=4, ep=2, etp=8)
    with pytest.raises(ConfigError, match="100 hidden width") as info:
        plan.check(model, 8, seq_len=SEQ)
    assert info.value.field == "strategy.etp"


def test_the_shipped_scenario_with_etp_spelled_as_tp_is_priced_the_same():
    from simulator.pipeline import build_setup, run_setup
    from simulator.scenario import load_scenario, resolve_scenario
    times = []
    for sets in ([], ["strategy.expert_tensor_parallel_size=1"]):
        scn = load_scenario(resolve_scenario("mixtral-8x7b-ep8"), sets)
        times.append(run_setup(build_setup(scn, extrapolate_steps=False))
                     .metrics.iteration_time_s)
    assert times[0] == times[1]


def test_the_argument_file_takes_the_expert_tensor_size(tmp_path):
    from simulator.strategies.frameworks.files import read_config
    path = tmp_path / "moe.args"
    path.write_text("--tensor-model-parallel-size 2 --sequence-parallel "
                    "--expert-model-parallel-size 32 --expert-tensor-parallel-size 1\n")
    p = read_config(path)
    assert p.strategy == {"name": "megatron", "tensor_model_parallel_size": 2,
                          "sequence_parallel": True, "expert_model_parallel_size": 32,
                          "expert_tensor_parallel_size": 1,
                          # Megatron-LM's defaults where the file gives no loss flags
                          "cross_entropy_loss_fusion": False,
                          "cross_entropy_fusion_impl": "native"}
    assert "--expert-tensor-parallel-size" in p.used
