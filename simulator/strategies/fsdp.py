"""PyTorch FSDP (FSDP1 ``FullyShardedDataParallel`` / FSDP2 ``fully_shard``) as a Trace.

Units (:mod:`.fsdp_units`): ``wrap: transformer_block`` makes each ``transformer_block``
layer a unit (``block``: every ``*_block`` layer; ``none``: one unit; ``submodule``: every
LayerNorm and Linear of a block, :mod:`.fsdp_submodule`); every other layer (embeddings,
final norm, head) is in the root unit. Like FSDP1 (``_post_forward_reshard``:
``not state._is_root``) and FSDP2 (root uses ``reshard_after_forward=False``) the root is not resharded after
forward: 1 all-gather + 1 reduce-scatter per micro-step, against 2 + 1 for other units.

Per unit and micro-step (streams of FSDP1 ``_init_streams``):

* forward: [h2d of the shard (cpu_offload), stream ``h2d``] -> all_gather (``unshard``)
  -> compute waits for it -> reshard (free) after its last forward op unless kept;
* backward (reverse order): all_gather again if resharded (over the ``reshard`` groups for
  an FSDP2 int) -> (recompute) + backward -> free -> reduce_scatter (``post_backward``) ->
  HSDP all_reduce of the shard over the replicate groups (``all_reduce``) -> [d2h].
  NO_SHARD: all_reduce of the unit's gradient on ``post_backward``.

Issue order follows the hooks: all-gathers and reduce-scatters of one process group share
one NCCL stream, so each also depends on the previous collective of its group. Prefetch:
BACKWARD_PRE all-gathers the next unit in the current unit's pre-backward hook (before its
gradient compute), BACKWARD_POST in its post-backward hook (after the gradient compute,
before its reduce-scatter), None when the next unit needs it. ``forward_prefetch`` issues
the next forward all-gather before the current forward compute; without it the forward
all-gathers still overlap compute (the CPU runs ahead), limited by the rate limiter:
``limit_all_gathers`` queues each reshard's free and an all-gather issued while two frees
are queued waits for the oldest (``_free_event_queue``, at most 2 in flight).

Memory: static = sharded fp32 params (4) + sharded fp32 grads (4) + optimizer moments (8 for
Adam; the fp32 flat param is the master copy) per parameter / shard size = 16 Ψ / S, none
with cpu_offload. Gathered params (``param_dtype``) live from all-gather start to reshard;
unsharded gradients appear op by op as the unit's backward kernels produce them (split by
each layer's parameters) and live until its reduce-scatter; activations appear and die op
by op (``base.spread``).

This is FSDP for a job that is data parallelism only (``strategy: fsdp``, and torchtitan's
and DeepSpeed ZeRO-3's pure data-parallel plans, :mod:`.frameworks.translate`). FSDP inside
a parallel plan (TP, PP, CP: ``dp_mode: fsdp``) is :mod:`.parallel.dp`'s. The two share
what a unit weighs (:mod:`.fsdp_units`: the padded flat parameter an all-gather and a
reduce-scatter move, the shard an HSDP all-reduce moves, the 16 bytes of static state per
sharded parameter), FSDP2's copy kernels (:mod:`.fsdp_copies`) and the memory conventions
above; they model different schedules. Here:
units by wrap policy with one root unit of every unwrapped layer, the FSDP1 shardings and
FSDP2 meshes (partial resharding included), per-process-group NCCL stream order, the
prefetch options and the rate limiter, CPU offload, and padding per
unit. There: a unit per layer of the stage's chunks, the embedding and the head each
unsharded for the whole step, one layer of prefetch, and under a pipeline a unit gathered
at its first forward and reduce-scattered once, after its last backward.
"""

from __future__ import annotations

from functools import cached_property

from simulator.trace import Communicator, RankClass, Trace

from .base import (CLASS_ID, FP32, OpList, World, build_meta, ceil_div, check_layers,
                   emit_backward, emit_forward)
from .clipping import emit_clip
from .fsdp_config import FSDPConfig, ShardPlan, resolve_plan
from .fsdp_copies import before_reduce, first_dep
from .fsdp_submodule import backward_layers, forward_layers
from .fsdp_units import (SUB, Segment, Unit, Units, build_units, fp8_saving, frozen_shard,
                         padded_numel, segments, shard_numel, state_bytes)
from .optim import emit_optimizer


class _Schedule:
    """Emits one class's ops; keeps what is gathered, the free queue, NCCL issue order."""

    def __init__(self, layers, cfg: FSDPConfig, plan: ShardPlan, units: Units,
                 copies: str = "fsdp2"):
        self.layers, self.cfg, self.plan, self.units = layers, cfg, plan, units.units
        self.sub = units.sub                        # (layer, weight) -> per-kernel unit
        self.segs, self.unit_of = segments(units.unit_of), units.unit_of
        self.ol = OpList()
        self.wb, self.rb = cfg.weight_bytes(), cfg.grad_reduce_bytes()
        self.gathered: dict[int, int | None] = {}   # unit -> op compute waits for
        self.held: dict[int, int] = {}              # unit -> gathered bytes to free
        self.partial: set[int] = set()              # units holding a 1/k reshard
        self.queue: list[int] = []                  # rate limiter free events
        self.pg_last: dict[str, int] = {}           # communicator -> last collective
        # copy kernels (fsdp_copies.py): an FSDP2 mesh's, or the framework's that runs it
        self.copies = copies if plan.label.startswith("fsdp2") else "none"
        self.copied: set[int] = set()               # units whose gather was copied out

    # ------------------------------------------------------------------ sizes
    def shard_params(self, u: Unit) -> int:
        return shard_numel(u.params, self.plan.shard)

    def padded(self, u: Unit) -> int:
        return padded_numel(u.params, self.plan.shard)

    def gathered_bytes(self, u: Unit, over: int | None = None) -> int:
        """Bytes of a unit gathered over ``over`` ranks (the shard group by default): its
        trainable flat parameter at ``param_dtype`` (those gathered in FP8 at one byte) and
        its frozen weights as stored."""
        over = over or self.plan.shard
        return (padded_numel(u.params, over) * self.wb
                - fp8_saving(u.fp8_params, over, self.wb) * over
                + frozen_shard(u.frozen_bytes, over) * over)

    def shard_bytes(self, u: Unit, over: int) -> int:
        """A rank's 1/``over`` of what :meth:`gathered_bytes` gathers."""
        return (ceil_div(u.params, over) * self.wb - fp8_saving(u.fp8_params, over, self.wb)
                + frozen_shard(u.frozen_bytes, over))

    def grad_bytes(self, u: Unit, li: int, first: bool) -> int:
        """The unsharded gradient bytes layer ``li`` of unit ``u`` produces: the unit's
        padded gradient split by parameters, the rounding and padding on the unit's first
        backward."""
        if u.params == 0:
            return 0
        total = self.padded(u) * self.wb
        own = total * int(self.layers[li].params) // u.params
        return own + (self.grad_rest[u.index] if first else 0)

    @cached_property
    def grad_rest(self) -> dict[int, int]:
        """Per unit, its padded gradient bytes not covered by the per-layer shares."""
        shared: dict[int, int] = {}
        for k, layer in enumerate(self.layers):
            if self.unit_of[k] == SUB:
                continue
            u = self.units[self.unit_of[k]]
            if u.params:
                shared[u.index] = shared.get(u.index, 0) + \
                    self.padded(u) * self.wb * int(layer.params) // u.params
        return {u.index: self.padded(u) * self.wb - shared.get(u.index, 0)
                for u in self.units if u.params}

    def unit_at(self, si: int, segs: list[Segment]) -> Unit | None:
        """The unit of segment ``si`` (None past the end or for per-kernel units)."""
        return self.units[segs[si].unit] if si < len(segs) and segs[si].unit != SUB else None

    def needs_gather(self, u: Unit | None) -> bool:
        resident = self.plan.shard == 1 and not self.cfg.cpu_offload
        return u is not None and u.weighs and not resident and u.index not in self.gathered

    # ------------------------------------------------------------------ collectives
    def collective(self, kind: str, stream: str, comm: str, size: int, deps, name: str,
                   micro: int, phase: str, **mem) -> int:
        deps = [*deps, self.pg_last.get(comm)]
        op = self.ol.collective(stream=stream, collective=kind, comm=comm, size_bytes=int(size),
                                deps=deps, name=f"{kind}.{name}", phase=phase, layer=name,
                                attrs={"micro_step": micro}, **mem)
        self.pg_last[comm] = op
        return op

    def memcpy(self, direction: str, size: int, deps, name: str, micro: int, phase: str,
               **mem) -> int:
        return self.ol.add(stream=direction, kind="memcpy", name=f"{direction}.{name}",
                           layer=name, phase=phase, size_bytes=int(size), deps=deps,
                           attrs={"direction": direction, "micro_step": micro}, **mem)

    def unshard(self, u: Unit, micro: int, phase: str, deps=()) -> None:
        deps = list(deps)
        if self.cfg.limit_all_gathers and len(self.queue) >= 2:
            deps.append(self.queue.pop(0))
        partial = u.index in self.partial
        copied = 0
        if self.cfg.cpu_offload and not partial:
            copied = self.shard_params(u) * FP32 + frozen_shard(u.frozen_bytes, self.plan.shard)
            deps = [self.memcpy("h2d", copied, deps, u.name, micro, phase,
                                mem_alloc_bytes=copied)]
        if self.plan.shard == 1:            # NO_SHARD + offload: the copy is the param
            self.gathered[u.index], self.held[u.index] = deps[0], copied
            return
        comm = "reshard" if partial else "shard"
        kept = self.shard_bytes(u, self.plan.reshard) if partial else 0
        gathered = self.gathered_bytes(u)
        self.gathered[u.index] = self.collective(
            "all_gather", "unshard", comm, gathered, deps, u.name, micro, phase,
            mem_alloc_bytes=gathered, mem_free_bytes=copied + kept)
        self.held[u.index] = gathered
        self.partial.discard(u.index)
        self.copied.discard(u.index)

    def free(self, u: Unit, op: int) -> None:
        self.ol.free(op, self.held.pop(u.index))
        del self.gathered[u.index]
        if self.cfg.limit_all_gathers:
            self.queue.append(op)

    def reshard_after_forward(self, u: Unit, op: int) -> None:
        if u.root or not self.plan.reshard or u.index not in self.held:
            return
        self.free(u, op)
        if self.plan.reshard < self.plan.shard:      # FSDP2 int: keep 1/k
            self.ol.alloc(op, self.shard_bytes(u, self.plan.reshard))
            self.partial.add(u.index)

    def reduce(self, u: Unit, op: int, micro: int) -> int:
        """Reduce-scatter / all-reduce / offload of a unit's gradient; the last op."""
        plan, offload, shard_p = self.plan, self.cfg.cpu_offload, self.shard_params(u)
        grad, cast = self.padded(u) * self.wb, 0
        last = op
        if plan.shard > 1:
            op = last = before_reduce(self, u, op, micro)
            cast = self.padded(u) * self.rb if self.rb != self.wb else 0
            keep = shard_p * FP32 if offload else 0
            last = self.collective("reduce_scatter", "post_backward", "shard",
                                   self.padded(u) * self.rb, [op], u.name, micro, "backward",
                                   mem_alloc_bytes=cast + keep, mem_free_bytes=grad + cast)
            grad = keep
        if plan.replicate > 1:
            stream = "all_reduce" if plan.shard > 1 else "post_backward"
            last = self.collective("all_reduce", stream, "replicate", shard_p * self.rb,
                                   [last], u.name, micro, "backward")
        if offload:
            last = self.memcpy("d2h", shard_p * FP32, [last], u.name, micro, "backward",
                               mem_free_bytes=grad)
        return last

    # ------------------------------------------------------------------ passes
    def forward(self, micro: int) -> None:
        last_seg = {seg.unit: i for i, seg in enumerate(self.segs)}
        for si, seg in enumerate(self.segs):
            ui, lids = seg.unit, seg.layers
            if ui == SUB:
                forward_layers(self, lids, micro)
                continue
            unit = self.units[ui]
            if self.needs_gather(unit):
                self.unshard(unit, micro, "forward")
            # the unit's copy-out before any prefetch, as the hook (FSDP2) or the fetch
            # (DeepSpeed) waits for its gather, then prefetches
            first = first_dep(self, unit, micro, "forward")
            nxt = self.unit_at(si + 1, self.segs)
            if self.cfg.forward_prefetch and self.needs_gather(nxt):
                self.unshard(nxt, micro, "forward")
            for j, li in enumerate(lids):
                deps = (first,) if j == 0 else ()
                last = emit_forward(self.ol, self.layers[li], self.cfg, micro, deps).last
            if si == last_seg[ui]:
                self.reshard_after_forward(unit, last)

    def backward(self, micro: int) -> None:
        segs = self.segs[::-1]
        first_seg, last_seg = {}, {}
        for i, seg in enumerate(segs):
            first_seg.setdefault(seg.unit, i)
            last_seg[seg.unit] = i
        grads_dynamic = self.plan.shard > 1 or self.cfg.cpu_offload
        for si, seg in enumerate(segs):
            ui, lids = seg.unit, seg.layers
            if ui == SUB:
                backward_layers(self, lids, micro)
                continue
            unit = self.units[ui]
            nxt = self.unit_at(si + 1, segs)
            if self.needs_gather(unit):
                self.unshard(unit, micro, "backward")
            first = si == first_seg[ui]
            ready = first_dep(self, unit, micro, "backward")    # before a prefetch: forward
            if first and self.cfg.backward_prefetch == "BACKWARD_PRE" and self.needs_gather(nxt):
                self.unshard(nxt, micro, "backward")
            for j, li in enumerate(reversed(lids)):
                deps = (ready,) if j == 0 else ()
                grad = self.grad_bytes(unit, li, first and j == 0) if grads_dynamic else 0
                last = emit_backward(self.ol, self.layers[li], self.cfg, micro, deps,
                                     grad_bytes=grad).last
            if si == last_seg[ui]:
                self.post_backward(unit, last, nxt, micro)

    def post_backward(self, unit: Unit, last: int, nxt: Unit | None, micro: int) -> None:
        """FSDP1 ``_post_backward_hook``: reshard, BACKWARD_POST prefetch, reduce (only
        trainable parameters: a frozen unit is resharded, not reduced)."""
        if not unit.weighs:
            return
        if unit.index in self.held and self.plan.shard > 1:
            self.free(unit, last)
        if self.cfg.backward_prefetch == "BACKWARD_POST" and self.needs_gather(nxt):
            self.unshard(nxt, micro, "backward", deps=(last,))
        if unit.params:
            self.reduce(unit, last, micro)
        if unit.index in self.held:          # NO_SHARD + offload: drop the GPU copy
            self.ol.free(last, self.held.pop(unit.index))
            del self.gathered[unit.index]


def communicators(plan: ShardPlan) -> dict[str, Communicator]:
    comms = {}
    if plan.shard > 1:
        comms["shard"] = Communicator("shard", plan.shard_groups())
    if plan.replicate > 1:
        comms["replicate"] = Communicator("replicate", plan.replicate_groups())
    if 1 < plan.reshard < plan.shard:
        comms["reshard"] = Communicator("reshard", plan.reshard_groups())
    return comms


def fsdp(layers, cfg: FSDPConfig, world: World, *, model: str = "", tokens_per_sample: int = 0,
         model_flops_per_sample: float | None = None, copies: str = "fsdp2") -> Trace:
    """The FSDP trace of one iteration (``grad_accum`` micro-steps + optimizer step);
    an FSDP2 mesh with the copy kernels of ``copies`` (:mod:`.fsdp_copies`: FSDP2's, or
    DeepSpeed ZeRO-3's when DeepSpeed runs the job).

    Each micro-step reduces its gradients (no ``no_sync``: accumulating unsharded
    gradients would cost a full gradient replica)."""
    check_layers(layers)
    plan = resolve_plan(cfg, world)
    sched = _Schedule(layers, cfg, plan, build_units(layers, cfg.wrap), copies)
    units = sched.units
    for micro in range(cfg.grad_accum):
        sched.forward(micro)
        sched.backward(micro)
    ol = sched.ol
    per_rank = sum(sched.shard_params(u) for u in units)
    ends = [ol.last_on(s) for s in ("post_backward", "all_reduce", "d2h")]
    if cfg.grad_clip_norm is not None and not cfg.cpu_offload:
        ends = [emit_clip(ol, per_rank, ends, "shard" if plan.shard > 1 else None,
                          "post_backward")]
    emit_optimizer(ol, cfg, per_rank, deps=ends,
                   cpu_bytes_per_s=cfg.cpu_adam_bytes_per_s if cfg.cpu_offload else None)
    frozen = sum(frozen_shard(u.frozen_bytes, plan.shard) for u in units)
    static = 0 if cfg.cpu_offload else state_bytes(per_rank, cfg.optimizer) + frozen
    meta = build_meta(layers, cfg, world, strategy="fsdp", model=model,
                      tokens_per_sample=tokens_per_sample,
                      model_flops_per_sample=model_flops_per_sample,
                      sharding=plan.label, shard_size=plan.shard,
                      replicate_size=plan.replicate, reshard_size=plan.reshard,
                      units=[u.name for u in units if u.weighs])
    cls = RankClass(CLASS_ID, world.ranks, ol.ops, static_memory_bytes=static)
    trace = Trace(world.world_size, [cls], communicators(plan), meta)
    trace.validate()
    return trace
