"""The parallel trace generator: TP/SP traffic per block against the Megatron arithmetic,
the pipeline bubble out of the replay against the published formulas, stage classes and
their send/recv, data-parallel modes, placement, determinism."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.errors import ConfigError
from simulator.models import layer_costs, load_model
from simulator.models.transformer import block_params
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.parallel.generate import build_parallel
from simulator.strategies.parallel.place import placement, tp_crosses_domain
from simulator.strategies.parallel.tp import async_tp_layer
from simulator.strategies.parallel.schedules import bubble_fraction
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario, resolve_scenario, scenario_from_dict
from simulator.strategies import World

GPT = load_model("gpt3-1.3b")        # h 2048, 16 heads, ffn 8192, 24 layers
B, S, E = 1, 128, 2                  # micro-batch, sequence, bf16 bytes


def small(layers: int):
    return dataclasses.replace(GPT, layers=layers)


def trace_of(plan: ParallelPlan, layers: int = 2, m: int = 1, gpn: int = 8, **cfg):
    cfg = MegatronConfig(micro_batch=B, grad_accum=m, **cfg)
    return build_parallel(small(layers), plan, cfg, World(plan.size, min(gpn, plan.size)),
                          seq_len=S)


def tp_ops(trace, layer: str):
    cls = trace.classes[0]
    return [op for op in cls.ops if op.kind == "collective" and op.comm.startswith("tp.")
            and op.layer == layer]


def test_tp_block_runs_four_all_reduces_of_bsh():
    trace = trace_of(ParallelPlan(tp=2))
    ops = tp_ops(trace, "block.0")
    bsh_bytes = B * S * GPT.hidden * E            # 1 * 128 * 2048 * 2 = 524,288
    assert bsh_bytes == 524_288
    assert [(op.phase, op.collective) for op in ops] == [
        ("forward", "all_reduce"), ("forward", "all_reduce"),
        ("backward", "all_reduce"), ("backward", "all_reduce")]
    assert {op.size_bytes for op in ops} == {bsh_bytes}
    assert trace.communicators["tp.s0"].groups == ((0, 1),)


def test_sequence_parallel_swaps_each_all_reduce_for_an_all_gather_and_reduce_scatter():
    ops = tp_ops(trace_of(ParallelPlan(tp=2, sequence_parallel=True)), "block.0")
    kinds = [(op.phase, op.collective) for op in ops]
    for phase in ("forward", "backward"):
        assert kinds.count((phase, "reduce_scatter")) == 2
    assert kinds.count(("forward", "all_gather")) == 2
    # backward: the two output-gradient all-gathers, and Megatron-SP's re-gather of the
    # QKV and MLP-up inputs for their weight gradients
    assert kinds.count(("backward", "all_gather")) == 4
    assert {op.size_bytes for op in ops} == {B * S * GPT.hidden * E}


def test_the_sp_input_regather_is_waited_for_by_the_weight_gradient_gemm():
    cls = trace_of(ParallelPlan(tp=2, sequence_parallel=True)).classes[0]
    by_id = {op.id: op for op in cls.ops}
    regather = next(op for op in cls.ops if op.name == "all_gather.block.0.qkv_proj.dgrad")
    waiters = [op.name for op in cls.ops if regather.id in op.deps]
    assert waiters == ["qkv_proj.wgrad"]
    assert by_id[regather.deps[0]].kind == "compute"


def test_recompute_repeats_the_forward_collectives():
    ops = tp_ops(trace_of(ParallelPlan(tp=2), recompute_granularity="full"), "block.0")
    assert [op.phase for op in ops].count("recompute") == 2


def test_vocab_parallel_head_and_embedding():
    trace = trace_of(ParallelPlan(tp=2))
    head = [(op.phase, op.collective, op.size_bytes) for op in tp_ops(trace, "head")]
    # three fp32 loss all-reduces of b*s values forward, the input-gradient all-reduce back
    assert head == [("forward", "all_reduce", B * S * 4)] * 3 + \
        [("backward", "all_reduce", B * S * GPT.hidden * E)]
    assert [op.collective for op in tp_ops(trace, "embed")] == ["all_reduce"]


def test_tp_shapes_divide_the_block():
    full, tp8 = (layer_costs(GPT, B, S, "bf16", tp=t)[1] for t in (1, 8))
    h, f = GPT.hidden, GPT.ffn_hidden
    # column/row-parallel matrices split 8 ways; the two row biases and the two
    # LayerNorms (scale + shift) stay whole on every rank
    split = h * 3 * h + h * h + 2 * h * f + 3 * h + f
    assert block_params(GPT, 8) == split // 8 + 2 * h + 2 * 2 * h
    assert tp8.params == block_params(GPT, 8)
    qkv = next(c for c in tp8.forward if c.name == "qkv_proj")
    assert qkv.flops == 2 * B * S * h * (3 * h // 8)
    assert full.params == block_params(GPT)


def test_one_rank_class_per_stage_and_the_stage_sends_match():
    trace = trace_of(ParallelPlan(pp=2, tp=2, dp_shard=2, dp_mode="zero1"), layers=4, m=4)
    assert [c.id for c in trace.classes] == ["stage0", "stage1"]
    assert trace.classes[1].ranks == (4, 5, 6, 7)
    sends = [op for op in trace.classes[0].ops if op.kind == "send"]
    assert len(sends) == 4 and {op.peer for op in sends} == {4}
    assert sends[0].size_bytes == B * S * GPT.hidden * E   # one b*s*h activation
    grads = [op for op in trace.classes[0].ops if op.comm == "dp.s0"]
    assert {op.collective for op in grads} == {"reduce_scatter", "all_gather"}


@pytest.mark.parametrize("mode, kinds", [
    ("ddp", {"all_reduce"}), ("zero1", {"reduce_scatter", "all_gather"}),
    ("zero2", {"reduce_scatter", "all_gather"}), ("fsdp", {"reduce_scatter", "all_gather"})])
def test_data_parallel_modes(mode, kinds):
    trace = trace_of(ParallelPlan(dp_shard=4, dp_mode=mode), m=2)
    ops = [op for op in trace.classes[0].ops if op.kind == "collective"]
    assert {op.collective for op in ops} == kinds


def test_static_memory_follows_the_sharding():
    plain = trace_of(ParallelPlan(dp_replicate=4, dp_mode="ddp")).classes[0]
    zero1 = trace_of(ParallelPlan(dp_shard=4, dp_mode="zero1")).classes[0]
    P = sum(x.params for x in layer_costs(small(2), B, S, "bf16"))
    # Megatron: bf16 weights 2 + fp32 grads 4 + fp32 master and Adam 12 = 18 bytes/param;
    # the distributed optimizer shards the 12 over the 4 ranks
    assert plain.static_memory_bytes == 18 * P
    assert zero1.static_memory_bytes == 6 * P + 12 * -(-P // 4)


def test_the_same_inputs_give_the_same_trace():
    plan = ParallelPlan(pp=2, tp=2, sequence_parallel=True, vp=2, schedule="interleaved_1f1b")
    a, b = (trace_of(plan, layers=4, m=2) for _ in range(2))
    assert [c.ops for c in a.classes] == [c.ops for c in b.classes]


def test_placement_keeps_tp_inside_the_nvlink_domain():
    plan = ParallelPlan(dp_shard=4, tp=8)
    world = World(32, 8)
    assert placement(plan, world) == {"dp_shard": "network (4 domains per group)",
                                      "tp": "nvlink"}
    assert all(len({r // 8 for r in g}) == 1 for g in plan.groups("tp"))
    outer = ParallelPlan(dp_shard=4, tp=8, order=("pp", "dp_replicate", "cp", "tp", "dp_shard"))
    assert tp_crosses_domain(outer, world) and not tp_crosses_domain(plan, world)
    assert placement(ParallelPlan(tp=16), World(16, 8)) == {"tp": "network (2 domains per group)"}


# ----------------------------------------------------------------------------- bubble
def _uniform(trace, split: bool):
    """With one block per chunk: every pass of a chunk one time unit forward, two
    backward (split: one B, one W), everything else free (the embedding, the head, the
    optimizer): the idealised model of schedules.bubble_fraction."""
    unit = {"qkv_proj": 1.0, "qkv_proj.dgrad": 1.0 if split else 2.0,
            "qkv_proj.wgrad": 1.0 if split else 0.0}
    for cls in trace.classes:
        for op in cls.ops:
            if op.kind == "compute":
                op.duration_s = unit.get(op.name, 0.0) if op.layer.startswith("block") \
                    else 0.0
    return trace


@pytest.mark.parametrize("schedule, pp, m, vp", [
    ("1f1b", 4, 8, 1), ("gpipe", 4, 4, 1), ("interleaved_1f1b", 4, 8, 2),
    ("zb_h1", 4, 8, 1), ("zbv", 4, 8, 2)])
def test_bubble_of_the_replay_matches_the_formula(schedule, pp, m, vp):
    plan = ParallelPlan(pp=pp, vp=vp, schedule=schedule, dp_mode="ddp")
    trace = trace_of(plan, layers=pp * vp, m=m)
    _uniform(trace, split=schedule in ("zb_h1", "zbv"))
    scn = load_scenario(resolve_scenario("quickstart"), [f"cluster.gpus={pp}",
                                                        "training.seq_len=128",
                                                        "simulation.variability=none"])
    setup = dataclasses.replace(build_setup(scn, extrapolate_steps=False), trace=trace)
    t = run_setup(setup).metrics.iteration_time_s
    busy = 3.0 * m * vp
    # comm is not free (a few microseconds a hop against passes of one second)
    assert 1 - busy / t == pytest.approx(bubble_fraction(schedule, pp, m, vp), abs=2e-4)


def test_a_pipelined_step_is_replayed_past_its_warm_up_before_it_is_extrapolated():
    # accum.py replays a pipeline with k = 2 pp, k+d, k+2d micro-batches (d = pp when
    # interleaved, the micro-batch count a multiple of pp), every replay past the warm-up
    # and cool-down; GPipe's memory grows with the micro-batches: never extrapolated
    from simulator import accum

    def counts(**plan):
        cfg = MegatronConfig(grad_accum=accum.THRESHOLD * 4, **plan)
        return accum.replayed_counts(cfg, 64)
    assert counts(pipeline_model_parallel_size=4) == (8, 9, 10)
    assert counts(pipeline_model_parallel_size=4,
                  virtual_pipeline_model_parallel_size=2) == (8, 12, 16)
    assert counts() == accum.REPLAYED                 # no pipeline: as DDP's micro-steps


def test_tp_overlap_runs_each_collective_alongside_its_gemm():
    def around(plan, collective, gemm):
        """(issued with the GEMM, the kernels that wait for it) of one TP collective."""
        ops = trace_of(plan).classes[0].ops
        comm = next(op for op in ops if op.name == f"{collective}.block.0.{gemm}")
        kernels = [op for op in ops if op.stream == "compute"]     # in stream order
        at = next(i for i, op in enumerate(kernels) if op.name == gemm
                  and op.layer == "block.0")
        alongside = comm.deps == (kernels[at - 1].id,)    # after the kernel the GEMM follows
        return alongside, [op.name for op in ops if comm.id in op.deps]
    sp = dict(tp=2, sequence_parallel=True)
    # without overlap the reduce-scatter follows its GEMM, the next kernel waits for it;
    # with overlap it starts with the GEMM and the kernel after the GEMM waits for it
    assert around(ParallelPlan(**sp), "reduce_scatter", "attn_out") == (False, ["residual1"])
    assert around(ParallelPlan(**sp, tp_overlap=True), "reduce_scatter", "attn_out") == (
        True, ["residual1"])
    # the all-gather before the QKV GEMM: waited for by the GEMM, or with overlap by the
    # kernel after it; both issued after the kernel before the GEMM
    assert around(ParallelPlan(**sp), "all_gather", "qkv_proj") == (True, ["qkv_proj"])
    assert around(ParallelPlan(**sp, tp_overlap=True), "all_gather", "qkv_proj") == (
        True, ["attn_core"])
    # backward: the input-gradient reduce-scatter still follows its GEMM and hides behind
    # the weight-gradient GEMM (Transformer Engine's default bulk overlap, as without it)
    assert _backward_rs(ParallelPlan(**sp, tp_overlap=True)) == _backward_rs(ParallelPlan(**sp))
    assert _backward_rs(ParallelPlan(**sp))[0] == ["qkv_proj.dgrad"]


def _backward_rs(plan: ParallelPlan) -> tuple[list[str], list[str]]:
    """(what it follows, what waits for it) of block.0's QKV input-gradient reduce-scatter."""
    ops = trace_of(plan).classes[0].ops
    comm = next(op for op in ops if op.name == "reduce_scatter.block.0.qkv_proj.dgrad")
    names = {op.id: op.name for op in ops}
    return [names[d] for d in comm.deps], [op.name for op in ops if comm.id in op.deps]


def test_tp_overlap_hides_what_its_gemm_covers_and_shows_the_rest():
    """On one stage, the overlapped step is shorter than the plain one by the collectives
    the GEMMs cover, and no shorter than the compute alone."""
    def step(overlap):
        scn = {"name": "tpo", "model": "llama-2-7b",
               "training": {"micro_batch": 1, "seq_len": 4096, "precision": "bf16"},
               "cluster": {"topology": "dgx-a100"},
               "simulation": {"variability": "none"},
               "strategy": {"name": "megatron", "tensor_model_parallel_size": 8,
                            "sequence_parallel": True, "tp_comm_overlap": overlap}}
        return run_setup(build_setup(scenario_from_dict(scn))).metrics
    plain, overlapped = step(False), step(True)
    assert overlapped.compute_s == pytest.approx(plain.compute_s, rel=1e-9)
    assert overlapped.exposed_comm_s < plain.exposed_comm_s
    assert overlapped.iteration_time_s < plain.iteration_time_s
    assert overlapped.iteration_time_s >= overlapped.compute_s


def test_async_tp_adds_the_reduction_of_each_fused_matmul_reduce_scatter():
    """PyTorch's async TP sums the tp partial row blocks it received after each fused
    matmul + reduce-scatter: a kernel reading the m x n partial output and writing m / tp
    rows, after each GEMM whose output the SP layout reduce-scatters."""
    tp = 2
    block = next(x for x in layer_costs(small(2), B, S, "bf16", True, tp=tp, sp=True)
                 if x.kind == "transformer_block")
    out = async_tp_layer(block, tp, E)
    added = [op for op in (*out.forward, *out.backward) if op not in block.forward
             and op not in block.backward]
    assert [op.name for op in added] == [
        "async_tp_reduce.attn_out", "async_tp_reduce.mlp_down",
        "async_tp_reduce.mlp_up.dgrad", "async_tp_reduce.qkv_proj.dgrad"]
    for op in added:
        gemm = next(g for g in (*block.forward, *block.backward)
                    if g.name == op.name.removeprefix("async_tp_reduce."))
        elements = gemm.m * gemm.n          # the partial output: B x S tokens x hidden
        assert elements == B * S * GPT.hidden
        assert op.bytes_accessed == E * elements + E * elements / tp
        assert op.flops == elements * (tp - 1) / tp
        # each right after its GEMM
        ops = out.forward if op in out.forward else out.backward
        assert ops[ops.index(op) - 1].name == gemm.name


def test_async_tp_runs_the_backward_reduce_scatter_alongside_its_gemm():
    sp = dict(tp=2, sequence_parallel=True, tp_overlap=True)
    after, waiters = _backward_rs(ParallelPlan(**sp, async_tp=True))
    assert after != ["qkv_proj.dgrad"]                  # issued with the GEMM, not after it
    assert waiters == ["async_tp_reduce.qkv_proj.dgrad"]    # its reduction waits for it
    assert _backward_rs(ParallelPlan(**sp))[0] == ["qkv_proj.dgrad"]   # userbuffers: bulk
    with pytest.raises(ConfigError, match="needs tp_overlap"):
        ParallelPlan(tp=2, sequence_parallel=True, async_tp=True)


def test_tp_overlap_without_sequence_parallelism_is_refused():
    cfg = MegatronConfig(tensor_model_parallel_size=2, tp_comm_overlap=True)
    with pytest.raises(ConfigError, match="needs sequence_parallel") as err:
        cfg.plan(8)
    assert err.value.field == "strategy.tp_comm_overlap"
    # with it, or at TP 1 (no TP collective), the plan is made
    assert MegatronConfig(tensor_model_parallel_size=2, tp_comm_overlap=True,
                          sequence_parallel=True).plan(8).tp_overlap
    assert MegatronConfig(tp_comm_overlap=True).plan(8).tp == 1


def test_fsdp_under_a_pipeline_gathers_once_and_reduces_at_the_last_micro_batch():
    trace = trace_of(ParallelPlan(pp=2, dp_shard=2, dp_mode="fsdp"), layers=4, m=4)
    ops = trace.classes[0].ops
    gathers = [op for op in ops if op.collective == "all_gather" and op.layer == "block.0"]
    reduces = [op for op in ops if op.collective == "reduce_scatter" and op.layer == "block.0"]
    assert len(gathers) == 1 and len(reduces) == 1
    assert reduces[0].attrs["micro_step"] == 3
    plain = trace_of(ParallelPlan(dp_shard=2, dp_mode="fsdp"), layers=4, m=2).classes[0].ops
    # without a pipeline: gathered before forward and backward, reduced every micro-batch
    assert [op.collective for op in plain if op.layer == "block.0" and
            op.kind == "collective"] == ["all_gather", "all_gather", "reduce_scatter"] * 2


def test_ddp_buckets_overlap_backward_only_when_asked():
    def positions(overlap):
        plan = ParallelPlan(dp_replicate=2, dp_mode="ddp", overlap_grad_reduce=overlap,
                            bucket_params=10_000_000)
        ops = trace_of(plan, layers=4).classes[0].ops
        last_bwd = max(i for i, op in enumerate(ops) if op.phase == "backward"
                       and op.kind == "compute")
        return [i < last_bwd for i, op in enumerate(ops) if op.comm == "dp.s0"]
    assert all(not before for before in positions(False))
    assert any(positions(True))


def test_zero_bubble_splits_the_weight_gradients_into_w():
    trace = trace_of(ParallelPlan(pp=2, schedule="zb_h1"), layers=2, m=2)
    ops = trace.classes[0].ops
    wgrads = [op for op in ops if op.name.endswith(".wgrad")]
    dgrads = [op for op in ops if op.name.endswith(".dgrad")]
    assert wgrads and dgrads
    # every W of a micro-batch comes after that micro-batch's input-gradient kernels
    for m in (0, 1):
        assert min(i for i, op in enumerate(ops) if op in wgrads and
                   op.attrs["micro_step"] == m) > \
            max(i for i, op in enumerate(ops) if op in dgrads and op.attrs["micro_step"] == m)


@pytest.mark.parametrize("mode", ["ddp", "zero1", "zero2", "fsdp"])
@pytest.mark.parametrize("schedule", ["1f1b", "zb_h1"])
def test_every_transient_byte_is_freed_by_the_end_of_the_step(mode, schedule):
    # what a pipelined step allocates it frees (FSDP reshards every unit, root included,
    # at its last backward); an unsharded gradient accumulated over the micro-batches is
    # allocated once, not once per micro-batch
    plan = ParallelPlan(pp=2, dp_shard=2, tp=2, dp_mode=mode, schedule=schedule)
    for cls in trace_of(plan, layers=4, m=4).classes:
        assert sum(op.mem_alloc_bytes - op.mem_free_bytes for op in cls.ops) == 0


def test_fsdp_without_a_pipeline_keeps_only_the_root_gathered():
    trace = trace_of(ParallelPlan(dp_shard=2, dp_mode="fsdp"), layers=2, m=2)
    embed, *_, head = layer_costs(small(2), B, S, "bf16")
    kept = sum(-(-x.params // 2) * 2 * E for x in (embed, head))
    assert sum(op.mem_alloc_bytes - op.mem_free_bytes for op in trace.classes[0].ops) == kept


def test_both_fsdp_generators_move_and_keep_what_fsdp_units_says_a_unit_weighs():
    # the data-parallel FSDP (units by wrap policy) and FSDP inside a plan (a unit per
    # layer) gather, reduce-scatter, all-reduce and keep the sizes of fsdp_units
    from simulator.strategies import FSDPConfig
    from simulator.strategies.fsdp import fsdp
    from simulator.strategies.fsdp_units import (build_units, padded_numel, shard_numel,
                                                 state_bytes)
    layers = layer_costs(small(2), B, S, "bf16")
    cfg = FSDPConfig(micro_batch=B, mesh=[2, 4])              # HSDP: 2 replicas of 4 shards
    dp_trace = fsdp(layers, cfg, World(8, 8))
    units = [u for u in build_units(layers, cfg.wrap)[0] if u.params]
    by_unit = {u.name: u.params for u in units}
    plan = trace_of(ParallelPlan(dp_replicate=2, dp_shard=4, dp_mode="fsdp"), layers=2)
    by_layer = {x.name: int(x.params) for x in layers}
    for trace, params, grad_bytes in ((dp_trace, by_unit, E), (plan, by_layer, 4)):
        ops = trace.classes[0].ops
        sizes = {(op.collective, op.layer): op.size_bytes for op in ops
                 if op.kind == "collective"}
        assert {k[1] for k in sizes} == set(params)
        for name, n in params.items():
            assert sizes[("all_gather", name)] == padded_numel(n, 4) * E
            assert sizes[("reduce_scatter", name)] == padded_numel(n, 4) * grad_bytes
            assert sizes[("all_reduce", name)] == shard_numel(n, 4) * grad_bytes
    assert dp_trace.classes[0].static_memory_bytes == state_bytes(
        sum(shard_numel(n, 4) for n in by_unit.values()), "adam")
    assert plan.classes[0].static_memory_bytes == state_bytes(
        shard_numel(sum(by_layer.values()), 4), "adam")


def test_tied_embeddings_are_all_reduced_between_the_first_and_last_stage():
    # GPT ties the LM head to the token embedding: the last stage holds a copy
    # (vocab / tp rows of h) and the two copies' gradients are all-reduced after the flush
    trace = trace_of(ParallelPlan(pp=4, tp=2), layers=4, m=4)
    rows = -(-GPT.vocab // 2)
    ops = {c.id: [op for op in c.ops if op.comm == "embedding"] for c in trace.classes}
    assert [len(v) for v in ops.values()] == [1, 0, 0, 1]
    assert ops["stage0"][0].size_bytes == rows * GPT.hidden * 4      # fp32 gradients
    assert trace.communicators["embedding"].groups == ((0, 6), (1, 7))
    untied = trace_of(ParallelPlan(pp=4, tp=2, vp=2, schedule="zbv"), layers=8, m=8)
    assert "embedding" not in untied.communicators      # zbv: both ends on rank 0


@pytest.mark.parametrize("tp", [2, 8])
def test_every_block_gemm_splits_by_tp_forward_and_backward(tp):
    """Megatron's column/row-parallel GEMMs: each of QKV, attention out, MLP up/gate and
    down does 1/tp of its FLOPs on a TP rank, in forward and in both backward GEMMs
    (dgrad, wgrad), so the block's matmul FLOPs are exactly the tp=1 ones / tp."""
    from simulator.models import load_model
    from simulator.models.transformer import block_cost
    model = load_model("gpt3-175b")

    def gemm_flops(t):
        c = block_cost(model, 1, 2048, 2, True, None, t)
        return [sum(o.flops for o in ops if o.op_class == "matmul")
                for ops in (c.forward, c.backward)]
    whole, split = gemm_flops(1), gemm_flops(tp)
    assert split == pytest.approx([f / tp for f in whole], rel=1e-12)


def _waiters(plan: ParallelPlan, name: str) -> list[str]:
    """The kernels that wait for the backward TP collective ``name`` of block.0."""
    cls = trace_of(plan).classes[0]
    op = next(op for op in cls.ops if op.name == name and op.phase == "backward")
    return [o.name for o in cls.ops if op.id in o.deps]


def test_async_tp_all_reduce_lets_the_weight_gradient_gemm_run_first():
    # Megatron since 2022: the input-gradient all-reduce of the MLP up projection is
    # waited for after its weight-gradient GEMM; Megatron-LM of 2021 (SC21): by that GEMM
    name = "all_reduce.block.0.mlp_up.dgrad"
    assert "mlp_up.wgrad" not in _waiters(ParallelPlan(tp=2), name)
    assert _waiters(ParallelPlan(tp=2, tp_async_backward=False), name) == ["mlp_up.wgrad"]


def test_megatron_async_tp_flag_and_sequence_parallel():
    off = MegatronConfig(tensor_model_parallel_size=2,
                         async_tensor_model_parallel_allreduce=False)
    assert not off.plan(2).tp_async_backward
    assert MegatronConfig(tensor_model_parallel_size=2).plan(2).tp_async_backward
    # Megatron-SP overlaps its reduce-scatter with the weight-gradient GEMM regardless
    sp = MegatronConfig(tensor_model_parallel_size=2, sequence_parallel=True,
                        async_tensor_model_parallel_allreduce=False)
    assert sp.plan(2).tp_async_backward


def test_torchtitan_dtensor_tp_waits_for_the_input_gradient_before_the_weight_gradient():
    # DTensor's TP: autograd computes a Linear's input and weight gradients in one node
    # (mm's entry in derivatives.yaml) before the all-gather's backward reduce-scatters the
    # input gradient, so nothing hides that reduce-scatter: the weight-gradient GEMM right
    # after the input-gradient one waits for it. PyTorch's async TP pipelines it with its
    # GEMM instead (the kernel after the GEMM waits: its reduction kernel).
    from simulator.strategies.frameworks.torchtitan import TorchtitanConfig

    def titan(async_tp: bool):
        return TorchtitanConfig(parallelism={"tensor_parallel_degree": 2,
                                             "enable_async_tensor_parallel": async_tp})
    # (on 4 GPUs: FSDP over the other 2, as torchtitan runs TP in 16 bits only under FSDP)
    plain, fused = titan(False).plan(4), titan(True).plan(4)
    assert not plain.tp_async_backward and plain.sequence_parallel and not plain.tp_overlap
    name = "reduce_scatter.block.0.mlp_up.dgrad"
    assert _waiters(plain, name) == ["mlp_up.wgrad"]
    assert _waiters(dataclasses.replace(plain, tp_async_backward=True), name) != ["mlp_up.wgrad"]
    assert fused.async_tp and _waiters(fused, name) == ["async_tp_reduce.mlp_up.dgrad"]
