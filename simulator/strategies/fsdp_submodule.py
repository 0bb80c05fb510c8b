"""FSDP units smaller than a block (``wrap: submodule``).

Every LayerNorm and Linear of a transformer block is its own FSDP unit, as with
``ModuleWrapPolicy({nn.Linear, nn.LayerNorm})`` or the nested ``wrap()`` calls of the PyTorch
distributed team's GPT benchmark (github.com/mrshenli/ptd_benchmark, ``models.py``: the
block's ``ln1``, ``ln2``, attention and MLP Linears wrapped one by one, the block itself
wrapped in an activation checkpoint). A unit is gathered right before the kernel that uses
its weight and, with FULL_SHARD, resharded right after it, so at most one small unit is
unsharded at a time. Because the units sit inside the checkpointed block, the recompute runs
their forward hooks again: FSDP1 gathers each unit for the recompute, reshards it, and
gathers it a third time for its backward (a block-level unit is gathered once for both).
After a unit's last backward kernel its gradient exists and is reduce-scattered. Prefetch
options are not modelled for these units (the config refuses them).
"""

from __future__ import annotations

from .base import OpHooks, emit_backward, emit_forward
from .grads import GradReady, named_weights


class _KernelUnits(OpHooks):
    """Gathers, reshards and reduces the per-kernel units of layer ``li``; a unit's gradient
    is complete when :class:`~.grads.GradReady` says its weight's is."""

    def __init__(self, sched, li: int, micro: int):
        self.sched, self.li, self.micro = sched, li, micro
        layer = sched.layers[li]
        self.weights = [w.name for w in named_weights(layer) or ()]
        self.grads = GradReady(layer, self.reduce)

    def unit(self, weight: str):
        return self.sched.sub.get((self.li, weight)) if weight else None

    def before(self, cost, phase: str) -> tuple:
        u = self.unit(cost.weight)
        if u is None:
            return ()
        if self.sched.needs_gather(u):
            self.sched.unshard(u, self.micro, "backward" if phase != "forward" else phase)
        return (self.sched.gathered.get(u.index),)

    def after(self, cost, phase: str, op_id: int) -> None:
        if phase == "backward":
            self.grads.after(cost, phase, op_id)
        elif cost.params and (u := self.unit(cost.weight)) is not None:   # forward, recompute
            self.sched.reshard_after_forward(u, op_id)

    def reduce(self, pos: int, op_id: int) -> None:
        """The gradient of weight ``pos`` is complete after ``op_id``: reduce its unit."""
        u = self.unit(self.weights[pos]) if pos < len(self.weights) else None
        if u is None:
            return
        if self.sched.plan.shard > 1 or self.sched.cfg.cpu_offload:
            self.sched.ol.alloc(op_id, self.sched.padded(u) * self.sched.wb)
        self.sched.post_backward(u, op_id, None, self.micro)


def forward_layers(sched, lids: list[int], micro: int) -> None:
    for li in lids:
        emit_forward(sched.ol, sched.layers[li], sched.cfg, micro,
                     hooks=_KernelUnits(sched, li, micro))


def backward_layers(sched, lids: list[int], micro: int) -> None:
    for li in reversed(lids):
        hooks = _KernelUnits(sched, li, micro)
        hooks.grads.finish(emit_backward(sched.ol, sched.layers[li], sched.cfg, micro,
                                         hooks=hooks).last)
