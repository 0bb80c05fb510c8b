"""The 3-D generator's kernels share their attrs dicts (issue 43: a trace of N micro-batches
should not hold N copies of what is identical); the trace is the same op for op."""

from __future__ import annotations

import dataclasses

from simulator.models import load_model
from simulator.models.ops import OpCost
from simulator.strategies import World
from simulator.strategies import base
from simulator.strategies.base import OpList
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.generate import _Hooks, build_parallel

GPT = load_model("gpt3-1.3b")


def _trace(plan: ParallelPlan, micro_batches: int):
    cfg = MegatronConfig(micro_batch=1, grad_accum=micro_batches)
    return build_parallel(dataclasses.replace(GPT, layers=4), plan, cfg,
                          World(plan.size, min(8, plan.size)), seq_len=128)


def test_kernels_of_equal_attrs_share_one_dict_across_layers_and_lists():
    pool: dict = {}
    one, two = OpList(pool), OpList(pool)
    gemm = OpCost("qkv_proj", "matmul", 8, 4, m=2, n=3, k=4)
    a = one.kernel(gemm, "layers.0", "forward", 5, ())
    b = one.kernel(gemm, "layers.1", "forward", 5, ())          # another layer, same attrs
    c = two.kernel(gemm, "layers.2", "backward", 5, ())         # another class's list
    d = one.kernel(gemm, "layers.0", "forward", 6, ())          # another micro-batch
    assert one.ops[a].attrs is one.ops[b].attrs is two.ops[c].attrs
    assert one.ops[a].attrs == {"micro_step": 5, "m": 2, "n": 3, "k": 4}
    assert one.ops[d].attrs == {"micro_step": 6, "m": 2, "n": 3, "k": 4}
    assert one.ops[d].attrs is not one.ops[a].attrs
    # one dict per (other keys, micro-step): 2 micro-steps of one shape
    assert len(pool) == 2


def test_equal_values_of_another_type_are_not_shared():
    """m = 2 and m = 2.0 hash alike, but an op written as 2.0 must keep its float."""
    pool: dict = {}
    ol = OpList(pool)
    ints = ol.kernel(OpCost("gemm", "matmul", 8, 4, m=2, n=3, k=4), "l", "forward", 0, ())
    floats = ol.kernel(OpCost("gemm", "matmul", 8, 4, m=2.0, n=3, k=4), "l", "forward", 0,
                       ())
    assert type(ol.ops[ints].attrs["m"]) is int
    assert type(ol.ops[floats].attrs["m"]) is float
    assert ol.ops[ints].attrs is not ol.ops[floats].attrs


def test_an_oplist_without_a_pool_still_copies():
    ol = OpList()
    gemm = OpCost("gemm", "matmul", 8, 4)
    a = ol.kernel(gemm, "layers.0", "forward", 0, ())
    b = ol.kernel(gemm, "layers.1", "forward", 0, ())
    assert ol.ops[a].attrs == ol.ops[b].attrs and ol.ops[a].attrs is not ol.ops[b].attrs


def test_a_3d_trace_with_shared_attrs_is_the_trace_with_copies(monkeypatch):
    """TP2 x PP2 (interleaved, 2 chunks) x DP2 at 8 micro-batches: every op equal field by
    field to the one built with a copy per op, and the compute ops' attrs as few dicts as
    distinct contents."""
    plan = ParallelPlan(tp=2, pp=2, dp_shard=2, vp=2, schedule="interleaved_1f1b",
                        dp_mode="ddp")
    shared = _trace(plan, 8)
    init = OpList.__init__
    monkeypatch.setattr(base.OpList, "__init__", lambda self, shared_attrs=None: init(self))
    copied = _trace(plan, 8)
    assert [c.ops for c in shared.classes] == [c.ops for c in copied.classes]
    compute = [op for c in shared.classes for op in c.ops if op.kind == "compute"]
    contents = {tuple(op.attrs.items()) for op in compute}
    assert len({id(op.attrs) for op in compute}) == len(contents)
    copies = [op for c in copied.classes for op in c.ops if op.kind == "compute"]
    assert len({id(op.attrs) for op in copies}) == len(copies)


class _Part:
    def __init__(self, deps):
        self.deps = deps

    def before(self, cost, phase):
        return self.deps


def test_hooks_before_concatenates_the_parts_in_order():
    """What ``tuple(d for p in parts for d in p.before(...))`` gave: each part's deps in
    part order, lists and tuples alike, empty parts adding nothing."""
    hooks = _Hooks([_Part(()), _Part([3, 1]), _Part(()), _Part((7,))])
    assert hooks.before(None, "forward") == (3, 1, 7)
    assert _Hooks([_Part(()), _Part(())]).before(None, "forward") == ()


def test_micro_attrs_are_the_kernels_dict_of_that_micro_step():
    """A TP collective's ``{"micro_step": m}`` is the dict a shapeless kernel of micro-step m
    holds (the same content), shared where the list shares, new each call where not."""
    pool: dict = {}
    ol = OpList(pool)
    norm = ol.kernel(OpCost("norm", "norm", 1, 1), "layers.0", "forward", 3, ())
    assert ol.micro_attrs(3) is ol.ops[norm].attrs
    assert ol.micro_attrs(4) == {"micro_step": 4} and ol.micro_attrs(4) is ol.micro_attrs(4)
    plain = OpList()
    assert plain.micro_attrs(4) == {"micro_step": 4}
    assert plain.micro_attrs(4) is not plain.micro_attrs(4)


def test_tp_collectives_share_their_micro_step_dict():
    trace = _trace(ParallelPlan(tp=2, pp=2), 4)
    tp = [op for c in trace.classes for op in c.ops
          if op.kind == "collective" and op.stream == "tp"]
    assert tp and {op.attrs["micro_step"] for op in tp} == {0, 1, 2, 3}
    assert len({id(op.attrs) for op in tp}) == 4
