"""Horovod with TensorFlow (``hvd.DistributedGradientTape`` / ``DistributedOptimizer``): one
process per GPU, gradients all-reduced with NCCL as backward produces them, fused into
buffers (FACTS.md section 4).

Tensor fusion: Horovod's background thread wakes every ``cycle_time_ms``, takes the
gradients every rank has submitted and packs them, in the order they became ready, into
fusion buffers of at most ``fusion_threshold_mb`` MiB (a larger tensor goes alone; 0
disables fusion); each buffer is one NCCL all-reduce, one after the other. Defaults
(``simulator/data/tensorflow.yaml``): 64 MB as the docs say, with the 5 ms cycle of the same
versions; current Horovod uses 128 MB and 1 ms.

Approximation: which tensors share a cycle depends on timing the generator does not know,
so buffers are filled in backward order up to the threshold, and each becomes eligible half
a cycle on average after its last gradient is ready (a ``delay`` of ``cycle_time / 2``),
then runs on stream ``comm`` after the buffers before it. The delays run on
:data:`CYCLE_STREAMS` streams of their own, in turn, so a buffer waiting for the background
thread does not add its wait to a queue of all-reduces already behind (the loop takes the
next cycle at once when the last one overran). ``reduce_dtype: fp16`` is
``hvd.Compression.fp16``. With gradient accumulation only the last micro-step reduces.
"""

from __future__ import annotations

from pydantic import Field

from simulator.trace import Communicator

from .base import OpList, World, check_layers
from .tf_common import (Pack, TFConfig, constant, fuse, grad_variables, pack_meta, sync_trace)

MIB = 1 << 20
COMM = "world"
CYCLE_STREAMS = 4       # buffers waiting for the background thread at once, without queueing


class HorovodConfig(TFConfig):
    """``strategy: {name: horovod, fusion_threshold_mb: 64, cycle_time_ms: 5}``."""

    NAME = "horovod"
    name: str = "horovod"
    fusion_threshold_mb: float = Field(
        default_factory=lambda: float(constant("horovod", "fusion_threshold_mb")), ge=0)
    cycle_time_ms: float = Field(
        default_factory=lambda: float(constant("horovod", "cycle_time_ms")), ge=0)


def horovod_packs(layers, cfg: HorovodConfig) -> list[Pack]:
    grads = grad_variables(layers, cfg.grad_reduce_bytes())
    return fuse(grads.order[::-1], grads.bytes, int(cfg.fusion_threshold_mb * MIB)) \
        if grads.order else []


def horovod(layers, cfg: HorovodConfig, world: World, *, model: str = "",
            tokens_per_sample: int = 0, model_flops_per_sample: float | None = None):
    """The Horovod trace of one step."""
    params = check_layers(layers)
    packs = horovod_packs(layers, cfg) if world.world_size > 1 else []
    wait_s = cfg.cycle_time_ms * 1e-3 / 2

    def reduce_pack(ol: OpList, p: Pack, deps) -> int:
        cycle = ol.add(stream=f"cycle.{p.index % CYCLE_STREAMS}", kind="delay",
                       name=f"cycle_wait.buffer{p.index}",
                       phase="comm", duration_s=wait_s, deps=deps, attrs={"buffer": p.index})
        return ol.add(stream="comm", kind="collective", collective="all_reduce", comm=COMM,
                      size_bytes=p.size_bytes, deps=(cycle,), name=f"all_reduce.buffer{p.index}",
                      phase="comm", attrs={"buffer": p.index})

    comms = {COMM: Communicator(COMM, (world.ranks,))} if packs else {}
    return sync_trace(layers, cfg, world, params, packs, reduce_pack, True, comms,
                      strategy="horovod", model=model, tokens_per_sample=tokens_per_sample,
                      model_flops_per_sample=model_flops_per_sample,
                      fusion_threshold_bytes=int(cfg.fusion_threshold_mb * MIB),
                      cycle_time_s=cfg.cycle_time_ms * 1e-3, buffers=pack_meta(packs, layers),
                      on_worker_failure="restart")
