"""FSDP2's copy kernels (simulator/strategies/fsdp_copies.py) on every path that runs FSDP2:
the model-parallel generator's ``dp_mode: fsdp`` (torchtitan FSDP x TP / EP, Megatron's
``use_torch_fsdp2``) emits the same copy-out after each all-gather and ``chunk_cat`` before
each reduce-scatter as the data-parallel generator, at the same bytes per unit; Megatron's
distributed optimizer (zero1) and DDP emit none."""

from __future__ import annotations

import dataclasses

from simulator.models import load_model
from simulator.models.costs import layer_costs
from simulator.strategies import FSDPConfig, World
from simulator.strategies.fsdp import fsdp
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.frameworks.torchtitan import TorchtitanConfig
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.generate import build_parallel

GPT2 = load_model("gpt2-small")
H = GPT2.hidden                                          # 768
OUT, IN = "all_gather_copy_out.", "reduce_scatter_copy_in."


def _planned(plan: ParallelPlan, world: World, cfg=None, model=GPT2):
    cfg = cfg or TorchtitanConfig(micro_batch=1, grad_accum=1)
    return build_parallel(model, plan, cfg, world, seq_len=256).classes[0].ops


def _copies(ops, kind: str, layer: str):
    return [o for o in ops if o.name.startswith(kind) and o.layer == layer]


def _check_wiring(ops) -> None:
    """Each copy-out follows its all-gather on the compute stream and the layer's first
    kernel waits for it (not for the gather); each reduce-scatter waits for its chunk_cat,
    on the reduce-scatter's stream."""
    outs = [o for o in ops if o.name.startswith(OUT)]
    ins = [o for o in ops if o.name.startswith(IN)]
    assert outs and ins
    for out in outs:
        ag = ops[out.deps[0]]
        assert ag.collective == "all_gather" and out.stream == "compute"
        assert out.bytes_accessed == 2 * ag.size_bytes
        waiting = [o for o in ops if out.id in o.deps and o.kind == "compute"]
        assert waiting and all(ag.id not in o.deps for o in waiting)
    for cin in ins:
        rs = [o for o in ops if cin.id in o.deps]
        assert len(rs) == 1 and rs[0].collective == "reduce_scatter"
        assert cin.stream == rs[0].stream == "dp"


def test_pure_dp_plan_gives_each_block_the_copies_of_the_data_parallel_generator():
    world = World(8, 8)
    dp = fsdp(layer_costs(GPT2, 1, 256, "bf16"), FSDPConfig(mesh=[1, 8]), world)
    dp_ops = dp.classes[0].ops
    planned = _planned(ParallelPlan(dp_shard=8), world)
    _check_wiring(planned)
    for b in range(GPT2.layers):
        layer = f"block.{b}"
        for kind in (OUT, IN):
            one = [o.bytes_accessed for o in _copies(dp_ops, kind, layer)]
            other = [o.bytes_accessed for o in _copies(planned, kind, layer)]
            # forward + backward gather of a resharded block, one reduce-scatter
            assert len(one) == (2 if kind == OUT else 1)
            assert one == other
    # a block: 12 h^2 + 13 h = 7,087,872 parameters, over 8 ranks no padding, bf16:
    # copy-out 2 x 7,087,872 x 2 B, chunk_cat 7,087,872 x (2 + 2) B
    p = 12 * H * H + 13 * H
    assert _copies(planned, OUT, "block.0")[0].bytes_accessed == 2 * p * 2 == 28_351_488
    assert _copies(planned, IN, "block.0")[0].bytes_accessed == p * (2 + 2)


def test_tp2_copies_move_the_tp_shard_of_each_block():
    cfg = TorchtitanConfig(micro_batch=1, grad_accum=1, reduce_dtype="fp32")
    ops = _planned(ParallelPlan(tp=2, dp_shard=4, sequence_parallel=True), World(8, 8), cfg)
    _check_wiring(ops)
    # a GPT-2 block under TP2: qkv (3h^2 + 3h) and mlp_up (4h^2 + 4h) column-parallel,
    # halved; attn_out and mlp_down weights (h^2, 4h^2) halved, their biases (h each)
    # and the two LayerNorms (2 x 2h) whole: 6 h^2 + 9.5 h = 3,546,240, a multiple of 4
    p = (3 * H * H + 3 * H) // 2 + H * H // 2 + H + (4 * H * H + 4 * H) // 2 \
        + 4 * H * H // 2 + H + 4 * H
    assert p == 3_546_240 and p % 4 == 0
    outs = _copies(ops, OUT, "block.3")
    ins = _copies(ops, IN, "block.3")
    assert len(outs) == 2 and len(ins) == 1
    assert {o.bytes_accessed for o in outs} == {2 * p * 2}             # read + write bf16
    assert ins[0].bytes_accessed == p * (2 + 4)                        # bf16 in, fp32 out


def test_expert_copies_follow_the_expert_data_parallel_shard():
    model = dataclasses.replace(load_model("mixtral-8x7b"), layers=2)
    cfg = TorchtitanConfig(micro_batch=1, grad_accum=1, reduce_dtype="fp32")
    plan = ParallelPlan(dp_shard=16, ep=8)
    assert plan.edp == 2
    ops = _planned(plan, World(16, 8), cfg, model)
    _check_wiring(ops)
    h, f = model.hidden, model.moe_ffn_hidden or model.ffn_hidden
    experts = 3 * h * f            # one of 8 experts per EP rank: w1, w2, w3 (h x f)
    assert experts == 176_160_768 and experts % 2 == 0   # sharded over edp 2: no padding
    outs = [o for o in _copies(ops, OUT, "block.1") if "expert_" in o.name]
    ins = [o for o in _copies(ops, IN, "block.1") if "expert_" in o.name]
    assert len(outs) == 2 and len(ins) == 1
    assert {o.bytes_accessed for o in outs} == {2 * experts * 2}
    assert ins[0].bytes_accessed == experts * (2 + 4)
    rs = [o for o in ops if ins[0].id in o.deps][0]
    assert rs.comm.startswith("edp") and rs.size_bytes == experts * 4
    # the dense part of the block (attention 2 h^2 + 2 h x 1024 for GQA K/V, router 8 h,
    # norms 2 h) over the 16-rank shard group
    dense = 2 * h * h + 2 * h * 1024 + 8 * h + 2 * h
    assert dense % 16 == 0
    outs = [o for o in _copies(ops, OUT, "block.1") if "expert_" not in o.name]
    assert {o.bytes_accessed for o in outs} == {2 * dense * 2}


def test_megatron_fsdp2_copies_and_distributed_optimizer_and_ddp_none():
    world = World(8, 8)
    fsdp2 = MegatronConfig(micro_batch=1, grad_accum=1, tensor_model_parallel_size=2,
                           use_torch_fsdp2=True)
    ops = build_parallel(GPT2, fsdp2.plan(8), fsdp2, world, seq_len=256).classes[0].ops
    _check_wiring(ops)
    for flags in ({"use_distributed_optimizer": True}, {}):
        cfg = MegatronConfig(micro_batch=1, grad_accum=1, tensor_model_parallel_size=2,
                             **flags)
        plan = cfg.plan(8)
        assert plan.dp_mode == ("zero1" if flags else "ddp")
        ops = build_parallel(GPT2, plan, cfg, world, seq_len=256).classes[0].ops
        assert not [o for o in ops if o.name.startswith((OUT, IN))]


def _collectives(ops):
    return [(o.collective, o.comm, o.size_bytes) for o in ops if o.kind == "collective"]


def test_megatron_fsdp_shards_the_same_way_on_buffers_without_copies():
    """Megatron-FSDP (``use_megatron_fsdp``) gathers and reduce-scatters the same bytes
    over the same groups as FSDP2 but into contiguous buffers whose parameters and
    gradients are views: no copy kernels, each layer waits for its all-gather itself. A
    pure data-parallel Megatron-FSDP plan goes through the model-parallel generator (the
    data-parallel one is FSDP2's), so TP1 and TP2 alike."""
    from simulator.strategies.frameworks.translate import pure_data_parallel
    world = World(8, 8)
    for tp in (1, 2):
        shared = dict(micro_batch=1, grad_accum=1, tensor_model_parallel_size=tp)
        mfsdp = MegatronConfig(use_megatron_fsdp=True, use_distributed_optimizer=True,
                               **shared)
        fsdp2 = MegatronConfig(use_torch_fsdp2=True, gradient_accumulation_fusion=False,
                               **shared)
        plan = mfsdp.plan(8)
        assert plan.dp_mode == "fsdp" and plan.fsdp_copies == "none"
        assert not pure_data_parallel(plan)
        ops = build_parallel(GPT2, plan, mfsdp, world, seq_len=256).classes[0].ops
        twin = build_parallel(GPT2, fsdp2.plan(8), fsdp2, world, seq_len=256).classes[0].ops
        assert not [o for o in ops if o.name.startswith((OUT, IN))]
        assert [o for o in twin if o.name.startswith((OUT, IN))]
        assert _collectives(ops) == _collectives(twin)
        for ag in (o for o in ops if o.collective == "all_gather"):
            assert any(ag.id in o.deps and o.kind == "compute" for o in ops)


def test_megatron_fsdp_and_fsdp2_together_are_refused():
    import pytest
    from simulator.errors import ConfigError
    with pytest.raises(ConfigError) as info:
        MegatronConfig(use_megatron_fsdp=True, use_torch_fsdp2=True)
    assert info.value.field == "strategy.use_megatron_fsdp"


def test_torchtitan_pipeline_runs_fsdp2_with_its_copies_once_a_step():
    """torchtitan under PP keeps FSDP2's parameters gathered (reshard_after_forward False,
    its default there) and torch.distributed.pipelining reduces only after the last
    micro-batch: dp_mode fsdp under a pipeline, one all-gather + copy-out and one chunk_cat
    + reduce-scatter per block a step, each copy the bytes of the same block's copy
    without PP (before, the plan was zero2: bucketed reduce-scatters, no copies)."""
    import pytest
    from simulator.errors import ConfigError
    world = World(8, 8)
    par = {"pipeline_parallel_degree": 2, "data_parallel_shard_degree": 4}
    for reshard in ("default", "never"):
        cfg = TorchtitanConfig(micro_batch=1, grad_accum=4, parallelism={
            **par, "fsdp_reshard_after_forward": reshard})
        assert cfg.plan(world).dp_mode == "fsdp"
    cfg = TorchtitanConfig(micro_batch=1, grad_accum=4, parallelism=par)
    trace = build_parallel(GPT2, cfg.plan(world), cfg, world, seq_len=256)
    flat = _planned(ParallelPlan(dp_shard=4), World(4, 4))
    seen = set()
    for cls in trace.classes:
        ops = cls.ops
        _check_wiring(ops)
        blocks = {o.layer for o in ops if o.name.startswith(OUT) and "block" in o.layer}
        for layer in blocks:
            outs, ins = _copies(ops, OUT, layer), _copies(ops, IN, layer)
            # 4 micro-batches, one gather and one reduce-scatter a step
            assert len(outs) == len(ins) == 1
            assert outs[0].bytes_accessed == _copies(flat, OUT, layer)[0].bytes_accessed
            assert ins[0].bytes_accessed == _copies(flat, IN, layer)[0].bytes_accessed
        seen |= blocks
    assert seen == {f"block.{b}" for b in range(GPT2.layers)}
    # a GPT-2 block over 4 ranks: 12 h^2 + 13 h = 7,087,872 (a multiple of 4), bf16
    p = 12 * H * H + 13 * H
    assert _copies(flat, OUT, "block.0")[0].bytes_accessed == 2 * p * 2
    assert _copies(flat, IN, "block.0")[0].bytes_accessed == p * (2 + 2)
    with pytest.raises(ConfigError) as info:
        TorchtitanConfig(parallelism={**par, "fsdp_reshard_after_forward": "always"}
                         ).plan(world)
    assert info.value.field == "strategy.parallelism.fsdp_reshard_after_forward"


def _launches(ops) -> dict:
    """{(layer, phase): CPU seconds} of the host ops launching a block's kernels, its
    copies included (rank class 0, every micro-step)."""
    out: dict = {}
    for o in ops:
        if o.stream == "host" and "block" in o.layer:
            key = (o.layer, o.attrs["dispatches"])
            out[key] = out.get(key, 0.0) + o.duration_s
    return out


def test_each_copy_is_a_launch_both_generators_price_alike():
    """FSDP2's hooks launch each copy eagerly: one kernel's dispatch of its phase
    (simulator/data/host.yaml), a host op the copy waits for, in either generator."""
    import pytest
    from simulator.strategies.host import dispatch_table
    world = World(8, 8)
    dp = fsdp(layer_costs(GPT2, 1, 256, "bf16"), FSDPConfig(mesh=[1, 8]), world).classes[0].ops
    planned = _planned(ParallelPlan(dp_shard=8), world)
    eager = dispatch_table()["eager"]
    for ops in (dp, planned):
        for o in ops:
            if o.name.startswith((OUT, IN)):
                host = [ops[d] for d in o.deps if ops[d].stream == "host"]
                assert len(host) == 1
                assert host[0].duration_s == eager[o.phase]       # 96.4 us fwd, 168.7 bwd
    one, other = _launches(dp), _launches(planned)
    assert one.keys() == other.keys() and one
    for key in one:
        assert other[key] == pytest.approx(one[key]), key
