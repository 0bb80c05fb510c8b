"""Strategy generators: DDP buckets, FSDP collectives, prefetch/rate-limit deps, memory."""

import gc
import weakref
from dataclasses import dataclass

import pytest

from simulator.errors import ConfigError
from simulator.strategies import (STRATEGIES, DDPConfig, FSDPConfig, World, assign_buckets,
                                  build_trace, ddp, fsdp, parse_strategy)

MIB = 1 << 20


@dataclass(frozen=True)
class Cost:          # the OpCost contract (docs/training-interfaces.md section 1)
    name: str
    op_class: str
    flops: float
    bytes_accessed: float


@dataclass(frozen=True)
class Layer:         # the LayerCost contract
    name: str
    kind: str
    params: int
    forward: tuple
    backward: tuple
    activation_bytes: int
    output_bytes: int


def layer(name, kind, params, act=1000, out=100):
    fwd = (Cost("mm", "matmul", 2e9, 1e6), Cost("norm", "norm", 1e6, 1e5))
    bwd = (Cost("mm.dgrad", "matmul", 2e9, 1e6), Cost("mm.wgrad", "matmul", 2e9, 1e6))
    return Layer(name, kind, params, fwd, bwd, act, out)


BLOCKS = 6
BLOCK_PARAMS = 8 * MIB          # divisible by every world size used here
ROOT_PARAMS = 2 * MIB


def model(blocks=BLOCKS):
    return ([layer("embed", "embedding", ROOT_PARAMS // 2)]
            + [layer(f"block.{i}", "transformer_block", BLOCK_PARAMS) for i in range(blocks)]
            + [layer("norm", "norm", 0), layer("head", "head", ROOT_PARAMS // 2)])


PSI = 2 * ROOT_PARAMS // 2 + BLOCKS * BLOCK_PARAMS


def ops(trace):
    assert len(trace.classes) == 1 and trace.classes[0].ranks == tuple(range(trace.world_size))
    return trace.classes[0].ops


def colls(trace, kind=None):
    return [o for o in ops(trace) if o.kind == "collective" and kind in (None, o.collective)]


def compute_ids(trace, layer_name, phase):
    return [o.id for o in ops(trace)
            if o.kind == "compute" and o.layer == layer_name and o.phase == phase]


def held_after(trace, last_id):
    """Bytes allocated minus freed by ops up to ``last_id`` (issue order)."""
    return sum(o.mem_alloc_bytes - o.mem_free_bytes for o in ops(trace)[:last_id + 1])


def fsdp_trace(world=World(8, 4), layers=None, **kw):
    return fsdp(layers or model(), FSDPConfig(**kw), world)


# ------------------------------------------------------------------------------ DDP
def test_ddp_buckets_reverse_order_whole_tensors_closed_at_cap():
    layers = model()              # kernels name no weight: each layer is one tensor
    buckets = assign_buckets(layers, 4, 25 * MIB, 1 * MIB)
    sizes = [lay.params * 4 for lay in reversed(layers) if lay.params]
    assert [b.size_bytes for b in buckets] == sizes       # every layer reaches the cap
    assert buckets[0].layers == ("head",) and buckets[-1].layers == ("embed",)
    # a bucket closes at the first tensor that takes it to its cap, and only then
    small = [layer(f"l{i}", "mlp", 3 * MIB) for i in range(5)]      # 12 MiB tensors
    got = assign_buckets(small, 4, 25 * MIB, 1 * MIB)
    assert [b.size_bytes for b in got] == [12 * MIB, 36 * MIB, 12 * MIB]
    assert [b.layers for b in got] == [("l4",), ("l3", "l2", "l1"), ("l0",)]
    assert [b.ready_layer for b in got] == [4, 1, 0]


def test_ddp_allreduce_waits_for_last_layer_of_its_bucket():
    trace = ddp(model(), DDPConfig(), World(8, 8))
    ars = colls(trace, "all_reduce")
    assert len(ars) == len(trace.meta["buckets"])
    assert [o.size_bytes for o in ars] == [b["size_bytes"] for b in trace.meta["buckets"]]
    for op in ars:
        assert op.stream == "comm" and op.comm == "world"
        assert op.attrs["layers"][-1] == op.layer
        assert op.deps == (compute_ids(trace, op.layer, "backward")[-1],)
    assert trace.communicators["world"].groups == (tuple(range(8)),)
    opt = ops(trace)[-1]
    assert opt.phase == "optimizer" and opt.op_class == "optimizer"
    assert opt.deps == (ars[-1].id,)


def test_ddp_allreduce_overlaps_later_backward():
    trace = ddp(model(), DDPConfig(), World(4, 4))
    first_ar = colls(trace, "all_reduce")[0]
    later = [o for o in ops(trace) if o.phase == "backward" and o.kind == "compute"
             and o.id > first_ar.id]
    assert later and all(first_ar.id not in o.deps for o in later)


def test_ddp_grad_accum_reduces_once():
    one = ddp(model(), DDPConfig(), World(4, 4))
    acc = ddp(model(), DDPConfig(grad_accum=3), World(4, 4))
    assert len(colls(acc)) == len(colls(one))
    assert {o.attrs["micro_step"] for o in colls(acc)} == {2}
    fwd = [o for o in ops(acc) if o.phase == "forward"]
    assert len(fwd) == 3 * len([o for o in ops(one) if o.phase == "forward"])
    assert acc.meta["global_batch"] == 3 * 4


def test_ddp_static_memory_is_16_psi():
    for cfg in (DDPConfig(), DDPConfig(param_dtype="bf16"), DDPConfig(precision="fp32")):
        trace = ddp(model(), cfg, World(4, 4))
        assert [(c.id, c.static_memory_bytes) for c in trace.classes] == [("all", 16 * PSI)]
    sgd = ddp(model(), DDPConfig(optimizer="sgd"), World(4, 4))
    assert sgd.classes[0].static_memory_bytes == 12 * PSI


def test_ddp_single_rank_has_no_collectives():
    trace = ddp(model(), DDPConfig(), World(1, 8))
    assert not colls(trace) and not trace.communicators


# ----------------------------------------------------------------------------- FSDP
UNITS = BLOCKS + 1      # blocks + root


@pytest.mark.parametrize("mode, ag, rs, ar", [
    ("FULL_SHARD", 2 * BLOCKS + 1, UNITS, 0),
    ("SHARD_GRAD_OP", UNITS, UNITS, 0),
    ("NO_SHARD", 0, 0, UNITS),
    ("HYBRID_SHARD", 2 * BLOCKS + 1, UNITS, UNITS),
    ("_HYBRID_SHARD_ZERO2", UNITS, UNITS, UNITS),
])
def test_fsdp_collective_counts_and_sizes(mode, ag, rs, ar):
    trace = fsdp_trace(sharding=mode)           # 8 ranks, 4 per node, bf16 params
    assert len(colls(trace, "all_gather")) == ag
    assert len(colls(trace, "reduce_scatter")) == rs
    assert len(colls(trace, "all_reduce")) == ar
    unit = {f"block.{i}": BLOCK_PARAMS for i in range(BLOCKS)} | {"root": ROOT_PARAMS}
    shard = {"FULL_SHARD": 8, "SHARD_GRAD_OP": 8, "NO_SHARD": 1}.get(mode, 4)
    for op in colls(trace, "all_gather") + colls(trace, "reduce_scatter"):
        assert op.size_bytes == unit[op.layer] * 2 and op.comm == "shard"
    for op in colls(trace, "all_reduce"):
        assert op.size_bytes == unit[op.layer] * 2 // shard and op.comm == "replicate"
    for op in colls(trace):
        stream = {"all_gather": "unshard", "reduce_scatter": "post_backward"}.get(
            op.collective, "all_reduce" if shard > 1 else "post_backward")
        assert op.stream == stream
    comms = trace.communicators
    if shard == 4:
        assert comms["shard"].groups == ((0, 1, 2, 3), (4, 5, 6, 7))
        assert comms["replicate"].groups == ((0, 4), (1, 5), (2, 6), (3, 7))
    if mode == "NO_SHARD":
        assert comms["replicate"].groups == (tuple(range(8)),) and "shard" not in comms
    assert trace.classes[0].static_memory_bytes == 16 * PSI // shard


def test_full_shard_moves_about_1_5x_ddp():
    n = 8
    world = World(n, 8)
    ddp_vol = sum(2 * (n - 1) / n * o.size_bytes
                  for o in colls(ddp(model(), DDPConfig(param_dtype="bf16"), world)))
    fs_vol = sum((n - 1) / n * o.size_bytes for o in colls(fsdp_trace(world)))
    # exactly 1.5x for resharded units; the root is gathered once per micro-step
    assert 1.4 < fs_vol / ddp_vol <= 1.5


def test_hybrid_on_one_node_has_no_replicate_all_reduce():
    trace = fsdp_trace(World(4, 4), sharding="HYBRID_SHARD")
    assert not colls(trace, "all_reduce") and "replicate" not in trace.communicators


@pytest.mark.parametrize("v2, v1", [
    ({}, {}),
    ({"reshard_after_forward": True}, {"sharding": "FULL_SHARD"}),
    ({"reshard_after_forward": False}, {"sharding": "SHARD_GRAD_OP"}),
    ({"mesh": [1, 8]}, {"sharding": "FULL_SHARD"}),
    ({"mesh": [2, 4]}, {"sharding": "HYBRID_SHARD"}),
    ({"mesh": [4, 2], "reshard_after_forward": False},
     {"sharding": "_HYBRID_SHARD_ZERO2", "shard_group_size": 2}),
    ({"mesh": [8, 1]}, {"sharding": "NO_SHARD"}),
    ({"reshard_after_forward": 1}, {"sharding": "SHARD_GRAD_OP"}),
])
def test_fsdp2_spellings_match_fsdp1(v2, v1):
    a, b = fsdp_trace(**v2), fsdp_trace(**v1)
    key = [(o.collective, o.layer, o.size_bytes, o.comm, o.stream) for o in colls(a)]
    assert key == [(o.collective, o.layer, o.size_bytes, o.comm, o.stream) for o in colls(b)]
    assert a.communicators == b.communicators
    assert [c.static_memory_bytes for c in a.classes] == [c.static_memory_bytes
                                                           for c in b.classes]


def test_fsdp2_int_reshard_gathers_within_groups_in_backward():
    trace = fsdp_trace(reshard_after_forward=2)
    bwd = [o for o in colls(trace, "all_gather") if o.phase == "backward"]
    assert len(bwd) == BLOCKS and {o.comm for o in bwd} == {"reshard"}
    assert trace.communicators["reshard"].groups == ((0, 1), (2, 3), (4, 5), (6, 7))
    fwd = [o for o in colls(trace, "all_gather") if o.phase == "forward"]
    assert {o.comm for o in fwd} == {"shard"}
    assert sum(o.mem_alloc_bytes - o.mem_free_bytes for o in ops(trace)) == 0


def _bwd_gather(trace, name):
    return next(o for o in colls(trace, "all_gather") if o.layer == name and o.phase == "backward")


def test_backward_prefetch_modes_order_the_next_all_gather():
    pre = fsdp_trace(backward_prefetch="BACKWARD_PRE")
    first_b3 = compute_ids(pre, "block.3", "backward")[0]
    assert _bwd_gather(pre, "block.2").id < first_b3          # before current grad compute

    post = fsdp_trace(backward_prefetch="BACKWARD_POST")
    last_b3 = compute_ids(post, "block.3", "backward")[-1]
    ag = _bwd_gather(post, "block.2")
    assert ag.id > last_b3 and last_b3 in ag.deps              # after current grad compute
    rs_b3 = next(o for o in colls(post, "reduce_scatter") if o.layer == "block.3")
    assert ag.id < rs_b3.id

    none = fsdp_trace(backward_prefetch=None)
    rs_b3 = next(o for o in colls(none, "reduce_scatter") if o.layer == "block.3")
    ag = _bwd_gather(none, "block.2")
    assert rs_b3.id in ag.deps                                 # same NCCL stream, issued later
    assert ag.id > compute_ids(none, "block.3", "backward")[-1]


def test_forward_prefetch_issues_next_gather_before_current_compute():
    def fwd_gather(trace, name):
        return next(o for o in colls(trace, "all_gather")
                    if o.layer == name and o.phase == "forward")
    on = fsdp_trace(forward_prefetch=True)
    off = fsdp_trace(forward_prefetch=False)
    assert fwd_gather(on, "block.3").id < compute_ids(on, "block.2", "forward")[0]
    assert fwd_gather(off, "block.3").id > compute_ids(off, "block.2", "forward")[-1]


def test_limit_all_gathers_waits_for_the_free_two_units_back():
    limited = fsdp_trace()
    for i in range(2, BLOCKS):
        ag = next(o for o in colls(limited, "all_gather")
                  if o.layer == f"block.{i}" and o.phase == "forward")
        freed = compute_ids(limited, f"block.{i - 2}", "forward")[-1]
        assert freed in ag.deps
        assert ops(limited)[freed].mem_free_bytes >= BLOCK_PARAMS * 2
    free = fsdp_trace(limit_all_gathers=False)
    for ag in colls(free, "all_gather"):
        assert all(ops(free)[d].kind != "compute" for d in ag.deps if ag.phase == "forward")


def test_compute_waits_for_its_all_gather():
    trace = fsdp_trace()
    for ag in colls(trace, "all_gather"):
        if ag.layer == "root":
            continue
        first = compute_ids(trace, ag.layer, ag.phase)[0]
        assert ag.id in ops(trace)[first].deps


@pytest.mark.parametrize("build", [
    lambda ckpt: ddp(model(), DDPConfig(activation_checkpointing=ckpt), World(4, 4)),
    lambda ckpt: fsdp_trace(activation_checkpointing=ckpt),
])
def test_activation_checkpointing_recomputes_and_saves_memory(build):
    plain, ckpt = build(False), build(True)
    recompute = [o for o in ops(ckpt) if o.phase == "recompute"]
    assert len(recompute) == BLOCKS * 2 and not [o for o in ops(plain) if o.phase == "recompute"]
    first_rc = min(o.id for o in recompute)
    assert {o.layer for o in recompute} == {f"block.{i}" for i in range(BLOCKS)}

    def after_forward(trace):
        return held_after(trace, max(o.id for o in ops(trace) if o.phase == "forward"))
    assert after_forward(plain) - after_forward(ckpt) == BLOCKS * (1000 - 100)
    assert ops(ckpt)[first_rc].mem_alloc_bytes == 1000
    for trace in (plain, ckpt):
        assert sum(o.mem_alloc_bytes - o.mem_free_bytes for o in ops(trace)) == 0


@pytest.mark.parametrize("build", [
    lambda off: ddp(model(), DDPConfig(activation_checkpointing=True, activation_offload=off),
                    World(4, 4)),
    lambda off: fsdp_trace(activation_checkpointing=True, activation_offload=off),
])
def test_activation_offload_moves_checkpointed_inputs_to_host(build):
    kept, off = build(False), build(True)
    copies = [o for o in ops(off) if o.kind == "memcpy"]
    d2h = [o for o in copies if o.attrs["direction"] == "d2h"]
    h2d = [o for o in copies if o.attrs["direction"] == "h2d"]
    # one copy out after each block's forward, one back before its recompute, on the
    # compute stream (the copy blocks compute, as checkpoint_wrapper(offload_to_cpu) does)
    assert [o.layer for o in d2h] == [f"block.{i}" for i in range(BLOCKS)]
    assert sorted(o.layer for o in h2d) == sorted(o.layer for o in d2h)
    assert all(o.stream == "compute" and o.size_bytes == 100 for o in copies)
    assert not [o for o in ops(kept) if o.kind == "memcpy"]
    for o in h2d:      # the recompute of that block comes right after its copy back
        nxt = ops(off)[o.id + 1]
        assert (nxt.layer, nxt.phase) == (o.layer, "recompute")

    def after_forward(trace):
        return held_after(trace, max(o.id for o in ops(trace) if o.phase == "forward"))
    assert after_forward(kept) - after_forward(off) == BLOCKS * 100
    assert sum(o.mem_alloc_bytes - o.mem_free_bytes for o in ops(off)) == 0


def test_activation_offload_needs_checkpointing():
    with pytest.raises(ConfigError) as info:
        parse_strategy({"name": "fsdp", "activation_offload": True})
    assert info.value.field == "strategy.activation_offload"
    assert "activation_checkpointing: true" in str(info.value)


@pytest.mark.parametrize("kw", [
    {}, {"sharding": "SHARD_GRAD_OP"}, {"sharding": "NO_SHARD"}, {"sharding": "HYBRID_SHARD"},
    {"cpu_offload": True}, {"cpu_offload": True, "sharding": "NO_SHARD"},
    {"reduce_dtype": "fp32", "grad_accum": 2}, {"wrap": "none"},
    {"backward_prefetch": "BACKWARD_POST", "forward_prefetch": True},
])
def test_memory_balances_and_trace_validates(kw):
    trace = fsdp_trace(**kw)
    trace.validate()
    assert sum(o.mem_alloc_bytes - o.mem_free_bytes for o in ops(trace)) == 0
    assert all(o.mem_alloc_bytes >= 0 and o.mem_free_bytes >= 0 for o in ops(trace))


def test_gathered_params_and_grads_are_transient():
    trace = fsdp_trace()
    ag = _bwd_gather(trace, "block.3")
    assert ag.mem_alloc_bytes == BLOCK_PARAMS * 2
    bwd = [ops(trace)[i] for i in compute_ids(trace, "block.3", "backward")]
    # unsharded grads appear kernel by kernel, in proportion to each kernel's FLOPs
    assert sum(o.mem_alloc_bytes for o in bwd) == BLOCK_PARAMS * 2
    flops = sum(o.flops for o in bwd)
    for o in bwd:
        assert o.mem_alloc_bytes == pytest.approx(BLOCK_PARAMS * 2 * o.flops / flops, abs=1)
    rs = next(o for o in colls(trace, "reduce_scatter") if o.layer == "block.3")
    assert rs.mem_free_bytes == BLOCK_PARAMS * 2


def test_wrap_none_is_one_unit():
    trace = fsdp_trace(wrap="none")
    assert [o.layer for o in colls(trace)] == ["root", "root"]
    assert colls(trace)[0].size_bytes == PSI * 2


def test_cpu_offload_copies_and_steps_on_cpu():
    trace = fsdp_trace(cpu_offload=True, cpu_adam_bytes_per_s="10 GB/s")
    h2d = [o for o in ops(trace) if o.kind == "memcpy" and o.stream == "h2d"]
    d2h = [o for o in ops(trace) if o.kind == "memcpy" and o.stream == "d2h"]
    assert len(h2d) == len(colls(trace, "all_gather")) and len(d2h) == UNITS
    for ag in colls(trace, "all_gather"):
        assert any(ops(trace)[d].stream == "h2d" for d in ag.deps)
    opt = ops(trace)[-1]
    assert opt.kind == "delay" and opt.duration_s == pytest.approx(PSI / 8 * 20 / 10e9)
    assert trace.classes[0].static_memory_bytes == 0


def test_grad_accum_repeats_gathers_and_reductions():
    trace = fsdp_trace(grad_accum=2)
    assert len(colls(trace, "reduce_scatter")) == 2 * UNITS
    assert len(colls(trace, "all_gather")) == 2 * (2 * BLOCKS + 1)


def test_meta_keys():
    trace = build_trace(model(), FSDPConfig(micro_batch=2, grad_accum=3), World(8, 4),
                        model="toy", tokens_per_sample=128)
    meta = trace.meta
    assert meta["model"] == "toy" and meta["strategy"] == "fsdp"
    assert meta["precision"] == "bf16" and meta["tokens_per_sample"] == 128
    assert meta["global_batch"] == 2 * 3 * 8
    per_micro = sum(c.flops for lay in model() for c in (*lay.forward, *lay.backward))
    assert meta["model_flops_per_iteration"] == pytest.approx(per_micro * 3 * 8)


def test_registry_and_parse():
    assert set(STRATEGIES) == {"ddp", "fsdp", "tf_mirrored", "tf_multiworker", "tf_ps",
                               "tf_central_storage", "horovod", "megatron", "torchtitan",
                               "deepspeed"}
    assert all(s.description for s in STRATEGIES.values())
    cfg = parse_strategy({"name": "fsdp", "sharding": "hybrid_shard"})
    assert cfg.sharding == "HYBRID_SHARD"
    assert parse_strategy({"name": "ddp"}).bucket_cap_mb == 25


@pytest.mark.parametrize("data, world, field", [
    ({"name": "fsdp", "sharding": "ZERO3"}, None, "strategy.sharding"),
    ({"name": "fsdp", "micro_batch": 0}, None, "strategy.micro_batch"),
    ({"name": "ddp", "grad_accum": 0}, None, "strategy.grad_accum"),
    ({"name": "fsdp", "sharding": "FULL_SHARD", "reshard_after_forward": True}, None,
     "strategy.reshard_after_forward"),
    ({"name": "fsdp", "shard_group_size": 4}, None, "strategy.shard_group_size"),
    ({"name": "fsdp", "bogus": 1}, None, "strategy.bogus"),
    ({"name": "tp"}, None, "strategy.name"),
    ({"name": "fsdp", "sharding": "HYBRID_SHARD", "shard_group_size": 16}, World(8, 4),
     "strategy.shard_group_size"),
    ({"name": "fsdp", "sharding": "HYBRID_SHARD", "shard_group_size": 3}, World(8, 4),
     "strategy.shard_group_size"),
    ({"name": "fsdp", "sharding": "HYBRID_SHARD"}, World(12, 8), "strategy.sharding"),
    ({"name": "fsdp", "mesh": [2, 2]}, World(8, 4), "strategy.mesh"),
    ({"name": "fsdp", "reshard_after_forward": 3}, World(8, 4),
     "strategy.reshard_after_forward"),
    ({"name": "fsdp", "cpu_adam_bytes_per_s": "fast"}, None, "strategy.cpu_adam_bytes_per_s"),
])
def test_bad_input_names_the_field(data, world, field):
    with pytest.raises(ConfigError) as err:
        cfg = parse_strategy(data)
        build_trace(model(), cfg, world or World(8, 4))
    assert err.value.field == field
    if field == "strategy.sharding" and world is None:
        assert "FULL_SHARD" in str(err.value) and "_HYBRID_SHARD_ZERO2" in str(err.value)


def test_real_model_layers():
    models = pytest.importorskip("simulator.models")
    spec = models.load_model("gpt2-small")
    layers = models.layer_costs(spec, 2, 1024, "bf16")
    world = World(16, 8)
    for cfg in (DDPConfig(micro_batch=2), FSDPConfig(micro_batch=2, sharding="HYBRID_SHARD"),
                FSDPConfig(micro_batch=2, activation_checkpointing=True)):
        trace = build_trace(layers, cfg, world, model=spec.name)
        assert sum(o.mem_alloc_bytes - o.mem_free_bytes for o in ops(trace)) == 0
        assert trace.meta["params"] == sum(lay.params for lay in layers)


@pytest.mark.parametrize("how", ["alloc", "free"])
@pytest.mark.parametrize("flops", [(1.0, 3.0), (0.0, 0.0, 0.0), (5.0, 0.0, 2.0)])
def test_spread_is_proportional_and_never_under_counts(how, flops):
    from simulator.strategies.base import OpList, spread
    ol = OpList()
    ids = [ol.add(stream="compute", kind="compute", name=f"k{i}", flops=f)
           for i, f in enumerate(flops)]
    n = 1001
    spread(ol, ids, n, how)
    got = [ol.ops[i].mem_alloc_bytes if how == "alloc" else ol.ops[i].mem_free_bytes
           for i in ids]
    w = list(flops) if sum(flops) else [1.0] * len(flops)
    exact = [n * x / sum(w) for x in w]
    assert sum(got) == n
    assert all(abs(g - e) < len(ids) for g, e in zip(got, exact))
    run_got = run_exact = 0.0
    for g, e in zip(got, exact):       # memory held is never below the exact share
        run_got, run_exact = run_got + g, run_exact + e
        assert (run_got >= run_exact - 1e-9) if how == "alloc" else (run_got <= run_exact + 1e-9)


def test_a_kernel_run_again_is_a_new_op_of_its_own_cost():
    """OpList.kernel builds a kernel's fields once per (cost, layer, phase): each op still
    has its own attrs and deps, and each cost its own fields."""
    from simulator.models.ops import OpCost
    from simulator.strategies.base import OpList
    from simulator.trace import Op
    ol = OpList()
    gemm = OpCost("qkv_proj", "matmul", 8, 4, m=2, n=3, k=4, precision="fp8")
    a = ol.kernel(gemm, "layers.0", "forward", 0, ())
    b = ol.kernel(gemm, "layers.0", "forward", 1, (None, a))
    ol.ops[a].attrs["changed"] = True
    assert ol.ops[b] == Op(b, "compute", "compute", "qkv_proj", "layers.0", "forward", 8.0,
                           4.0, "matmul", deps=(a,), attrs={"micro_step": 1, "m": 2, "n": 3,
                                                            "k": 4, "precision": "fp8"})
    assert ol.ops[ol.kernel(gemm, "layers.1", "recompute", 0, ())].layer == "layers.1"
    norm = OpCost("norm", "norm", 1, 1)
    held = weakref.ref(norm)
    ol.kernel(norm, "layers.0", "forward", 0, ())
    del norm
    gc.collect()
    assert held() is not None      # so no other cost can take its id in the OpList's memo


@pytest.mark.parametrize("mem", [{}, {"mem_alloc_bytes": 7}, {"mem_free_bytes": 9}])
def test_a_collective_is_the_op_add_makes_of_its_fields(mem):
    """OpList.collective names Op's fields: the very op OpList.add makes of them."""
    from simulator.models.ops import OpCost
    from simulator.strategies.base import OpList
    by_fields, by_method = OpList(), OpList()
    for ol in (by_fields, by_method):
        ol.kernel(OpCost("norm", "norm", 1, 1), "layers.0", "forward", 0, ())
    a = by_fields.add(stream="tp", kind="collective", collective="all_gather",
                      comm="tp.s0", size_bytes=256, deps=(0, None, 0), name="ag.x",
                      phase="forward", layer="layers.0", attrs={"micro_step": 3}, **mem)
    b = by_method.collective(stream="tp", collective="all_gather", comm="tp.s0",
                             size_bytes=256, deps=(0, None, 0), name="ag.x", phase="forward",
                             layer="layers.0", attrs={"micro_step": 3}, **mem)
    assert a == b == 1 and by_method.ops[b] == by_fields.ops[a]
    assert by_method.ops[b].deps == (0,) and by_method.ops[b].kind == "collective"


def test_a_kernel_op_is_the_op_of_its_fields_by_name():
    """OpList.kernel's op, the first time and from its template later, is the Op that
    names each of its fields (none lands in another field whatever Op's field order)."""
    from dataclasses import fields

    from simulator.models.ops import OpCost
    from simulator.strategies.base import OpList
    from simulator.trace import Op
    cost = OpCost("mlp_up", "matmul", 3e9, 5e6, m=8, n=16, k=32, precision="fp8")
    ol = OpList()
    first = ol.kernel(cost, "layers.1", "backward", 0, ())
    again = ol.kernel(cost, "layers.1", "backward", 4, (first, None))
    expected = {"id": again, "stream": "compute", "kind": "compute", "name": "mlp_up",
                "layer": "layers.1", "phase": "backward", "flops": 3e9,
                "bytes_accessed": 5e6, "op_class": "matmul", "duration_s": None,
                "collective": "", "size_bytes": 0, "comm": "", "peer": -1, "deps": (first,),
                "mem_alloc_bytes": 0, "mem_free_bytes": 0,
                "attrs": {"micro_step": 4, "m": 8, "n": 16, "k": 32, "precision": "fp8"}}
    assert set(expected) == {f.name for f in fields(Op)}
    assert ol.ops[again] == Op(**expected)
    assert ol.ops[first].attrs["micro_step"] == 0 and ol.ops[first].deps == ()


def test_op_maker_names_fields_whatever_their_order():
    """The typed constructor passes each value to the field of its name: the same maker
    over a record with its fields in another order still fills each by name."""
    from dataclasses import dataclass, field

    from simulator.strategies.base import op_maker

    @dataclass
    class Forward:
        id: int
        kind: str
        size_bytes: int = 0
        peer: int = -1
        attrs: dict = field(default_factory=dict)

    @dataclass
    class Backward:
        attrs: dict
        peer: int
        size_bytes: int
        kind: str
        id: int = 0

    for cls in (Forward, Backward):
        make = op_maker("make", ("id", "size_bytes", "attrs"), cls=cls, kind="send", peer=3)
        made = make(id=7, size_bytes=64, attrs={"tag": 1})
        assert (made.id, made.kind, made.size_bytes, made.peer, made.attrs) == \
            (7, "send", 64, 3, {"tag": 1})
    with pytest.raises(TypeError, match="not fields"):
        op_maker("bad", ("id", "flop"))
    with pytest.raises(TypeError, match="no default"):
        op_maker("bad", ("id",), stream="s")          # kind and name have none


@pytest.mark.parametrize("data, expected", [
    ({"name": "ddp", "precision": "fp16"}, True),              # torch.autocast, fp32 weights
    ({"name": "ddp", "precision": "bf16", "param_dtype": "bf16"}, False),   # model.to(bf16)
    ({"name": "ddp", "precision": "tf32"}, False),
    ({"name": "fsdp", "precision": "bf16"}, False),            # MixedPrecision(param_dtype=bf16)
    ({"name": "fsdp", "precision": "bf16", "param_dtype": "fp32"}, True),
    ({"name": "tf_multiworker", "precision": "fp16"}, True),   # Keras mixed_float16
])
def test_autocast_is_16_bit_compute_on_fp32_weights(data, expected):
    from simulator.pipeline import autocasts
    assert autocasts(parse_strategy(data)) is expected


# ------------------------------------------------------------- per-kernel FSDP units
def _bert_layers(blocks=2):
    from simulator.models import layer_costs, load_model
    layers = layer_costs(load_model("bert-large"), 2, 128, "bf16", False)
    return layers[:1 + blocks] + layers[-1:]


@pytest.mark.parametrize("kw, gathers", [
    ({}, 2),                                            # forward, backward
    ({"activation_checkpointing": True}, 3),            # + the recompute, inside the checkpoint
    ({"sharding": "SHARD_GRAD_OP", "activation_checkpointing": True}, 1),   # kept gathered
])
def test_submodule_units_gather_per_kernel(kw, gathers):
    layers = _bert_layers()
    trace = fsdp(layers, FSDPConfig(wrap="submodule", backward_prefetch=None, **kw), World(8, 8))
    trace.validate()
    units = [u for u in trace.meta["units"] if u != "root"]
    assert units == [f"block.{i}.{n}" for i in range(2) for n in
                     ("norm1", "qkv_proj", "attn_out", "norm2", "mlp_up", "mlp_down")]
    for u in units:
        ag = [o for o in colls(trace, "all_gather") if o.layer == u]
        rs = [o for o in colls(trace, "reduce_scatter") if o.layer == u]
        assert len(ag) == gathers and len(rs) == 1
    # each unit's gather carries exactly its kernel's weight; together the block's params
    block = layers[1]
    sizes = {o.layer: o.size_bytes for o in colls(trace, "all_gather")
             if o.layer.startswith("block.0.")}
    assert sum(sizes.values()) == 2 * block.params          # bf16, 8 ranks divide every size
    assert sum(o.mem_alloc_bytes - o.mem_free_bytes for o in ops(trace)) == 0
    # a kernel with a weight waits for its unit's latest gather
    qkv = [o for o in ops(trace) if o.name == "qkv_proj" and o.layer == "block.1"][0]
    gather = max(o.id for o in colls(trace, "all_gather") if o.layer == "block.1.qkv_proj"
                 and o.id < qkv.id)
    assert gather in qkv.deps


def test_submodule_units_hold_one_kernel_weight_at_a_time():
    layers = _bert_layers()
    block = fsdp(layers, FSDPConfig(backward_prefetch=None), World(8, 8))
    sub = fsdp(layers, FSDPConfig(wrap="submodule", backward_prefetch=None), World(8, 8))

    assert len(colls(sub, "all_gather")) > len(colls(block, "all_gather"))
    # the largest gather is one MLP Linear (bf16 weight + bias), not the whole block
    mlp = 1024 * 4096 + 4096
    assert max(o.mem_alloc_bytes for o in colls(sub, "all_gather") if o.layer != "root") == \
        2 * mlp
    assert max(o.mem_alloc_bytes for o in colls(block, "all_gather") if o.layer != "root") == \
        2 * layers[1].params
    # reshard right after the kernel: the gathered weight is freed by that kernel
    forward_gathers = [ag for ag in colls(sub, "all_gather")
                       if ag.layer.endswith("mlp_up") and ag.phase == "forward"]
    assert len(forward_gathers) == 2                    # one per block
    for ag in forward_gathers:
        user = next(o for o in ops(sub) if ag.id in o.deps and o.kind == "compute")
        assert user.name == "mlp_up" and user.mem_free_bytes >= ag.mem_alloc_bytes


def test_submodule_refuses_prefetch_and_unsplittable_layers():
    with pytest.raises(ConfigError) as info:
        FSDPConfig(wrap="submodule")                    # BACKWARD_PRE by default
    assert info.value.field == "strategy.wrap"
    with pytest.raises(ConfigError) as info:
        fsdp(model(), FSDPConfig(wrap="submodule", backward_prefetch=None), World(8, 4))
    assert "do not name their weights" in str(info.value)
    from simulator.models import layer_costs, load_model
    resnet = layer_costs(load_model("resnet-50"), 8, 1, "bf16")
    with pytest.raises(ConfigError) as info:
        fsdp(resnet, FSDPConfig(wrap="submodule", backward_prefetch=None), World(8, 4))
    assert info.value.field == "strategy.wrap" and "has none" in str(info.value)


def test_ddp_bucket_launches_after_the_kernel_completing_its_last_gradient():
    """With kernels that name their weights, a bucket holding only a block's last weight
    starts right after that weight's gradient kernel, before the block's backward ends."""
    from conftest import up_down_blocks
    blocks = up_down_blocks(2, 8 * MIB)                      # 32 MiB per weight: 1 bucket
    trace = ddp(blocks, DDPConfig(), World(4, 4))
    byid = {o.id: o for o in ops(trace)}
    ars = colls(trace, "all_reduce")
    assert [o.size_bytes for o in ars] == [32 * MIB] * 4
    assert [byid[o.deps[0]].name for o in ars] == ["down.wgrad", "up.wgrad"] * 2
    assert [byid[o.deps[0]].layer for o in ars] == ["b1", "b1", "b0", "b0"]
    first_bwd_end = compute_ids(trace, "b1", "backward")[-1]
    assert ars[0].deps[0] < first_bwd_end                    # before b1's backward ends


# ------------------------------------------------------------------ optimizer step bytes
@pytest.mark.parametrize("opt,impl,per_param", [
    # fused: read p, g and state, write p and state (4-byte p, g, state)
    ("adam", "fused", 4 + 4 + 4 + 2 * 4 + 2 * 4), ("sgd", "fused", 4 + 4 + 4 + 2 * 4),
    # foreach AdamW: mul_(p) 8, lerp_(m, g) 12, mul_(v) 8, addcmul_(v, g, g) 12, sqrt 8,
    # div_ 8, add_ 8, addcdiv_(p, m, denom) 16
    ("adam", "foreach", 8 + 12 + 8 + 12 + 8 + 8 + 8 + 16),
    # foreach SGD with momentum and decay: add(g, p) 12, mul_(buf) 8, add_(buf, g) 12,
    # add_(p, buf) 12
    ("sgd", "foreach", 12 + 8 + 12 + 12)])
def test_optimizer_step_bytes_follow_the_kernels(opt, impl, per_param):
    from simulator.strategies.optim import step_bytes
    assert step_bytes(opt, impl) == per_param
    assert step_bytes(opt, impl, grad_scaler=True) == per_param + 8   # unscale: r/w grads


@pytest.mark.parametrize("impl,precision", [("foreach", "bf16"), ("fused", "bf16"),
                                            ("foreach", "fp16")])
def test_ddp_optimizer_op_moves_the_implementations_bytes(impl, precision):
    from simulator.strategies.optim import step_bytes
    trace = ddp(model(), DDPConfig(optimizer_impl=impl, precision=precision), World(8, 8))
    opt = [o for o in ops(trace) if o.phase == "optimizer"]
    assert len(opt) == 1 and opt[0].op_class == "optimizer"
    assert opt[0].bytes_accessed == PSI * step_bytes("adam", impl, precision == "fp16")
    # foreach holds one fp32 temporary per parameter while it runs (AdamW's sqrt(v) list)
    temp = PSI * 4 if impl == "foreach" else 0
    assert opt[0].mem_alloc_bytes == opt[0].mem_free_bytes == temp


def test_fsdp_optimizer_steps_on_the_shard_and_tensorflow_is_fused():
    from simulator.strategies import parse_strategy as parse
    trace = fsdp_trace(World(8, 8))
    (opt,) = [o for o in ops(trace) if o.phase == "optimizer"]
    assert opt.bytes_accessed == PSI / 8 * 80               # foreach AdamW, PyTorch's default
    assert parse({"name": "tf_mirrored"}).optimizer_impl == "fused"
    with pytest.raises(ConfigError, match="strategy.optimizer_impl.*one fused kernel"):
        parse({"name": "tf_mirrored", "optimizer_impl": "foreach"})
    with pytest.raises(ConfigError, match="strategy.optimizer_impl"):
        DDPConfig(optimizer_impl="apex")
