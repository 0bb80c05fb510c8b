"""TensorFlow ``tf.distribute.MirroredStrategy``: one replica per GPU of one machine, mirrored
variables kept in sync by identical updates (FACTS.md section 4).

Cross-device ops (``cross_device_ops.py``), chosen by ``cross_device_ops``:

* ``NcclAllReduce(num_packs)`` (the default on GPUs): every gradient is concatenated and
  split into ``num_packs`` pieces (``_ConcatAndSplitPacker``), one NCCL all-reduce per piece;
  ``num_packs: 0`` all-reduces each variable on its own.
* ``HierarchicalCopyAllReduce(num_packs)``: per pack ``i`` the GPUs form two halves; each
  half copies its tensors to its main device (``i mod n`` and the same position in the
  other half), which sums them; the second main copies its sum to the first, which adds it
  and copies the total back; each main then copies it to its half
  (``aggregate_gradients_using_hierarchical_copy``, built for DGX-1).
* ``ReductionToOneDevice``: per variable, every GPU copies its gradient to GPU 0 (the first
  destination), GPU 0 sums them (``add_n``) and copies the result to every GPU.

Copies are ``star`` reduce/broadcast collectives (:mod:`simulator.collectives.copies`);
sums are ``add_n`` compute ops. All of a pack's ops run on stream ``comm``; the update is
the optimizer kernel on every GPU (mirrored variables). With one GPU nothing is reduced.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from simulator.errors import ConfigError
from simulator.trace import Communicator

from .base import OpList, World, check_layers
from .tf_common import (Pack, TFConfig, add_n, concat_and_split, constant, grad_variables,
                        pack_meta, per_variable, require_single_host, sync_trace)

CROSS_DEVICE_OPS = ("NcclAllReduce", "HierarchicalCopyAllReduce", "ReductionToOneDevice")
STREAM = "comm"
MAX_PACKS = 65_536          # packs of one all-reduce: past it, packs of a few elements each


class MirroredConfig(TFConfig):
    """``strategy: {name: tf_mirrored, cross_device_ops: ..., num_packs: 1, overlap: false}``."""

    NAME = "tf_mirrored"
    name: str = "tf_mirrored"
    cross_device_ops: Literal[CROSS_DEVICE_OPS] = Field(
        default_factory=lambda: constant("mirrored", "cross_device_ops"))
    num_packs: int = Field(default_factory=lambda: constant("mirrored", "num_packs"), ge=0,
                           le=MAX_PACKS)
    overlap: bool = False

    def _check_tf(self) -> None:
        if self.cross_device_ops == "ReductionToOneDevice" and "num_packs" in \
                self.model_fields_set:
            raise ConfigError("ReductionToOneDevice reduces each variable on its own; "
                              "num_packs belongs to NcclAllReduce and "
                              "HierarchicalCopyAllReduce", field="strategy.num_packs")


class _Emitter:
    """Writes the reduction of one pack for the chosen cross-device op."""

    def __init__(self, cfg: MirroredConfig, n: int):
        self.cfg, self.n, self.eb = cfg, n, cfg.grad_reduce_bytes()
        self.half = n // 2
        self.comms: dict[str, Communicator] = {}

    def _coll(self, ol: OpList, kind: str, comm: str, p: Pack, deps, **attrs) -> int:
        if comm == "world":
            self.comms.setdefault(comm, Communicator(comm, (tuple(range(self.n)),)))
        return ol.add(stream=STREAM, kind="collective", collective=kind, comm=comm,
                      size_bytes=p.size_bytes, deps=deps, name=f"{kind}.pack{p.index}",
                      phase="comm", attrs={"pack": p.index, **attrs})

    def nccl(self, ol: OpList, p: Pack, deps) -> int:
        return self._coll(ol, "all_reduce", "world", p, deps)

    def one_device(self, ol: OpList, p: Pack, deps) -> int:
        last = self._coll(ol, "reduce", "world", p, deps, algorithm="star", root=0)
        last = add_n(ol, STREAM, self.n, p.size_bytes, self.eb, (last,), f"pack{p.index}")
        return self._coll(ol, "broadcast", "world", p, (last,), algorithm="star", root=0)

    def hierarchical(self, ol: OpList, p: Pack, deps) -> int:
        g, j = self.half, p.index % self.half
        first_main_low = p.index % self.n < g       # group 0 is the lower half
        pair = f"hier.cross{j}"
        self.comms.setdefault(pair, Communicator(pair, ((j, j + g),)))
        last = deps[0] if deps else None
        if g > 1:
            self.comms.setdefault("hier.halves", Communicator(
                "hier.halves", (tuple(range(g)), tuple(range(g, 2 * g)))))
            last = self._coll(ol, "reduce", "hier.halves", p, (last,), algorithm="star", root=j)
            last = add_n(ol, STREAM, g, p.size_bytes, self.eb, (last,), f"pack{p.index}.half")
        cross = dict(algorithm="star", root=0 if first_main_low else 1)
        last = self._coll(ol, "reduce", pair, p, (last,), **cross)
        last = add_n(ol, STREAM, 2, p.size_bytes, self.eb, (last,), f"pack{p.index}.cross")
        last = self._coll(ol, "broadcast", pair, p, (last,), **cross)
        if g > 1:
            last = self._coll(ol, "broadcast", "hier.halves", p, (last,), algorithm="star",
                              root=j)
        return last


def mirrored_packs(layers, cfg: MirroredConfig, n: int) -> list[Pack]:
    """The packs the cross-device op reduces (none with one replica)."""
    grads = grad_variables(layers, cfg.grad_reduce_bytes())
    if n == 1 or not grads.order:
        return []
    if cfg.cross_device_ops == "ReductionToOneDevice" or cfg.num_packs == 0:
        return per_variable(grads.order, grads.bytes)
    return concat_and_split(grads.order, grads.params, cfg.grad_reduce_bytes(), cfg.num_packs)


def tf_mirrored(layers, cfg: MirroredConfig, world: World, *, model: str = "",
                tokens_per_sample: int = 0, model_flops_per_sample: float | None = None):
    """The MirroredStrategy trace of one step.

    :raises ConfigError: (``strategy.name``) when the world spans several machines,
        (``strategy.cross_device_ops``) for HierarchicalCopyAllReduce on an odd GPU count.
    """
    params = check_layers(layers)
    require_single_host(world, "MirroredStrategy")
    n = world.world_size
    if cfg.cross_device_ops == "HierarchicalCopyAllReduce" and n > 1 and n % 2:
        raise ConfigError(f"HierarchicalCopyAllReduce splits the GPUs into two equal halves "
                          f"(DGX-1); {n} GPUs cannot be split", field="strategy.cross_device_ops")
    packs = mirrored_packs(layers, cfg, n)
    em = _Emitter(cfg, n)
    emit = {"NcclAllReduce": em.nccl, "HierarchicalCopyAllReduce": em.hierarchical,
            "ReductionToOneDevice": em.one_device}[cfg.cross_device_ops]
    return sync_trace(layers, cfg, world, params, packs, emit, cfg.overlap, em.comms,
                      strategy="tf_mirrored", model=model,
                      tokens_per_sample=tokens_per_sample,
                      model_flops_per_sample=model_flops_per_sample,
                      cross_device_ops=cfg.cross_device_ops, packs=pack_meta(packs, layers),
                      overlap=cfg.overlap, on_worker_failure="restart")
