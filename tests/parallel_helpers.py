"""Shared by the expert- and context-parallel tests: a layer's kernels emitted with a hook
object around them, as the parallel generator emits them."""

from __future__ import annotations

from simulator.strategies.base import OpList


def emit_with_hooks(layer, hooks, phases=("forward", "backward"), stream="ep") -> OpList:
    """The layer's kernels as compute ops, with what ``hooks`` issues between them (as the
    generator's emit_forward / emit_backward call them); ``hooks(issue, last_compute)``
    makes the hook object, ``issue`` adds a collective on ``stream`` (its communicator
    named the same unless ``comm`` is given)."""
    ol = OpList()

    def issue(kind, size, deps, name, phase, comm=None):
        return ol.add(stream=stream, kind="collective", collective=kind, comm=comm or stream,
                      size_bytes=size, deps=deps, name=name, phase=phase)

    hooks = hooks(issue, lambda: ol.last_on("compute"))
    for phase in phases:
        getattr(hooks, "start_layer", lambda _: None)(layer)
        for cost in (layer.forward if phase != "backward" else layer.backward):
            deps = hooks.before(cost, phase)
            op = ol.add(stream="compute", kind="compute", name=cost.name, phase=phase,
                        flops=cost.flops, deps=deps)
            hooks.after(cost, phase, op)
    return ol
