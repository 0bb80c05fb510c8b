"""Gradient tensors of a layer and when backward completes each (DDP buckets, TensorFlow
and Horovod packs, FSDP per-kernel units)."""

from __future__ import annotations

from typing import NamedTuple

from .base import OpHooks


class Weight(NamedTuple):
    """A weight a forward kernel names, and its parameters."""

    name: str
    params: int


class Tensor(NamedTuple):
    """A gradient tensor of a layer: its position (as :class:`GradReady` reports it) and
    its parameters."""

    position: int
    params: int


def named_weights(layer) -> list[Weight] | None:
    """The weight of each forward kernel of ``layer`` that names one, in forward order,
    when together they hold all of the layer's parameters; else None."""
    named = [Weight(name=op.weight, params=int(op.params)) for op in layer.forward
             if getattr(op, "params", 0)]
    return named if sum(w.params for w in named) == int(layer.params) else None


def last_backward(layer) -> dict[str, int]:
    """Index in ``layer.backward`` of the last kernel naming each weight: where backward
    completes that weight's gradient."""
    return {c.weight: k for k, c in enumerate(layer.backward) if getattr(c, "weight", "")}


def tensors(layer) -> list[Tensor]:
    """``layer``'s gradient tensors in forward order: the weights its kernels name
    (positions as :class:`GradReady` reports them), else the whole layer as position 0
    (none for a layer without parameters)."""
    weights = named_weights(layer)
    if weights is None:
        weights = [Weight(name="", params=int(layer.params))]
    return [Tensor(position=k, params=int(w.params)) for k, w in enumerate(weights)
            if int(w.params) > 0]


class GradReady(OpHooks):
    """Reports, as a layer's backward is emitted, when each of its gradient tensors is
    complete: ``on_grad(position, op_id)``, ``position`` indexing :func:`named_weights`,
    right after the last backward kernel naming that weight; :meth:`finish` reports the
    others (a layer whose kernels name no weight is one tensor, position 0) after the
    layer's last op."""

    def __init__(self, layer, on_grad):
        self.on_grad, self.seen = on_grad, 0
        weights = named_weights(layer)
        self.pos = {w.name: k for k, w in enumerate(weights or ())}
        self.last_bwd = {w: k for w, k in last_backward(layer).items() if w in self.pos}
        self.rest = [k for w, k in self.pos.items() if w not in self.last_bwd] \
            if weights else [0]

    def after(self, cost, phase: str, op_id: int) -> None:
        if phase != "backward":
            return
        index, self.seen = self.seen, self.seen + 1
        weight = getattr(cost, "weight", "")
        if self.last_bwd.get(weight, -1) == index:
            self.on_grad(self.pos[weight], op_id)

    def finish(self, last: int) -> None:
        for position in self.rest:
            self.on_grad(position, last)
