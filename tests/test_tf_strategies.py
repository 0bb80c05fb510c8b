"""TensorFlow strategies and Horovod as Trace generators: the structure TensorFlow's and
Horovod's code gives (FACTS.md section 4), worked out from the rules, not copied from output.
"""

import math

import pytest

from simulator.errors import ConfigError
from simulator.models.ops import LayerCost, OpCost
from simulator.strategies import STRATEGIES, World, build_trace, parse_strategy
from simulator.strategies.optim import CPU_OPT_STEP_BYTES
from simulator.strategies.tf_common import Pack, concat_and_split, fuse, group_by_size, tf_constants

MIB = 1 << 20
FP32 = 4
TF_NAMES = ("tf_mirrored", "tf_multiworker", "tf_ps", "tf_central_storage", "horovod")


def make_layer(name, params, flops=1e9, act=4000, out=400, kind="conv_block"):
    fwd = (OpCost(f"{name}.f", "conv", flops, 1e6),)
    bwd = (OpCost(f"{name}.dgrad", "conv", flops, 1e6), OpCost(f"{name}.wgrad", "conv", flops, 1e6))
    return LayerCost(name, kind, params, fwd, bwd, act, out)


# Uneven sizes, one layer without parameters (a pooling layer has no variable).
PARAMS = [3 * MIB, 1 * MIB, 0, 5 * MIB, 2 * MIB, 7 * MIB]
LAYERS = [make_layer(f"l{i}", p) for i, p in enumerate(PARAMS)]
PSI = sum(PARAMS)
WITH_PARAMS = [i for i, p in enumerate(PARAMS) if p]


def trace_of(name, world=World(8, 8), layers=LAYERS, **kw):
    cfg = parse_strategy({"name": name, "precision": "fp16", **kw})
    return build_trace(layers, cfg, world, model="toy")


def ops_of(trace, kind=None, collective=None):
    (cls,) = trace.classes
    return [o for o in cls.ops if kind in (None, o.kind)
            and collective in (None, o.collective)]


def last_backward_op(trace):
    return max(o.id for o in ops_of(trace, "compute") if o.phase == "backward")


# ------------------------------------------------------------------------- registry
def test_registry_names_the_five_strategies():
    assert set(TF_NAMES) <= set(STRATEGIES)
    for name in TF_NAMES:
        cfg = parse_strategy({"name": name})
        assert cfg.name == name and STRATEGIES[name].config is type(cfg)
        assert cfg.default_param_dtype() == "fp32"     # Keras keeps fp32 variables


def test_defaults_come_from_the_data_file():
    k = tf_constants()
    assert parse_strategy({"name": "tf_mirrored"}).cross_device_ops == k["mirrored"]["cross_device_ops"]
    assert parse_strategy({"name": "tf_mirrored"}).num_packs == k["mirrored"]["num_packs"]
    assert parse_strategy({"name": "horovod"}).fusion_threshold_mb == k["horovod"]["fusion_threshold_mb"]
    assert parse_strategy({"name": "horovod"}).cycle_time_ms == k["horovod"]["cycle_time_ms"]
    # FACTS.md section 4: docs 64 MB, current operations.cc 128 MB and 1 ms
    assert (k["horovod"]["fusion_threshold_mb"], k["horovod"]["current_fusion_threshold_mb"],
            k["horovod"]["current_cycle_time_ms"]) == (64, 128, 1)
    assert k["parameter_server"]["min_shard_bytes"] == 256 << 10   # MinSizePartitioner


# ------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("data, field", [
    ({"name": "tf_ps", "num_ps": 0}, "strategy.num_ps"),
    ({"name": "tf_ps", "num_ps": 2, "partitioner": {"max_shards": 3}},
     "strategy.partitioner.max_shards"),
    ({"name": "tf_ps", "num_ps": 2, "partitioner": {"kind": "fixed", "num_shards": 4}},
     "strategy.partitioner.num_shards"),
    ({"name": "tf_ps", "partitioner": {"kind": "fixed"}}, "strategy.partitioner.num_shards"),
    ({"name": "tf_ps", "partitioner": {"min_shard_bytes": 0}},
     "strategy.partitioner.min_shard_bytes"),
    ({"name": "tf_ps", "partitioner": {"shards": 2}}, "strategy.partitioner.shards"),
    ({"name": "tf_ps", "grad_accum": 2}, "training.grad_accum"),
    ({"name": "tf_multiworker", "implementation": "NCCL", "worker_device": "CPU"},
     "strategy.implementation"),
    ({"name": "tf_multiworker", "worker_device": "CPU"}, "strategy.worker_device"),
    ({"name": "tf_multiworker", "implementation": "MPI"}, "strategy.implementation"),
    ({"name": "tf_multiworker", "bytes_per_pack": -1}, "strategy.bytes_per_pack"),
    ({"name": "tf_mirrored", "cross_device_ops": "AllReduceCrossDeviceOps"},
     "strategy.cross_device_ops"),
    ({"name": "tf_mirrored", "num_packs": -1}, "strategy.num_packs"),
    ({"name": "tf_mirrored", "cross_device_ops": "ReductionToOneDevice", "num_packs": 2},
     "strategy.num_packs"),
    ({"name": "horovod", "fusion_threshold_mb": -1}, "strategy.fusion_threshold_mb"),
    ({"name": "horovod", "cycle_time": 1}, "strategy.cycle_time"),
    ({"name": "tf_central_storage", "cpu_update_bytes_per_s": "fast"},
     "strategy.cpu_update_bytes_per_s"),
])
def test_options_tensorflow_rejects_name_the_field(data, field):
    with pytest.raises(ConfigError) as info:
        parse_strategy(data)
    assert info.value.field == field, str(info.value)


@pytest.mark.parametrize("name, world, kw, field", [
    ("tf_mirrored", World(16, 8), {}, "strategy.name"),            # two machines
    ("tf_central_storage", World(16, 8), {}, "strategy.name"),
    ("tf_mirrored", World(3, 8), {"cross_device_ops": "HierarchicalCopyAllReduce"},
     "strategy.cross_device_ops"),                                   # no two equal halves
    ("tf_ps", World(8, 8), {"ps_placement": "dedicated"}, "strategy.num_ps"),
    ("tf_ps", World(16, 8), {"num_ps": 2, "ps_placement": "dedicated"}, "strategy.num_ps"),
])
def test_layouts_tensorflow_cannot_run_name_the_field(name, world, kw, field):
    with pytest.raises(ConfigError) as info:
        trace_of(name, world, **kw)
    assert info.value.field == field, str(info.value)


# --------------------------------------------------------------------- packing rules
SIZES = {0: 10, 1: 10, 2: 10, 3: 10, 4: 30, 5: 5}


def test_group_by_size_starts_a_pack_once_the_current_one_exceeds_the_limit():
    packs = group_by_size(list(SIZES), SIZES, 15)
    # cross_device_utils.group_by_size: a pack closes only after it grew past 15
    for p in packs[:-1]:
        assert p.size_bytes > 15 and p.size_bytes - SIZES[p.grads[-1]] <= 15
    assert [i for p in packs for i in p.grads] == list(SIZES)
    exact = {0: 10, 1: 5, 2: 1}              # 15 is not past 15: the pack stays open
    assert len(group_by_size([0, 1, 2], exact, 15)) == 1
    assert group_by_size(list(SIZES), SIZES, 0) == [Pack(0, tuple(SIZES), sum(SIZES.values()))]


def test_horovod_fusion_stays_within_the_threshold_and_is_maximal():
    packs = fuse(list(SIZES), SIZES, 20)
    for p in packs:
        assert p.size_bytes <= 20 or len(p.grads) == 1
    for p, q in zip(packs, packs[1:]):                 # the next tensor did not fit
        assert p.size_bytes + SIZES[q.grads[0]] > 20
    assert [len(p.grads) for p in fuse(list(SIZES), SIZES, 0)] == [1] * len(SIZES)


def test_concat_and_split_gives_equal_pieces_and_the_remainder_to_the_last():
    params = {0: 7, 1: 3, 2: 5}
    packs = concat_and_split([0, 1, 2], params, FP32, 4)
    assert [p.size_bytes for p in packs] == [3 * FP32] * 3 + [(15 - 9) * FP32]
    assert all(p.ready == 0 for p in packs)            # the concat needs every gradient


# ------------------------------------------------------------------ MirroredStrategy
@pytest.mark.parametrize("num_packs", [1, 3])
def test_nccl_all_reduce_packs(num_packs):
    t = trace_of("tf_mirrored", num_packs=num_packs)
    ars = ops_of(t, "collective", "all_reduce")
    split = PSI // num_packs
    assert [o.size_bytes for o in ars] == [split * FP32] * (num_packs - 1) + \
        [(PSI - split * (num_packs - 1)) * FP32]
    assert all(o.comm == "world" for o in ars)
    assert t.communicators["world"].groups == (tuple(range(8)),)


def test_nccl_all_reduce_without_packing_reduces_each_variable():
    ars = ops_of(trace_of("tf_mirrored", num_packs=0), "collective", "all_reduce")
    assert sorted(o.size_bytes for o in ars) == sorted(PARAMS[i] * FP32 for i in WITH_PARAMS)


def test_keras_reduces_after_backward_unless_overlap():
    t = trace_of("tf_mirrored", num_packs=0)
    last_bwd = last_backward_op(t)
    assert all(last_bwd in o.deps for o in ops_of(t, "collective"))
    t = trace_of("tf_mirrored", num_packs=0, overlap=True)
    first = ops_of(t, "collective")[0]           # the last layer's gradient, reduced first
    assert first.size_bytes == PARAMS[-1] * FP32 and first.id < last_backward_op(t)


def test_reduction_to_one_device_copies_to_gpu0_and_back():
    t = trace_of("tf_mirrored", cross_device_ops="ReductionToOneDevice")
    colls = ops_of(t, "collective")
    assert [o.collective for o in colls] == ["reduce", "broadcast"] * len(WITH_PARAMS)
    assert all(o.attrs["algorithm"] == "star" and o.attrs["root"] == 0 for o in colls)
    sums = [o for o in ops_of(t, "compute") if o.name.startswith("add_n")]
    assert [o.attrs["inputs"] for o in sums] == [8] * len(WITH_PARAMS)


@pytest.mark.parametrize("num_packs", [1, 6])
def test_hierarchical_copy_rotates_the_main_devices(num_packs):
    t = trace_of("tf_mirrored", cross_device_ops="HierarchicalCopyAllReduce",
                 num_packs=num_packs)
    assert t.communicators["hier.halves"].groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    colls = ops_of(t, "collective")
    assert len(colls) == 4 * num_packs
    for i in range(num_packs):
        reduce_half, reduce_pair, bcast_pair, bcast_half = colls[4 * i: 4 * i + 4]
        main0 = i % 8                        # group_0_main_device = i % num_devices
        j = main0 % 4
        assert (reduce_half.comm, reduce_half.attrs["root"]) == ("hier.halves", j)
        assert bcast_half.attrs["root"] == j
        assert t.communicators[reduce_pair.comm].groups == ((j, j + 4),)
        root = reduce_pair.attrs["root"]
        assert (j, j + 4)[root] == main0 and bcast_pair.attrs["root"] == root
        assert [o.collective for o in colls[4 * i: 4 * i + 4]] == \
            ["reduce", "reduce", "broadcast", "broadcast"]


def test_one_replica_reduces_nothing():
    t = trace_of("tf_mirrored", World(1, 8))
    assert not ops_of(t, "collective") and not t.communicators


# ---------------------------------------------------------------- MultiWorkerMirrored
def test_multiworker_packs_follow_backward_order():
    limit = 4 * MIB
    t = trace_of("tf_multiworker", World(16, 8), implementation="NCCL", bytes_per_pack=limit)
    ars = ops_of(t, "collective", "all_reduce")
    expected = group_by_size(WITH_PARAMS[::-1], {i: PARAMS[i] * FP32 for i in WITH_PARAMS},
                             limit)
    assert [o.size_bytes for o in ars] == [p.size_bytes for p in expected]
    assert ars[0].attrs["pack"] == 0 and t.meta["packs"][0]["layers"][0] == "l5"
    assert {o.stream for o in ars} == {"comm"}                    # NCCL launches ordered
    assert "algorithm" not in ars[0].attrs                      # NCCL's tuner decides
    assert t.communicators["world"].groups == (tuple(range(16)),)


def test_ring_and_auto_run_tensorflow_s_ring():
    assert tf_constants()["multiworker"]["auto_resolves_to"] == "RING"   # resolver: see yaml
    for impl in ("RING", "AUTO"):
        t = trace_of("tf_multiworker", World(16, 8), implementation=impl,
                     bytes_per_pack=4 * MIB)
        ars = ops_of(t, "collective", "all_reduce")
        assert len(ars) > 1
        assert all((o.attrs["algorithm"], o.attrs["protocol"]) == ("ring", "Simple")
                   for o in ars)
        assert len({o.stream for o in ars}) == len(ars)          # unordered: concurrent
        assert t.meta["resolved_implementation"] == "RING"


def test_multiworker_default_is_one_pack_after_backward():
    t = trace_of("tf_multiworker", World(16, 8))
    (ar,) = ops_of(t, "collective")
    assert ar.size_bytes == PSI * FP32 and last_backward_op(t) in ar.deps


# --------------------------------------------------------------------------- Horovod
@pytest.mark.parametrize("threshold_mb", [0, 4, 8, 64])
def test_horovod_fusion_buffers(threshold_mb):
    t = trace_of("horovod", fusion_threshold_mb=threshold_mb, cycle_time_ms=2)
    ars = ops_of(t, "collective", "all_reduce")
    sizes = {i: PARAMS[i] * FP32 for i in WITH_PARAMS}
    assert [o.size_bytes for o in ars] == \
        [p.size_bytes for p in fuse(WITH_PARAMS[::-1], sizes, threshold_mb * MIB)]
    waits = [o for o in ops_of(t, "delay")]
    assert len(waits) == len(ars) and all(w.duration_s == pytest.approx(1e-3) for w in waits)
    assert all(a.deps == (w.id,) for w, a in zip(waits, ars))


def test_horovod_reduces_during_backward_and_bigger_threshold_means_fewer_buffers():
    t = trace_of("horovod", fusion_threshold_mb=8)
    assert ops_of(t, "collective")[0].id < last_backward_op(t)
    n64 = len(ops_of(trace_of("horovod", fusion_threshold_mb=64), "collective"))
    n128 = len(ops_of(trace_of("horovod", fusion_threshold_mb=128), "collective"))
    n8 = len(ops_of(t, "collective"))
    assert n128 <= n64 <= n8


def test_horovod_fp16_compression_halves_the_buffers():
    t = trace_of("horovod", reduce_dtype="fp16", fusion_threshold_mb=0)
    assert sum(o.size_bytes for o in ops_of(t, "collective")) == PSI * 2


def test_accumulation_writes_the_silent_micro_steps_once():
    t = trace_of("horovod", grad_accum=5)
    repeated = [o for o in ops_of(t, "compute") if o.attrs.get("repeat")]
    assert repeated and all(o.attrs["repeat"] == 4 for o in repeated)
    assert all(o.id < ops_of(t, "delay")[0].id for o in repeated)
    assert t.meta["global_batch"] == 5 * 8 * 1


# --------------------------------------------------------------- CentralStorageStrategy
def test_central_storage_moves_variables_and_gradients_over_pcie():
    bw = 10e9
    t = trace_of("tf_central_storage", cpu_update_bytes_per_s=bw, optimizer="sgd")
    pulls, pushes = ops_of(t, "recv"), ops_of(t, "send")
    assert sum(o.size_bytes for o in pulls) == PSI * FP32 == sum(o.size_bytes for o in pushes)
    assert {o.attrs["host"] for o in pulls + pushes} == {0}
    add, step = ops_of(t, "delay")
    assert add.duration_s == pytest.approx((8 + 1) * PSI * FP32 / bw)     # add_n of 8
    assert step.duration_s == pytest.approx(PSI * CPU_OPT_STEP_BYTES["sgd"] / bw)
    for o in ops_of(t, "compute"):
        if o.phase == "forward" and o.name == "l3.f":
            assert any(p.layer == "l3" and p.id in o.deps for p in pulls)
    one = trace_of("tf_central_storage", World(1, 8))
    assert not ops_of(one, "recv") and one.meta["variables_on"] == "GPU"


# --------------------------------------------------------------- ParameterServerStrategy
def ps_trace(world=World(24, 8), **kw):
    return trace_of("tf_ps", world, **kw)


def step0(cls, kind):
    return [o for o in cls.ops if o.kind == kind and o.attrs.get("step") == 0]


def test_ps_layout_dedicated_hosts_are_the_last_machines():
    t = ps_trace(num_ps=1)
    assert t.world_size == 16 and t.meta["ps_servers"] == [2]
    assert sorted(r for c in t.classes for r in c.ranks) == list(range(16))
    assert t.communicators == {}                              # workers never meet
    colo = ps_trace(World(8, 8), num_ps=2)                    # auto: one machine
    assert colo.meta["ps_placement"] == "colocated" and colo.meta["ps_servers"] == [0, 0]
    assert colo.meta["on_worker_failure"] == "continue"


def test_ps_traffic_per_worker_step_is_twice_the_variables():
    t = ps_trace(num_ps=2, partitioner={"max_shards": 2})
    for cls in t.classes:
        assert sum(o.size_bytes for o in step0(cls, "recv")) == PSI * FP32
        assert sum(o.size_bytes for o in step0(cls, "send")) == PSI * FP32
    assert t.meta["pull_bytes_per_worker_step"] + t.meta["push_bytes_per_worker_step"] == \
        2 * PSI * FP32


def test_ps_round_robin_placement_makes_a_hot_server():
    t = ps_trace(World(32, 8), num_ps=2)
    expected = [0, 0]
    for k, i in enumerate(WITH_PARAMS):                       # one variable per layer
        expected[k % 2] += PARAMS[i] * FP32
    assert t.meta["ps_variable_bytes"] == expected
    cls = t.classes[0]
    ps_of = {o.layer: o.attrs["ps"] for o in step0(cls, "recv")}
    assert ps_of == {f"l{i}": k % 2 for k, i in enumerate(WITH_PARAMS)}
    assert {o.attrs["host"] for o in step0(cls, "recv")} == {2, 3}


def test_min_size_partitioner_shards_then_places_round_robin():
    min_bytes = 8 * MIB
    t = ps_trace(World(32, 8), num_ps=2,
                 partitioner={"min_shard_bytes": min_bytes, "max_shards": 2})
    shards = {i: max(1, min(2, math.ceil(PARAMS[i] * FP32 / min_bytes))) for i in WITH_PARAMS}
    assert t.meta["shards"] == sum(shards.values())
    recvs = step0(t.classes[0], "recv")
    by_layer = {}
    for o in recvs:
        by_layer.setdefault(o.layer, []).append(o)
    counter = 0
    for i in WITH_PARAMS:
        got = sorted(by_layer[f"l{i}"], key=lambda o: o.attrs["ps"])
        assert len(got) == shards[i]
        assert sum(o.size_bytes for o in got) == PARAMS[i] * FP32
        assert {o.attrs["ps"] for o in got} == {(counter + j) % 2 for j in range(shards[i])}
        counter += shards[i]


def test_ps_phases_are_rotations_of_the_same_loop():
    t = ps_trace()
    steps = tf_constants()["parameter_server"]["async_steps"]
    assert len(t.classes) == min(16, tf_constants()["parameter_server"]["async_phases"])
    kinds = None
    for cls in t.classes:
        count = sorted((o.kind, o.name) for o in cls.ops)
        kinds = kinds or count
        assert count == kinds                                  # same work, other order
        assert len([o for o in cls.ops if o.kind == "send"]) == steps * len(WITH_PARAMS)
    firsts = {cls.ops[0].name for cls in t.classes}
    assert len(firsts) > 1                                     # entered at other points
    assert t.meta["global_batch"] == steps * 16


def test_ps_memory_is_balanced_from_the_held_activations():
    t = ps_trace()
    for cls in t.classes:
        held = cls.static_memory_bytes
        mem = low = held
        for o in cls.ops:                      # ops of one class run in list order here
            mem += o.mem_alloc_bytes - o.mem_free_bytes
            low = min(low, mem)
        assert mem == held
        assert low >= t.classes[0].static_memory_bytes      # phase0


def test_ps_overlap_pushes_each_gradient_after_its_backward():
    t = ps_trace(overlap=True)
    cls = t.classes[0]
    last_bwd = max(o.id for o in step0(cls, "compute") if o.phase == "backward")
    first_push = step0(cls, "send")[0]
    assert first_push.layer == "l5" and first_push.id < last_bwd


def test_horovod_fuses_named_weights_and_starts_each_buffer_after_its_last_gradient():
    """Kernels that name their weights make each weight a tensor: buffers fuse tensors (not
    whole layers) and a buffer starts after the kernel completing its last gradient."""
    from conftest import up_down_blocks
    from simulator.strategies.horovod import HorovodConfig, horovod
    blocks = up_down_blocks(2, 4 * MIB)                      # 16 MiB per weight in fp32
    t = horovod(blocks, HorovodConfig(fusion_threshold_mb=24), World(8, 8))
    byid = {o.id: o for o in t.classes[0].ops}
    ars = ops_of(t, "collective", "all_reduce")
    assert [o.size_bytes for o in ars] == [16 * MIB] * 4         # 16 + 16 > 24: no fusion
    waits = [byid[o.deps[0]] for o in ars]                       # each buffer's cycle wait
    assert [byid[c.deps[0]].name for c in waits] == ["down.wgrad", "up.wgrad"] * 2
    assert [m["tensors"] for m in t.meta["buffers"]] == [1] * 4
    # waits for the background thread do not queue behind each other or the all-reduces
    assert [c.stream for c in waits] == ["cycle.0", "cycle.1", "cycle.2", "cycle.3"]
    assert {o.stream for o in ars} == {"comm"}
