"""Framework work beyond the model's kernels: gradient clipping before the step."""

from __future__ import annotations

import pytest

from simulator.models.costs import layer_costs
from simulator.models.spec import load_model
from simulator.strategies import DDPConfig, FSDPConfig, World
from simulator.strategies.ddp import ddp
from simulator.strategies.fsdp import fsdp

LAYERS = layer_costs(load_model("gpt2-small"), 1, 256, "bf16")


def _ops(trace):
    return trace.classes[0].ops


def test_fsdp_clip_reads_and_scales_the_sharded_grads_around_one_all_reduce():
    world = World(8, 8)
    plain, clip = fsdp(LAYERS, FSDPConfig(), world), fsdp(LAYERS, FSDPConfig(grad_clip_norm=1.0),
                                                         world)
    ops = _ops(clip)
    names = [o.name for o in ops]
    i = names.index("grad_norm")
    assert names[i:i + 4] == ["grad_norm", "all_reduce.grad_norm", "grad_clip",
                              "optimizer.adam"]
    per_rank = ops[-1].attrs["params"]              # the optimizer's sharded parameters
    # foreach norm reads the fp32 grads once, foreach mul reads and writes them
    assert ops[i].bytes_accessed == 4 * per_rank
    assert ops[i + 2].bytes_accessed == 2 * 4 * per_rank
    ar = ops[i + 1]
    assert ar.collective == "all_reduce" and ar.comm == "shard" and ar.size_bytes == 4
    assert ops[i + 3].deps == (ops[i + 2].id,)
    assert len(_ops(plain)) == len(ops) - 3


def test_ddp_clip_is_local():
    clip = ddp(LAYERS, DDPConfig(grad_clip_norm=1.0), World(8, 8))
    names = [o.name for o in _ops(clip)]
    assert "grad_norm" in names and "grad_clip" in names
    assert "all_reduce.grad_norm" not in names          # replicated gradients


def test_clip_norm_must_be_positive():
    from simulator.errors import ConfigError
    with pytest.raises(ConfigError) as info:
        FSDPConfig(grad_clip_norm=0.0)
    assert info.value.field == "strategy.grad_clip_norm"


def test_fsdp2_copies_around_its_collectives_and_fsdp1_has_none():
    world = World(8, 8)
    v1 = fsdp(LAYERS, FSDPConfig(), world)
    v2 = fsdp(LAYERS, FSDPConfig(mesh=[1, 8]), world)
    assert not [o for o in _ops(v1) if "copy" in o.name]
    ops = _ops(v2)
    gathers = [o for o in ops if o.collective == "all_gather"]
    outs = [o for o in ops if o.name.startswith("all_gather_copy_out.")]
    ins = [o for o in ops if o.name.startswith("reduce_scatter_copy_in.")]
    rs = [o for o in ops if o.collective == "reduce_scatter"]
    # one copy-out per gather (forward and backward), one copy-in per reduce-scatter
    assert len(outs) == len(gathers) and len(ins) == len(rs) > 0
    for out in outs:
        ag = ops[out.deps[0]]
        assert ag.collective == "all_gather" and out.stream == "compute"
        # split_with_sizes_copy reads and writes the gathered unit (bf16 weights)
        assert out.bytes_accessed == 2 * ag.size_bytes
        # the unit's first kernel waits for the copy, not only for the gather
        waiting = [o for o in ops if out.id in o.deps and o.kind == "compute"]
        assert waiting
        assert all(ag.id not in o.deps for o in waiting)
    for cin, r in zip(ins, rs):
        assert cin.id in r.deps and cin.stream == "post_backward"
        # chunk_cat: read the bf16 gradients, write the reduce dtype (bf16 here): 2 x 2 B
        assert cin.bytes_accessed == 2 * r.size_bytes
