"""PyTorch DistributedDataParallel: full replicas, bucketed gradient all-reduce.

Mechanics (``torch/nn/parallel/distributed.py``, ``reducer.hpp``):

* gradient tensors are assigned to buckets in the order backward produces them (reverse
  layer order, and within a layer by the last backward kernel naming each), whole: a bucket closes
  once it reaches its cap, so a tensor is never split and a bucket may exceed the cap
  (``compute_bucket_assignment_by_size``). The first bucket's cap is ``first_bucket_mb``
  (kDefaultFirstBucketBytes = 1 MiB), the others' ``bucket_cap_mb`` (25 MiB). MB here is
  MiB, as in PyTorch. Checked against PyTorch 2.13's own buckets in the captured DDP runs
  (tests/test_captured_validation.py).
* a bucket's all-reduce (stream ``comm``, all ranks) is launched when its last gradient is
  ready: after the last backward kernel that names that weight, or, for a layer whose
  kernels name no weight, after the layer's backward; it overlaps the rest of the backward
  pass. Buckets are reduced in order.
* with ``grad_accum`` k, the first k-1 micro-steps run under ``no_sync()`` (no all-reduce).
* the optimizer step runs after the last bucket is reduced.

The tensors of a layer are the weights its kernels name (``OpCost.weight``/``params``: a
module's weight and bias are one tensor here) when they hold all its parameters, else the
layer is one tensor. Memory: the weights (``param_dtype``), the gradient buckets
(``reduce_dtype``) and the optimizer state are static (16 bytes/param for Adam);
activations live from each layer's forward to its backward.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from simulator.errors import ConfigError
from simulator.trace import Communicator, RankClass, Trace

from .base import (CLASS_ID, frozen_bytes, MASTER_BYTES, OPT_MOMENT_BYTES, CommonConfig, OpList,
                   World, build_meta, check_layers, emit_backward, emit_forward)
from .clipping import emit_clip
from .grads import GradReady, Tensor, last_backward, named_weights, tensors
from .optim import emit_optimizer

MIB = 1 << 20
COMM_WORLD = "world"


class DDPConfig(CommonConfig):
    """``strategy: {name: ddp, ...}``.

    ``param_dtype`` defaults to fp32: torch.autocast keeps fp32 weights and gradients, so
    the all-reduce moves fp32 unless ``reduce_dtype`` (a bf16/fp16 comm hook) says otherwise.
    Set ``param_dtype: bf16`` for a model cast to bf16.
    """

    name: str = "ddp"
    bucket_cap_mb: float = Field(25.0, gt=0)     # DistributedDataParallel(bucket_cap_mb=25)
    first_bucket_mb: float = Field(1.0, gt=0)    # reducer.hpp kDefaultFirstBucketBytes
    grad_clip_norm: float | None = Field(None, gt=0)   # clip_grad_norm_ (clipping.py)

    def _check(self) -> None:
        if self.name != "ddp":
            raise ConfigError(f"expected 'ddp', got {self.name!r}", field="strategy.name")

    def default_param_dtype(self) -> str:
        return "fp32"


@dataclass(frozen=True)
class Bucket:
    """One gradient bucket: ``layers`` in the order their gradients arrive (reverse layer
    order); ``ready_layer`` is the index of the layer whose backward completes it."""

    index: int
    size_bytes: int
    layers: tuple[str, ...]
    ready_layer: int
    ready_pos: int = 0               # which of that layer's tensors completes it
                                     # (:class:`~.grads.GradReady` position)
    fp8_params: int = 0              # its weight elements gathered in FP8 (assign_buckets)


def grad_tensors(layer) -> list[Tensor]:
    """``layer``'s gradient tensors (positions as :class:`~.grads.GradReady` reports them)
    in the order backward completes them: by the last backward kernel naming each weight,
    reverse forward order where none does; a layer whose kernels name no weight is one
    tensor, position 0."""
    names = [w.name for w in named_weights(layer) or ()]
    done = last_backward(layer)
    end = len(layer.backward)
    return sorted(reversed(tensors(layer)),
                  key=lambda t: done.get(names[t.position], end) if names else end)


def assign_buckets(layers, grad_bytes: int, cap_bytes: int, first_bytes: int,
                   fp8_weights=None) -> list[Bucket]:
    """Buckets as DDP's reducer fills them: whole tensors in backward order, a bucket closed
    once it holds at least its cap (``first_bytes`` for the first). ``fp8_weights(layer)``:
    the layer's weights gathered in FP8, by name (elements), counted in each bucket's
    ``fp8_params``."""
    buckets: list[Bucket] = []
    size, fp8, names, last = 0, 0, [], -1
    pos = 0
    for idx in reversed(range(len(layers))):
        layer = layers[idx]
        in_fp8 = fp8_weights(layer) if fp8_weights is not None else {}
        weight_names = [w.name for w in named_weights(layer) or ()] if in_fp8 else []
        for tensor in grad_tensors(layer):
            pos = tensor.position
            size, last = size + tensor.params * grad_bytes, idx
            if weight_names:
                fp8 += in_fp8.get(weight_names[pos], 0)
            if not names or names[-1] != layer.name:
                names.append(layer.name)
            if size >= (first_bytes if not buckets else cap_bytes):
                buckets.append(Bucket(len(buckets), size, tuple(names), idx, pos, fp8))
                size, fp8, names = 0, 0, []
    if size:
        buckets.append(Bucket(len(buckets), size, tuple(names), last, pos, fp8))
    return buckets


def static_bytes_per_param(cfg: DDPConfig) -> int:
    """Weights + gradients + optimizer state (+ fp32 master copy of 16-bit weights)."""
    master = MASTER_BYTES if cfg.weight_bytes() < 4 else 0
    return cfg.weight_bytes() + cfg.grad_reduce_bytes() + OPT_MOMENT_BYTES[cfg.optimizer] + master


def _launch(ol: OpList, layer, b: Bucket, dep: int, micro: int) -> None:
    ol.add(stream="comm", kind="collective", name=f"all_reduce.bucket{b.index}",
           phase="backward", collective="all_reduce", size_bytes=b.size_bytes,
           comm=COMM_WORLD, deps=(dep,), layer=layer.name,
           attrs={"bucket": b.index, "layers": list(b.layers), "micro_step": micro})


def _micro_step(ol: OpList, layers, cfg: DDPConfig, micro: int, ready: dict) -> None:
    """Forward and backward; each bucket is launched as its last gradient is complete."""
    for layer in layers:
        emit_forward(ol, layer, cfg, micro)
    for idx in reversed(range(len(layers))):
        layer, buckets = layers[idx], ready.get(idx, [])

        def on_grad(pos: int, op_id: int) -> None:
            for b in [b for b in buckets if b.ready_pos == pos]:
                _launch(ol, layer, b, op_id, micro)

        hooks = GradReady(layer, on_grad)
        hooks.finish(emit_backward(ol, layer, cfg, micro, hooks=hooks).last)


def ddp(layers, cfg: DDPConfig, world: World, *, model: str = "", tokens_per_sample: int = 0,
        model_flops_per_sample: float | None = None) -> Trace:
    """The DDP trace of one iteration (``grad_accum`` micro-steps + optimizer step)."""
    params = check_layers(layers)
    buckets = assign_buckets(layers, cfg.grad_reduce_bytes(), int(cfg.bucket_cap_mb * MIB),
                             int(cfg.first_bucket_mb * MIB))
    syncs = world.world_size > 1
    ready: dict[int, list[Bucket]] = {}
    for b in buckets if syncs else ():
        ready.setdefault(b.ready_layer, []).append(b)
    ol = OpList()
    for micro in range(cfg.grad_accum):
        _micro_step(ol, layers, cfg, micro, ready if micro == cfg.grad_accum - 1 else {})
    deps = (ol.last_on("comm"),)
    if cfg.grad_clip_norm is not None:
        deps = (emit_clip(ol, params, deps),)
    emit_optimizer(ol, cfg, params, deps=deps)
    static = params * static_bytes_per_param(cfg) + frozen_bytes(layers)
    meta = build_meta(layers, cfg, world, strategy="ddp", model=model,
                      tokens_per_sample=tokens_per_sample,
                      model_flops_per_sample=model_flops_per_sample,
                      buckets=[{"index": b.index, "size_bytes": b.size_bytes,
                                "layers": list(b.layers)} for b in buckets])
    comms = {COMM_WORLD: Communicator(COMM_WORLD, (world.ranks,))} if syncs else {}
    cls = RankClass(CLASS_ID, world.ranks, ol.ops, static_memory_bytes=static)
    trace = Trace(world.world_size, [cls], comms, meta)
    trace.validate()
    return trace
