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
  head stay gathered (root). With pipeline parallelism, as torch.distributed.pipelining
  runs FSDP2, a unit is gathered at its first forward and kept until its last backward,
  whose reduce-scatter is the only one. Static ``16 P / d`` (fp32 shard, gradient, Adam).

The ``fsdp`` mode is FSDP2 inside a parallel plan (torchtitan's FSDP x TP/PP/CP, Megatron's
``use_torch_fsdp2``); a job that is data parallelism only runs :mod:`simulator.strategies.
fsdp` instead. Both take a unit's sizes and the static state from
:mod:`simulator.strategies.fsdp_units` (the padded flat parameter gathered and
reduce-scattered, the shard all-reduced over ``dp_replicate``, 16 bytes per sharded
parameter). What stays apart is the schedule, as each models a different job: here a unit
per layer and per stage communicators (``shard.s0``), the all-gather issued one layer
ahead on stream ``dp_gather`` with no rate limiter, the pipeline's keep-until-last-backward,
and the padding of the stage's parameters as one flat buffer; there units by wrap policy,
FSDP1/FSDP2 shardings, prefetch options, NCCL stream order per process group, CPU offload
and FSDP2's copy kernels.
"""

from __future__ import annotations

from ..base import MASTER_BYTES, OPT_MOMENT_BYTES, ceil_div
from ..ddp import assign_buckets
from ..fsdp_units import padded_numel, shard_numel, state_bytes
GRAD_STREAM, GATHER_STREAM = "dp", "dp_gather"


class DataParallel:
    """The DP part of one stage class. ``b`` is the stage builder (:mod:`.generate`):
    ``b.collective(...)``, ``b.ol``, ``b.plan``, ``b.cfg``, ``b.comm(name)``."""

    def __init__(self, b, chunk_layers: dict[int, tuple], grad_size: int, shard_size: int,
                 replicate_size: int):
        self.b, self.mode = b, b.plan.dp_mode
        self.d, self.shard, self.replicate = grad_size, shard_size, replicate_size
        self.wb, self.gb = b.cfg.weight_bytes(), b.cfg.grad_reduce_bytes()
        self.chunk_layers = chunk_layers
        self.params = sum(int(x.params) for ls in chunk_layers.values() for x in ls)
        cap = b.plan.bucket_params * self.gb
        self.buckets = {c: assign_buckets(list(ls), self.gb, cap, cap)
                        for c, ls in chunk_layers.items()} if self.mode != "fsdp" else {}
        self.gathered: dict[tuple[int, int], int] = {}      # (chunk, layer) -> AG op
        self.param_ready: dict[tuple[int, int], int] = {}   # zero1 overlapped gathers
        self.grads_held: set[tuple[int, int]] = set()       # FSDP unsharded gradients

    # ------------------------------------------------------------------ sizes
    def sharded(self, n: int) -> int:
        return ceil_div(n, self.shard if self.mode == "fsdp" else self.d)

    def optimizer_params(self) -> int:
        return self.params if self.mode == "ddp" else self.sharded(self.params)

    def static_bytes(self) -> int:
        P, state = self.params, MASTER_BYTES + OPT_MOMENT_BYTES[self.b.cfg.optimizer]
        if self.d == 1 and self.mode != "fsdp":
            return P * (self.wb + self.gb + state)
        if self.mode == "ddp":
            return P * (self.wb + self.gb + state)
        if self.mode == "zero1":
            return P * (self.wb + self.gb) + self.sharded(P) * state
        if self.mode == "zero2":
            return P * self.wb + self.sharded(P) * (self.gb + state)
        return state_bytes(self.sharded(P), self.b.cfg.optimizer)

    @property
    def active(self) -> bool:
        return self.d > 1 or (self.mode == "fsdp" and self.replicate > 1)

    # ------------------------------------------------------------------ forward
    def before_forward(self, chunk: int, li: int, layer, micro: int, first: bool,
                       after: int | None = None) -> tuple:
        """Ops the layer's forward waits for (a parameter all-gather). An FSDP all-gather
        is issued once ``after`` (the previous layer's first kernel) starts: one layer of
        prefetch, as FSDP2's pre-forward hook issues it while the CPU runs one layer ahead."""
        if not self.active or not layer.params:
            return ()
        key = (chunk, li)
        if self.mode == "zero1" and self.b.plan.overlap_param_gather and self.d > 1:
            return (self.param_ready.get(key),) if first else ()
        if self.mode != "fsdp" or self.shard == 1:
            return ()
        if key not in self.gathered:
            size = self._gathered(layer)
            self.gathered[key] = self.b.collective(
                "all_gather", GATHER_STREAM, "shard", size, (after,), f"params.{layer.name}",
                "forward", micro, layer=layer.name, mem_alloc_bytes=size)
        return (self.gathered[key],)

    def after_forward(self, chunk: int, li: int, layer, last_op: int) -> None:
        """FSDP without pipelining reshards a block after its forward."""
        if self._reshards(layer) and (chunk, li) in self.gathered:
            del self.gathered[(chunk, li)]
            self.b.ol.free(last_op, self._gathered(layer))

    def _reshards(self, layer) -> bool:
        return (self.mode == "fsdp" and self.shard > 1 and self.b.plan.pp == 1
                and layer.kind not in ("embedding", "head"))

    def start_params(self) -> None:
        """zero1 with ``overlap_param_gather``: the previous step's parameter all-gathers,
        one per bucket, issued at the start of the step in forward order."""
        if not (self.mode == "zero1" and self.b.plan.overlap_param_gather and self.d > 1):
            return
        for c, buckets in sorted(self.buckets.items()):
            names = [x.name for x in self.chunk_layers[c]]
            for bk in reversed(buckets):
                op = self.b.collective("all_gather", GATHER_STREAM, "dp",
                                       bk.size_bytes // self.gb * self.wb, (),
                                       f"params.bucket{bk.index}", "forward", 0,
                                       attrs={"chunk": c})
                for name in bk.layers:
                    self.param_ready[(c, names.index(name))] = op

    # ------------------------------------------------------------------ backward
    def before_backward(self, chunk: int, li: int, layer, micro: int,
                        after: int | None = None) -> tuple:
        if not self._reshards(layer) or not layer.params:
            return ()
        return self.before_forward(chunk, li, layer, micro, False, after)

    def grad_bytes(self, chunk: int, li: int, layer) -> int:
        """Unsharded gradient bytes a layer's backward allocates (FSDP; the other modes
        accumulate into their static buffer): on its first backward since its last
        reduce-scatter (under a pipeline the gradient accumulates in place over the
        micro-batches)."""
        if self.mode != "fsdp" or self.shard == 1 or (chunk, li) in self.grads_held:
            return 0
        self.grads_held.add((chunk, li))
        return self._gathered(layer)

    def _gathered(self, layer) -> int:
        """Bytes of a layer's gathered parameters, and of its unsharded gradient."""
        return padded_numel(int(layer.params), self.shard) * self.wb

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
            for bk in self.buckets[chunk]:
                if bk.ready_layer == li:
                    self._reduce_bucket(bk, last_op, micro, chunk)

    def _reduce_bucket(self, bk, dep: int, micro: int, chunk: int) -> int:
        kind = "all_reduce" if self.mode == "ddp" else "reduce_scatter"
        return self.b.collective(kind, GRAD_STREAM, "dp", bk.size_bytes, (dep,),
                                 f"grads.bucket{bk.index}", "backward", micro,
                                 attrs={"chunk": chunk, "layers": list(bk.layers)})

    def _fsdp_reduce(self, chunk, li, layer, last_op, micro, last_micro) -> None:
        if not layer.params:
            return
        key = (chunk, li)
        gathered = self._gathered(layer)
        pipelined = self.b.plan.pp > 1
        if key in self.gathered and (self._reshards(layer) or (pipelined and last_micro)):
            del self.gathered[key]
            self.b.ol.free(last_op, gathered)
        if pipelined and not last_micro:
            return
        grad = gathered if key in self.grads_held else 0
        self.grads_held.discard(key)
        last = last_op
        if self.shard > 1:
            last = self.b.collective("reduce_scatter", GRAD_STREAM, "shard",
                                     padded_numel(int(layer.params), self.shard) * self.gb,
                                     (last_op,), f"grads.{layer.name}", "backward", micro,
                                     layer=layer.name, mem_free_bytes=grad)
        if self.replicate > 1:
            self.b.collective("all_reduce", GRAD_STREAM, "replicate",
                              shard_numel(int(layer.params), self.shard) * self.gb, (last,),
                              f"grads.{layer.name}", "backward", micro, layer=layer.name)

    # ------------------------------------------------------------------ step end
    def finish(self, last_compute: int | None, micro: int) -> list[int]:
        """Reductions not yet issued (no overlap), in bucket order: the ops the optimizer
        waits for."""
        if self.active and self.mode in ("ddp", "zero1") and not self.b.plan.overlap_grad_reduce:
            for c, buckets in sorted(self.buckets.items()):
                for bk in buckets:
                    self._reduce_bucket(bk, last_compute, micro, c)
        return [self.b.ol.last_on(GRAD_STREAM)]

    def after_optimizer(self, opt_op: int, micro: int) -> None:
        """zero1/zero2 all-gather the updated weights (zero1 with ``overlap_param_gather``
        did so at the start of the step)."""
        if self.d == 1 or self.mode not in ("zero1", "zero2"):
            return
        if self.mode == "zero1" and self.b.plan.overlap_param_gather:
            return
        for c, buckets in sorted(self.buckets.items()):
            for bk in reversed(buckets):
                self.b.collective("all_gather", GATHER_STREAM, "dp",
                                  bk.size_bytes // self.gb * self.wb, (opt_op,),
                                  f"params.bucket{bk.index}", "optimizer", micro,
                                  attrs={"chunk": c})
