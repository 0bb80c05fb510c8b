"""TensorFlow ``tf.distribute.MultiWorkerMirroredStrategy``: a worker per machine, a replica
per GPU, variables mirrored on every GPU of every worker, gradients summed by
``CollectiveAllReduce`` over all of them (FACTS.md section 4).

``CommunicationOptions`` (``collective_util.py``):

* ``implementation``: ``NCCL`` (all-reduce on GPUs only), ``RING`` (TensorFlow's own ring
  all-reduce) or ``AUTO``, which the runtime resolves to ``RING`` unless NCCL is asked for
  (``collective_param_resolver_local.cc``, see ``simulator/data/tensorflow.yaml``);
* ``bytes_per_pack``: the gradients, reversed so that they follow the order backward
  produces them, are grouped by ``group_by_size`` (0: one pack); each pack is concatenated
  and all-reduced at once. NCCL packs are launched in order (each after the previous one,
  one stream); RING packs have no ordering between them and run concurrently (a stream
  each).

The NCCL implementation is one NCCL all-reduce over every GPU (the tuner picks ring or
tree). RING is costed as a flat ring with NCCL's Simple protocol on the same links, which is
optimistic: TensorFlow's ring moves data between workers over gRPC from host memory.
Worker failures: collectives abort (UnavailableError) and the job must restart.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from simulator.errors import ConfigError
from simulator.trace import Communicator

from .base import OpList, World, check_layers
from .tf_common import (Pack, TFConfig, constant, grad_variables, group_by_size, pack_meta,
                        sync_trace)

IMPLEMENTATIONS = ("AUTO", "RING", "NCCL")
COMM = "world"


class MultiWorkerConfig(TFConfig):
    """``strategy: {name: tf_multiworker, implementation: AUTO|RING|NCCL, bytes_per_pack: 0,
    overlap: false, worker_device: GPU|CPU}``."""

    NAME = "tf_multiworker"
    name: str = "tf_multiworker"
    implementation: Literal[IMPLEMENTATIONS] = Field(
        default_factory=lambda: constant("multiworker", "implementation"))
    bytes_per_pack: int = Field(default_factory=lambda: constant("multiworker",
                                                                 "bytes_per_pack"), ge=0)
    overlap: bool = False
    worker_device: Literal["GPU", "CPU"] = "GPU"

    def _check_tf(self) -> None:
        if self.worker_device == "CPU":
            if self.implementation == "NCCL":
                raise ConfigError("the NCCL implementation all-reduces on GPUs only; CPU "
                                  "workers need RING or AUTO", field="strategy.implementation")
            raise ConfigError("CPU workers are valid in TensorFlow but not simulated: the "
                              "compute model covers GPUs only", field="strategy.worker_device")

    def resolved_implementation(self) -> str:
        return constant("multiworker", "auto_resolves_to") if self.implementation == "AUTO" \
            else self.implementation


def multiworker_packs(layers, cfg: MultiWorkerConfig) -> list[Pack]:
    grads = grad_variables(layers, cfg.grad_reduce_bytes())
    return group_by_size(grads.order[::-1], grads.bytes, cfg.bytes_per_pack) \
        if grads.order else []


def tf_multiworker(layers, cfg: MultiWorkerConfig, world: World, *, model: str = "",
                   tokens_per_sample: int = 0, model_flops_per_sample: float | None = None):
    """The MultiWorkerMirroredStrategy trace of one step (every GPU of every worker)."""
    params = check_layers(layers)
    impl = cfg.resolved_implementation()
    packs = multiworker_packs(layers, cfg) if world.world_size > 1 else []

    def reduce_pack(ol: OpList, p: Pack, deps) -> int:
        ring = impl == "RING"
        return ol.add(stream=f"ring.{p.index}" if ring else "comm", kind="collective",
                      collective="all_reduce", comm=COMM, size_bytes=p.size_bytes, deps=deps,
                      name=f"all_reduce.pack{p.index}", phase="comm",
                      attrs={"pack": p.index, "implementation": impl,
                             **({"algorithm": "ring", "protocol": "Simple"} if ring else {})})

    comms = {COMM: Communicator(COMM, (world.ranks,))} if packs else {}
    return sync_trace(layers, cfg, world, params, packs, reduce_pack, cfg.overlap, comms,
                      strategy="tf_multiworker", model=model,
                      tokens_per_sample=tokens_per_sample,
                      model_flops_per_sample=model_flops_per_sample,
                      implementation=cfg.implementation, resolved_implementation=impl,
                      bytes_per_pack=cfg.bytes_per_pack, packs=pack_meta(packs, layers),
                      overlap=cfg.overlap, workers=-(-world.world_size // world.gpus_per_node),
                      on_worker_failure="restart")
