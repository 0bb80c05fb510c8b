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


class _KernelUnits(OpHooks):
    """Gathers, reshards and reduces the per-kernel units of layer ``li``."""

    def __init__(self, sched, li: int, micro: int):
        self.sched, self.li, self.micro = sched, li, micro
        layer = sched.layers[li]
        self.last_bwd = {c.weight: k for k, c in enumerate(layer.backward) if c.weight}
        self.seen = 0                                   # backward kernels issued so far

    def unit(self, cost):
        return self.sched.sub.get((self.li, cost.weight)) if cost.weight else None

    def before(self, cost, phase: str) -> tuple:
        u = self.unit(cost)
        if u is None:
            return ()
        if self.sched.needs_gather(u):
            self.sched.unshard(u, self.micro, "backward" if phase != "forward" else phase)
        return (self.sched.gathered.get(u.index),)

    def after(self, cost, phase: str, op_id: int) -> None:
        u = self.unit(cost)
        index = self.seen
        if phase == "backward":
            self.seen += 1
        if u is None:
            return
        if phase != "backward":                         # forward or recompute
            if cost.params:
                self.sched.reshard_after_forward(u, op_id)
            return
        if self.last_bwd.get(cost.weight) == index:     # the unit's gradient is complete
            if self.sched.plan.shard > 1 or self.sched.cfg.cpu_offload:
                self.sched.ol.alloc(op_id, self.sched.padded(u) * self.sched.wb)
            self.sched.post_backward(u, op_id, None, self.micro)


def forward_layers(sched, lids: list[int], micro: int) -> None:
    for li in lids:
        emit_forward(sched.ol, sched.layers[li], sched.cfg, micro,
                     hooks=_KernelUnits(sched, li, micro))


def backward_layers(sched, lids: list[int], micro: int) -> None:
    for li in reversed(lids):
        emit_backward(sched.ol, sched.layers[li], sched.cfg, micro,
                      hooks=_KernelUnits(sched, li, micro))
