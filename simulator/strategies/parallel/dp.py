"""Data parallelism over the ranks of one pipeline stage: DDP, ZeRO-1/2, FSDP (ZeRO-3).

Gradients are reduced over the stage's ``dp_replicate x dp_shard x cp`` ranks (context-
parallel ranks hold the same weights, so Megatron folds them into the gradient group);
FSDP shards over ``dp_shard x cp`` and all-reduces the shard over ``dp_replicate`` (HSDP,
FSDP2's 2-D mesh with TP inside). ``P`` below is a rank's parameters (its stage, its TP
shard), ``d`` the group size, bytes per parameter ``w`` (weights, 2 for bf16) and ``g``
(gradients, ``reduce_dtype``; fp32 by default as Megatron accumulates them).

* ``ddp`` (Megatron DDP): buckets of ``bucket_params`` filled in backward order
  (:func:`simulator.strategies.ddp.assign_buckets`), each all-reduced once its last layer's
  backward of the chunk's last micro-batch is done (``overlap_grad_reduce``), else all at
  the end of the pipeline flush. Static ``P (w + g + 12)``: weights, the gradient buffer,
  fp32 master weights and Adam moments (Megatron's 18 bytes/parameter in bf16).
* ``zero1`` (Megatron distributed optimizer): the same buckets reduce-scattered, the
  optimizer on ``P / d``, then the updated weights all-gathered per bucket: after the
  optimizer, or, with ``overlap_param_gather``, before the bucket's first forward (the
  previous step's gather overlapped with this step's forward). Static ``P (w + g) + 12 P / d``.
* ``zero2``: reduce-scatter of the buckets after every micro-batch; static
  ``P w + (g + 12) P / d``.
* ``fsdp``: a unit per layer; all-gather (``w``) before its forward and again before its
  backward, free after each, reduce-scatter (``g``) after its backward; the embedding and
  head stay gathered (root). Without ``reshard_after_forward`` (FSDP2's
  ``reshard_after_forward=False``) a unit gathered for its forward is kept until its
  backward is done, one all-gather per micro-batch. With pipeline parallelism, as
  torch.distributed.pipelining runs FSDP2, a unit is gathered at its first forward and kept
  until its last backward, whose reduce-scatter is the only one. Static ``16 P / d`` (fp32
  shard, gradient, Adam).

The ``fsdp`` mode is FSDP2 inside a parallel plan (torchtitan's FSDP x TP/PP/CP, Megatron's
``use_torch_fsdp2``); a job that is data parallelism only runs :mod:`simulator.strategies.
fsdp` instead. Both take a unit's sizes and the static state from
:mod:`simulator.strategies.fsdp_units` (the padded flat parameter gathered and
reduce-scattered, the shard all-reduced over ``dp_replicate``, 16 bytes per sharded
parameter) and FSDP2's copy kernels (:mod:`simulator.strategies.fsdp_copies`: a copy-out
on the compute stream after each part's all-gather, which the layer's first kernel waits
for, and a ``chunk_cat`` on stream ``dp`` before each part's reduce-scatter; every ``fsdp``
plan gets them, as the data-parallel generator gives them to every FSDP2 mesh). What stays
apart is the schedule, as each models a different job: here a unit
per layer and per stage communicators (``shard.s0``), the all-gather issued one layer
ahead on stream ``dp_gather`` with no rate limiter, the pipeline's keep-until-last-backward,
and the padding of the stage's parameters as one flat buffer; there units by wrap policy,
FSDP1/FSDP2 shardings, prefetch options, NCCL stream order per process group and CPU
offload.

Expert parameters. When the routed experts of an MoE model have their own expert-data-
parallel groups (:attr:`~.plan.ParallelPlan.experts_apart`: expert parallelism, or experts
split otherwise than by ``tp``), their gradients reduce over those ``edp`` ranks and their
optimizer state shards over them, as Megatron keeps expert parameters in buffers of their
own reduced over its expert-data-parallel group: each rank's parameters are two
:class:`Part` s, the dense ones (communicators ``dp``, ``shard``, ``replicate``) and the
experts (``edp``), each with its own buckets (``expert_grads.bucket<i>``) or, under FSDP,
its own all-gather and reduce-scatter per layer. A part of one rank reduces nothing.
FSDP's experts shard over ``edp`` without a replicate dimension (the plan refuses HSDP
with experts apart).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.models.fp8 import fp8_gathered_params, fp8_gathered_weights
from simulator.models.moe import dense_part, expert_part

from ..base import ceil_div
from ..ddp import assign_buckets
from ..fsdp_copies import copy_in, copy_out
from ..fsdp_units import fp8_saving, frozen_shard, padded_numel, shard_numel, state_bytes

GRAD_STREAM, GATHER_STREAM = "dp", "dp_gather"


@dataclass(frozen=True)
class Part:
    """Parameters reduced over one kind of group (see the module doc): ``layers`` each
    chunk's layers as this part sees them (their ``params`` the part's), ``comm`` the
    gradient communicator of the bucket modes and ``size`` its ranks; under FSDP
    ``shard_comm`` / ``shard`` the sharding group and ``replicate`` the HSDP replicas;
    ``prefix`` begins its collectives' names."""

    prefix: str
    comm: str
    size: int
    shard_comm: str
    shard: int
    replicate: int
    layers: dict

    @property
    def params(self) -> int:
        return sum(int(x.params) for ls in self.layers.values() for x in ls)

    @property
    def frozen_bytes(self) -> int:
        """Bytes of the frozen weights of the part (a fine-tuning's base)."""
        return sum(_frozen(x) for ls in self.layers.values() for x in ls)

    @property
    def fp8_params(self) -> int:
        """Of :attr:`params`, the weight elements held and gathered in FP8 (each layer as
        the part sees it, :func:`~simulator.models.fp8.fp8_gathered_params`)."""
        return sum(fp8_gathered_params(x) for ls in self.layers.values() for x in ls)


def _frozen(layer) -> int:
    return int(getattr(layer, "frozen_bytes", 0))


def _weighs(layer) -> bool:
    """Whether a layer holds weights, trainable or frozen."""
    return bool(layer.params) or _frozen(layer) > 0


class DataParallel:
    """The DP part of one stage class. ``b`` is the stage builder (:mod:`.generate`):
    ``b.collective(...)``, ``b.ol``, ``b.plan``, ``b.cfg``, ``b.comm(name)``."""

    def __init__(self, b, chunk_layers: dict[int, tuple], grad_size: int, shard_size: int,
                 replicate_size: int):
        self.b, self.mode, plan = b, b.plan.dp_mode, b.plan
        self.wb, self.gb = b.cfg.weight_bytes(), b.cfg.grad_reduce_bytes()
        self.chunk_layers = chunk_layers
        experts = {c: tuple(expert_part(x) for x in ls) for c, ls in chunk_layers.items()}
        apart = plan.experts_apart and any(x.params for ls in experts.values() for x in ls)
        self.parts = [Part("", "dp", grad_size, "shard", shard_size, replicate_size,
                           {c: tuple(dense_part(x) for x in ls) for c, ls in
                            chunk_layers.items()} if apart else chunk_layers)]
        if apart:
            self.parts.append(Part("expert_", "edp", plan.edp, "edp", plan.edp, 1, experts))
        self.params = sum(p.params for p in self.parts)
        cap = b.plan.bucket_params * self.gb
        self.buckets = {p.prefix: {c: assign_buckets(list(ls), self.gb, cap, cap,
                                                   fp8_gathered_weights)
                                   for c, ls in p.layers.items()}
                        for p in self.parts} if self.mode != "fsdp" else {}
        self.gathered: dict[tuple[int, int], tuple] = {}    # (chunk, layer) -> AG ops
        # zero1 overlapped gathers: (chunk, layer) -> part -> the last bucket gather of it
        self.param_ready: dict[tuple[int, int], dict[str, int]] = {}
        self.grads_held: set[tuple[int, int]] = set()       # FSDP unsharded gradients

    # ------------------------------------------------------------------ sizes
    def _reducing(self) -> list[Part]:
        """The parts reduced over more than one rank (bucket modes)."""
        return [p for p in self.parts if p.size > 1]

    def _sharding(self) -> list[Part]:
        """The parts FSDP shards over more than one rank."""
        return [p for p in self.parts if p.shard > 1]

    def _sharded(self, part: Part) -> int:
        """A rank's share of ``part``'s parameters: over its FSDP shard, else its group."""
        return ceil_div(part.params, part.shard if self.mode == "fsdp" else part.size)

    def optimizer_params(self) -> int:
        if self.mode == "ddp":
            return self.params
        return sum(self._sharded(p) for p in self.parts)

    def static_bytes(self) -> int:
        """Trainable state by mode (the module doc), plus the frozen weights: whole on each
        rank, or under FSDP their shard."""
        return sum(self._static(p) + (frozen_shard(p.frozen_bytes, p.shard)
                                      if self.mode == "fsdp" else p.frozen_bytes)
                   for p in self.parts)

    def _static(self, part: Part) -> int:
        """The part's trainable state by mode; its weights at ``param_dtype``, those held in
        FP8 at one byte (Megatron's FP8 parameters)."""
        P, state = part.params, self.b.cfg.optimizer_state_bytes(self.b.fp8_recipe)
        fp8 = part.fp8_params * (self.wb - 1) if self.mode != "fsdp" else 0
        if self.mode == "ddp" or (part.size == 1 and self.mode != "fsdp"):
            return P * (self.wb + self.gb + state) - fp8
        if self.mode == "zero1":
            return P * (self.wb + self.gb) + self._sharded(part) * state - fp8
        if self.mode == "zero2":
            return P * self.wb + self._sharded(part) * (self.gb + state) - fp8
        return state_bytes(self._sharded(part), self.b.cfg.optimizer)

    @property
    def active(self) -> bool:
        return any(p.size > 1 or (self.mode == "fsdp" and p.replicate > 1)
                   for p in self.parts)

    # ------------------------------------------------------------------ forward
    def before_forward(self, chunk: int, li: int, layer, micro: int, first: bool,
                       after: int | None = None, phase: str = "forward") -> tuple:
        """Ops the layer's forward waits for (a parameter all-gather). An FSDP all-gather
        is issued once ``after`` (the previous layer's first kernel) starts: one layer of
        prefetch, as FSDP2's pre-forward hook issues it while the CPU runs one layer ahead;
        the layer waits for FSDP2's copy-out of each part's gather (:mod:`..fsdp_copies`)."""
        if not self.active or not _weighs(layer):
            return ()
        key = (chunk, li)
        if self.mode == "zero1" and self.b.plan.overlap_param_gather and self._reducing():
            return tuple(self.param_ready.get(key, {}).values()) if first else ()
        if self.mode != "fsdp" or not self._sharding():
            return ()
        if key not in self.gathered:
            ops = []
            for part in self._sharding():
                size = self._gathered(part, chunk, li)
                if size:
                    op = self.b.collective(
                        "all_gather", GATHER_STREAM, part.shard_comm, size, (after,),
                        f"{part.prefix}params.{layer.name}", "forward", micro,
                        layer=layer.name, mem_alloc_bytes=size)
                    ops.append(copy_out(self.b.ol, op, f"{part.prefix}params.{layer.name}",
                                        phase, size, micro, layer=layer.name,
                                        cfg=self.b.cfg, copies=self.b.plan.fsdp_copies)
                               if self.b.plan.fsdp_copies != "none" else op)
            self.gathered[key] = tuple(ops)
        return self.gathered[key]

    def after_forward(self, chunk: int, li: int, layer, last_op: int) -> None:
        """FSDP without pipelining reshards a block after its forward (unless the plan
        keeps it to its backward: ``reshard_after_forward`` false)."""
        if self._reshards(layer) and (chunk, li) in self.gathered:
            del self.gathered[(chunk, li)]
            self.b.ol.free(last_op, self._all_gathered(chunk, li))

    def _unit(self, layer) -> bool:
        """An FSDP unit without pipelining: gathered every micro-batch, freed after its
        backward (the root, embedding and head, stays gathered)."""
        return (self.mode == "fsdp" and bool(self._sharding()) and self.b.plan.pp == 1
                and layer.kind not in ("embedding", "head"))

    def _reshards(self, layer) -> bool:
        """A unit freed after its forward too, and gathered again for its backward."""
        return self._unit(layer) and self.b.plan.reshard_after_forward

    def start_params(self) -> None:
        """zero1 with ``overlap_param_gather``: the previous step's parameter all-gathers,
        one per bucket, issued at the start of the step in forward order."""
        if not (self.mode == "zero1" and self.b.plan.overlap_param_gather):
            return
        for c in sorted(self.chunk_layers):
            names = [x.name for x in self.chunk_layers[c]]
            for part in self._reducing():
                for bk in reversed(self.buckets[part.prefix][c]):
                    op = self.b.collective("all_gather", GATHER_STREAM, part.comm,
                                           self._param_bytes(bk), (),
                                           f"{part.prefix}params.bucket{bk.index}",
                                           "forward", 0, attrs={"chunk": c})
                    for name in bk.layers:
                        self.param_ready.setdefault((c, names.index(name)), {})[
                            part.prefix] = op

    # ------------------------------------------------------------------ backward
    def before_backward(self, chunk: int, li: int, layer, micro: int,
                        after: int | None = None) -> tuple:
        if not self._reshards(layer) or not _weighs(layer):
            return ()
        return self.before_forward(chunk, li, layer, micro, False, after, "backward")

    def grad_bytes(self, chunk: int, li: int, layer) -> int:
        """Unsharded gradient bytes a layer's backward allocates (FSDP; the other modes
        accumulate into their static buffer): on its first backward since its last
        reduce-scatter (under a pipeline the gradient accumulates in place over the
        micro-batches)."""
        if self.mode != "fsdp" or not self._sharding() or (chunk, li) in self.grads_held:
            return 0
        self.grads_held.add((chunk, li))
        return self._all_grads(chunk, li)

    def _param_bytes(self, bk) -> int:
        """Bytes of a bucket's updated weights the distributed optimizer all-gathers: at
        ``param_dtype``, those held in FP8 at one byte (``Bucket.fp8_params``)."""
        return bk.size_bytes // self.gb * self.wb - bk.fp8_params * (self.wb - 1)

    def _grads(self, part: Part, chunk: int, li: int) -> int:
        """Bytes of ``part``'s share of a layer's unsharded gradient (trainable weights)."""
        return padded_numel(int(part.layers[chunk][li].params), part.shard) * self.wb

    def _gathered(self, part: Part, chunk: int, li: int) -> int:
        """Bytes of ``part``'s share of a layer gathered: its gradient's size less what its
        weights gathered in FP8 save (one byte each, :func:`~..fsdp_units.fp8_saving`: the
        part's own FP8 weights), plus its frozen weights as stored."""
        layer = part.layers[chunk][li]
        fp8 = fp8_gathered_params(layer)
        return (self._grads(part, chunk, li) - fp8_saving(fp8, part.shard, self.wb) * part.shard
                + frozen_shard(_frozen(layer), part.shard) * part.shard)

    def _all_gathered(self, chunk: int, li: int) -> int:
        return sum(self._gathered(p, chunk, li) for p in self._sharding())

    def _all_grads(self, chunk: int, li: int) -> int:
        return sum(self._grads(p, chunk, li) for p in self._sharding())

    def after_backward(self, chunk: int, li: int, layer, last_op: int, micro: int,
                       last_micro: bool) -> None:
        """Reduce what this layer completes (see the module doc)."""
        if not self.active:
            return
        if self.mode == "fsdp":
            self._fsdp_reduce(chunk, li, layer, last_op, micro, last_micro)
            return
        overlap = self.b.plan.overlap_grad_reduce
        if (self.mode == "zero2") or (last_micro and overlap):
            for part in self._reducing():
                for bk in self.buckets[part.prefix][chunk]:
                    if bk.ready_layer == li:
                        self._reduce_bucket(part, bk, last_op, micro, chunk)

    def _reduce_bucket(self, part: Part, bk, dep: int, micro: int, chunk: int) -> int:
        kind = "all_reduce" if self.mode == "ddp" else "reduce_scatter"
        return self.b.collective(kind, GRAD_STREAM, part.comm, bk.size_bytes, (dep,),
                                 f"{part.prefix}grads.bucket{bk.index}", "backward", micro,
                                 attrs={"chunk": chunk, "layers": list(bk.layers)})

    def _fsdp_reduce(self, chunk, li, layer, last_op, micro, last_micro) -> None:
        if not _weighs(layer):
            return
        key = (chunk, li)
        pipelined = self.b.plan.pp > 1
        if key in self.gathered and (self._unit(layer) or (pipelined and last_micro)):
            del self.gathered[key]
            self.b.ol.free(last_op, self._all_gathered(chunk, li))
        if pipelined and not last_micro:
            return
        held = key in self.grads_held
        self.grads_held.discard(key)
        for part in self.parts:
            params = int(part.layers[chunk][li].params)
            if not params:
                continue
            last = last_op
            if part.shard > 1:
                padded = padded_numel(params, part.shard)
                cat = copy_in(self.b.ol, GRAD_STREAM, last_op,
                              f"{part.prefix}grads.{layer.name}", padded, self.wb, self.gb,
                              micro, layer=layer.name, cfg=self.b.cfg,
                              copies=self.b.plan.fsdp_copies
                              ) if self.b.plan.fsdp_copies != "none" else last_op
                last = self.b.collective("reduce_scatter", GRAD_STREAM, part.shard_comm,
                                         padded * self.gb,
                                         (cat,), f"{part.prefix}grads.{layer.name}",
                                         "backward", micro, layer=layer.name,
                                         mem_free_bytes=self._grads(part, chunk, li)
                                         if held else 0)
            if part.replicate > 1:
                self.b.collective("all_reduce", GRAD_STREAM, "replicate",
                                  shard_numel(params, part.shard) * self.gb, (last,),
                                  f"{part.prefix}grads.{layer.name}", "backward", micro,
                                  layer=layer.name)

    # ------------------------------------------------------------------ step end
    def finish(self, last_compute: int | None, micro: int) -> list[int]:
        """Reductions not yet issued (no overlap), in bucket order: the ops the optimizer
        waits for."""
        if self.active and self.mode in ("ddp", "zero1") and not self.b.plan.overlap_grad_reduce:
            for c in sorted(self.chunk_layers):
                for part in self._reducing():
                    for bk in self.buckets[part.prefix][c]:
                        self._reduce_bucket(part, bk, last_compute, micro, c)
        return [self.b.ol.last_on(GRAD_STREAM)]

    def after_optimizer(self, opt_op: int, micro: int) -> None:
        """zero1/zero2 all-gather the updated weights (zero1 with ``overlap_param_gather``
        did so at the start of the step)."""
        if self.mode not in ("zero1", "zero2"):
            return
        if self.mode == "zero1" and self.b.plan.overlap_param_gather:
            return
        for c in sorted(self.chunk_layers):
            for part in self._reducing():
                for bk in reversed(self.buckets[part.prefix][c]):
                    self.b.collective("all_gather", GATHER_STREAM, part.comm,
                                      self._param_bytes(bk), (opt_op,),
                                      f"{part.prefix}params.bucket{bk.index}", "optimizer",
                                      micro, attrs={"chunk": c})
