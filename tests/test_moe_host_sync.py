"""The host sync of Megatron-Core's dropless MoE layer (simulator/strategies/parallel/moe.py,
``EPHooks.host_syncs`` and ``host_sync_waits``). Megatron-Core at Megatron-Bridge 26.04's pin
d7288711 (megatron/core/transformer/moe/token_dispatcher.py, ``MoEAlltoAllTokenDispatcher``):
``preprocess`` all-gathers the tokens per expert over the EP group, ``dispatch_preprocess``
copies them to the host on a side stream (``cuda_dtoh_point`` ``before_permutation_1``) and
launches the permute, and ``token_dispatch`` waits for that copy (``d2h_event.synchronize()``
at ``cuda_sync_point`` ``before_ep_alltoall``, dropless with EP above 1) before launching the
all-to-all, whose split sizes it needs. So the layer's CPU dispatch splits in two: the
kernels up to the dispatch (the permute included), then, once the count all-gather is done,
the rest; ``TEGroupedMLP``'s later ``tokens_per_expert.tolist()`` reads the host copy and
waits for nothing. Backward has no sync; a layer replayed from a CUDA graph dispatches
nothing, so it has none either (full-iteration graphs need a sync-free layer)."""

from __future__ import annotations

import pytest

from simulator.pipeline import build_setup
from simulator.scenario import scenario_from_dict
from simulator.strategies.host import dispatch_table


def _ops(model: str = "qwen3-30b-a3b", **strategy):
    """The ops of the first rank class of ``model`` on 8 B200s with EP8 (one sequence of
    1,024 tokens) under ``strategy``'s extra Megatron fields."""
    scn = scenario_from_dict({
        "name": "sync", "model": model,
        "training": {"micro_batch": 1, "seq_len": 1024, "grad_accum": 1,
                     "precision": "bf16", "flash_attention": True},
        "cluster": {"topology": "dgx-b200"},
        "strategy": {"name": "megatron", "expert_model_parallel_size": 8,
                     "use_distributed_optimizer": True, **strategy}}, "sync")
    return build_setup(scn, "sync", extrapolate_steps=False).trace.classes[0].ops


def _layer(ops, layer: str, phase: str):
    kernels = [o for o in ops if o.layer == layer and o.phase == phase and o.kind == "compute"]
    host = [o for o in ops if o.layer == layer and o.stream == "host"
            and o.attrs["dispatches"] == phase]
    return kernels, host


def test_the_cpu_waits_for_the_token_counts_before_launching_the_dispatch():
    ops = _ops()
    kernels, host = _layer(ops, "block.1", "forward")
    names = [k.name for k in kernels]
    sync = names.index("moe_sort_chunks")        # the first kernel the dispatch feeds
    per_kernel = dispatch_table()["eager"]["forward"]
    assert [h.duration_s for h in host] == pytest.approx(
        [sync * per_kernel, (len(kernels) - sync) * per_kernel])   # kernels x 96.4 us
    first, second = host
    assert first.deps == ()                       # the CPU runs ahead up to the dispatch
    # ... then waits for the all-gather of the tokens per expert (issued before the
    # permute, after the router's top-k), not for the dispatch all-to-alls after it
    by_id = {o.id: o for o in ops}
    (counts,) = second.deps
    assert by_id[counts].name.startswith("moe_token_counts.")
    assert by_id[counts].deps == (kernels[names.index("moe_topk")].id,)
    dispatch = {by_id[d].name.split(".")[0] for d in kernels[sync].deps}
    assert dispatch == {"moe_dispatch", "moe_dispatch_probs"}   # the experts' inputs
    assert counts not in kernels[sync].deps
    assert kernels[sync - 1].deps[-1] == first.id and kernels[-1].deps[-1] == second.id


def test_backward_has_no_sync_and_a_graphed_layer_no_dispatch():
    ops = _ops()
    kernels, host = _layer(ops, "block.1", "backward")
    assert len(host) == 1 and host[0].deps == ()
    assert host[0].duration_s == pytest.approx(
        len(kernels) * dispatch_table()["eager"]["backward"])
    graphed = _ops(cuda_graph_impl="local")
    assert not _layer(graphed, "block.1", "forward")[1]



class _Part:
    """A hook part that syncs before kernels named ``name`` and says the CPU waits for
    ``waits`` there."""

    def __init__(self, name: str, waits: tuple):
        self.name, self.waits = name, waits

    def before(self, cost, phase):
        return ()

    def after(self, cost, phase, op_id):
        pass

    def host_syncs(self, cost, phase):
        return cost.name == self.name

    def host_sync_waits(self, cost, phase, deps):
        return self.waits


def test_a_sync_waits_for_the_kernels_deps_unless_its_hook_names_others():
    from simulator.models.ops import OpCost
    from simulator.strategies.base import OpHooks
    from simulator.strategies.parallel.generate import _Hooks
    kernel = OpCost("moe_sort_chunks", "elementwise", 0.0, 1.0)
    assert OpHooks().host_sync_waits(kernel, "forward", (7, 8)) == (7, 8)
    hooks = _Hooks([_Part("other", (1,)), _Part("moe_sort_chunks", (3,))])
    # the part that syncs before this kernel answers; a kernel no part syncs before keeps
    # its own deps
    assert hooks.host_sync_waits(kernel, "forward", (7, 8)) == (3,)
    assert hooks.host_sync_waits(OpCost("x", "elementwise", 0.0, 1.0), "forward", (7,)) == (7,)
