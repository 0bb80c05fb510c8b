"""Model + parallel plan + training config -> one iteration's Trace (TP, SP, PP, DP).

One :class:`RankClass` per pipeline rank (its members: every rank with that ``pp``
coordinate, identical programs), so a 16,384-GPU job has ``pp`` classes, not 16,384. Each
class issues the passes its schedule (:func:`schedules.schedule`) gives it, in that order:

* ``F`` (micro-batch, chunk): receive the activation from the previous model stage
  (posted when the previous pass starts), the chunk's layers forward
  (:func:`simulator.strategies.base.emit_forward`) with their TP collectives
  (:mod:`.tp`, stream ``tp``), send the output to the next stage;
* ``B``: receive the output gradient, the layers backward (recompute first under
  activation checkpointing), send the input gradient back; in the zero-bubble schedules
  ``B`` is the input-gradient kernels only and ``W`` the weight-gradient GEMMs (``*.wgrad``);
* data parallelism over the stage's other ranks (:mod:`.dp`), then the optimizer step
  (:func:`simulator.strategies.optim.emit_optimizer`) on the rank's parameters.

Sends and receives carry the tag ``F.m<micro>.s<stage>`` (activation into model stage
``stage``) or ``B.m<micro>.s<stage>`` (gradient into it), on one stream per channel
(``pp_send.F.s<stage>``, ``pp_recv.B.s<stage>``...): each channel carries its micro-batches
in the same order at both ends, so in-order streams cannot deadlock whatever the schedule
interleaves (NCCL's batched isend/irecv per pass behaves the same). zbv's turn of the V
(the last stage's two chunks on one rank) needs no transfer. Communicators are per stage
(``tp.s0``, ``dp.s0``...), so a collective waits only for the ranks of its own stage.

Lockstep (``plan.lockstep``, torchtitan's ``Interleaved1F1B``): the classes walk torch's
table of time steps (:func:`schedules.lockstep_steps`). In each step a rank runs its pass
(no receive before it: the input came in an earlier step), then posts its send and the
receives of what its neighbouring ranks ran in the same step, after the pass; the next
step's pass waits for all of them, as ``PipelineScheduleMulti._step_microbatches`` waits
for its batched sends and receives (``_batch_p2p(ops).wait()``). A send completes only when
its receiver posts the matching receive after its own pass of that step, so a rank's step
ends with the slower of its neighbours' passes that exchange with it.

Extension points (expert and context parallelism): :data:`HOOKS` holds factories of
per-class kernel hooks (``factory(builder) -> OpHooks | None``, called once per class; an
object with ``start_layer(layer)`` and ``flush()`` gets those calls too), and
:data:`COMM_DIMS` the mesh dimensions behind each communicator name ``builder.collective``
accepts. ``build_parallel(..., layers=...)`` takes layer costs built elsewhere (MoE blocks).
:mod:`.ep_cp` fills both: its layers (MoE blocks of the busiest EP rank, ring-attention
steps) and its hooks (EP all-to-alls, CP K/V exchanges) are the defaults.
"""

from __future__ import annotations

from typing import Callable

from simulator.compute.launch import graphed
from simulator.models import (LayerCost, ModelSpec, layer_costs, model_flops_per_sample,
                              params_total)
from simulator.models.cross_entropy import megatron_cross_entropy
from simulator.models.fp8 import fp8_layer
from simulator.models.mamba import in_graph_scope
from simulator.models.moe import op_fused_experts
from simulator.models.nvfp4 import NVFP4, nvfp4_layer
from simulator.precision import precision_bytes
from simulator.trace import Communicator, RankClass, Trace

from ..base import (FP32, CommonConfig, OpHooks, OpList, World, build_meta, emit_backward,
                    emit_forward)
from ..optim import emit_optimizer
from . import tied
from .a2a_overlap import PassTracker, combined_actions, emit_combined
from .dp import DataParallel
from .ep_cp import HOOK_FACTORIES, planned_layers
from .place import domain_groups, placement
from .plan import ParallelPlan
from .schedules import SPLIT_W, Action, check_schedule, lockstep_steps, schedule
from .split import input_grad_view, kept_for_w, weight_grad_view
from .stages import Chunk, chunks, neighbour
from .tp import STREAM, TPHooks, async_tp_layer, gathered_input

COMM_DIMS = {"tp": "tp", "dp": "dp_cp", "shard": "shard_cp", "replicate": "dp_replicate",
             "cp": "cp", "ep": "ep", "etp": "etp", "edp": "edp"}
# the flex dispatcher's: each EP group's ranks in one NVLink domain, and its ranks with the
# same local index across the domains (:func:`.place.domain_groups`)
DOMAIN_COMMS = ("ep_nvl", "ep_rail")
HOOKS: dict[str, Callable] = dict(HOOK_FACTORIES)      # EP all-to-alls, CP K/V exchanges


class _Hooks(OpHooks):
    """Several hook objects as one (deps concatenated, each told every kernel)."""

    def __init__(self, parts: list):
        self.parts = parts
        if len(parts) == 1:     # most plans (TP alone): its own before/after are called,
            # twice per kernel, without going through the loops below
            self.before, self.after = parts[0].before, parts[0].after
            self.host_syncs = parts[0].host_syncs

    def before(self, cost, phase: str) -> tuple:
        out: tuple = ()
        for p in self.parts:        # (most parts, most kernels: nothing; no generator)
            deps = p.before(cost, phase)
            if deps:
                out += tuple(deps)
        return out

    def after(self, cost, phase: str, op_id: int) -> None:
        for p in self.parts:
            p.after(cost, phase, op_id)

    def host_syncs(self, cost, phase: str) -> bool:
        return any(p.host_syncs(cost, phase) for p in self.parts)

    def host_sync_waits(self, cost, phase: str, deps: tuple) -> tuple:
        """What the first part that syncs before ``cost`` says the CPU waits for."""
        part = next((p for p in self.parts if p.host_syncs(cost, phase)), None)
        return deps if part is None else part.host_sync_waits(cost, phase, deps)

    def start_layer(self, layer) -> None:
        for p in self.parts:
            getattr(p, "start_layer", lambda _: None)(layer)

    def flush(self) -> list[int]:
        return [d for p in self.parts for d in getattr(p, "flush", list)()]


class StageBuilder:
    """The ops of one pipeline rank's class."""

    def __init__(self, rank: int, plan: ParallelPlan, cfg: CommonConfig, my_chunks: dict,
                 all_chunks: dict, *, act_bytes: int, loss_bytes: int, model: ModelSpec,
                 tied_ranks: tied.TiedRanks | None = None, shared_attrs: dict | None = None,
                 fp8_recipe: str | None = None):
        self.rank, self.plan, self.cfg, self.model = rank, plan, cfg, model
        self.fp8_recipe = fp8_recipe      # the optimizer's master weights depend on it
        self.tied = tied_ranks is not None and rank in (tied_ranks.embedding, tied_ranks.head)
        self.chunks, self.all_chunks = my_chunks, all_chunks
        self.ol = OpList(shared_attrs)       # (kernels' attrs shared: never changed here)
        self.used: set[str] = set()
        self._comm_ids: dict[str, str] = {}
        self.act_bytes, self.loss_bytes = act_bytes, loss_bytes
        self.stage_first = {p: plan.stage_ranks(p)[0] for p in range(plan.pp)}
        self.pass_key: str | None = None      # combined pass: the side being emitted
        self.pass_last: dict = {}             # and the last kernel of each side
        parts = [TPHooks(self._tp_issue, self.last_compute,
                         sp=plan.sequence_parallel, overlap=plan.tp_overlap,
                         act_bytes=act_bytes, loss_bytes=loss_bytes,
                         async_backward=plan.tp_async_backward, async_tp=plan.async_tp,
                         block_gather_bytes=(act_bytes // precision_bytes(cfg.precision)
                                             if fp8_tp_gathers(plan, cfg, fp8_recipe)
                                             else None))] \
            if plan.tp > 1 else []
        parts += [h for h in (f(self) for f in HOOKS.values()) if h is not None]
        if plan.moe_a2a_overlap:
            parts.append(PassTracker(self))
        self.hooks = _Hooks(parts)
        sizes = {"grad": plan.dp * plan.cp, "shard": plan.dp_shard * plan.cp,
                 "replicate": plan.dp_replicate}
        self.dp = DataParallel(self, {c: ch.layers for c, ch in my_chunks.items()},
                               sizes["grad"], sizes["shard"], sizes["replicate"])
        self.prev_start: int | None = None    # first op of the previous pass
        self.lockstep = plan.lockstep
        self.barrier: tuple = ()     # lockstep: the previous time step's sends and receives
        self.pass_end: tuple = ()    # lockstep: what the pass's send waits for
        self.layer_start: int | None = None   # first op of the previous layer emitted

    # ------------------------------------------------------------------ ops
    def comm(self, name: str) -> str:
        """The id of this stage's communicator ``name`` (``tp.s3``), noted as used; each
        id made once (a class issues a collective for every TP point of every kernel)."""
        found = self._comm_ids.get(name)
        if found is None:
            self.used.add(name)
            found = self._comm_ids[name] = f"{name}.s{self.rank}"
        return found

    def collective(self, kind: str, stream: str, comm: str, size: int, deps, name: str,
                   phase: str, micro: int, attrs: dict | None = None, layer: str = "",
                   shared: bool = False, **mem) -> int:
        """A collective on the stage's communicator ``comm`` (``shared``: the one of that
        name that spans stages)."""
        return self.ol.collective(
            stream=stream, collective=kind, comm=comm if shared else self.comm(comm),
            size_bytes=int(size), deps=tuple(deps), name=name, phase=phase, layer=layer,
            attrs={"micro_step": micro, **attrs} if attrs else {"micro_step": micro}, **mem)

    def _tp_issue(self, kind: str, size: int, deps, name: str, phase: str, layer: str) -> int:
        # ``collective(kind, STREAM, "tp", size, deps, name, phase, self.micro,
        # layer=layer)`` without its extra call: TP collectives come once per kernel or two
        return self.ol.collective(stream=STREAM, collective=kind, comm=self.comm("tp"),
                                  size_bytes=int(size), deps=tuple(deps), name=name,
                                  phase=phase, layer=layer,
                                  attrs=self.ol.micro_attrs(self.micro))

    def _p2p(self, kind: str, stage: int, size: int, tag: str, deps) -> int | None:
        """A send to / recv from the rank holding model stage ``stage``; None when this
        rank holds it (zbv's turn of the V: the tensor stays on the GPU)."""
        rank = neighbour(self.plan, stage, 0).rank
        if rank == self.rank:
            return None
        direction, _, into = tag.split(".")
        return self.ol.add(stream=f"pp_{kind}.{direction}.{into}", kind=kind, name=f"{kind}.{tag}",
                           phase="comm", size_bytes=int(size), peer=self.stage_first[rank],
                           deps=tuple(deps), attrs={"tag": tag, "micro_step": self.micro})

    def out_bytes(self, stage: int) -> int:
        at = neighbour(self.plan, stage, 0)
        return int(self.all_chunks[(at.rank, at.chunk)].layers[-1].output_bytes)

    def layer_cfg(self, ch: Chunk, li: int) -> CommonConfig:
        """The config a layer is emitted with: Megatron's ``recompute_method: block``
        checkpoints only the first ``recompute_num_layers`` blocks of each chunk."""
        n = getattr(self.cfg, "recompute_num_layers", None)
        if not (self.cfg.ac_mode == "full" and n and
                getattr(self.cfg, "recompute_method", "uniform") == "block"):
            return self.cfg
        blocks = [i for i, x in enumerate(ch.layers) if x.kind.endswith("block")]
        if li in blocks[:n]:
            return self.cfg
        return self.cfg.model_copy(update={"activation_checkpointing": False,
                                           "activation_offload": False})

    # ------------------------------------------------------------------ passes
    def last_compute(self) -> int | None:
        """The kernel a collective issued now waits for: the last compute op, or within a
        combined pass (:mod:`.a2a_overlap`) the last one of the pass being emitted."""
        if self.pass_key is not None:
            found = self.pass_last.get(self.pass_key)
            if found is not None:
                return found
        return self.ol.last_on("compute")

    def recv_input(self, ch: Chunk, micro: int) -> int | None:
        """The receive of ``ch``'s input activation (None on the first model stage)."""
        if ch.stage == 0:
            return None
        return self._p2p("recv", ch.stage - 1, self.out_bytes(ch.stage - 1),
                         f"F.m{micro}.s{ch.stage}", (self.prev_start,))

    def recv_grad(self, ch: Chunk, micro: int) -> int | None:
        """The receive of ``ch``'s output gradient (None on the last model stage)."""
        if ch.last:
            return None
        return self._p2p("recv", ch.stage + 1, self.out_bytes(ch.stage),
                         f"B.m{micro}.s{ch.stage}", (self.prev_start,))

    def send_output(self, ch: Chunk, micro: int, last: int) -> None:
        if not ch.last:
            self._p2p("send", ch.stage + 1, self.out_bytes(ch.stage), f"F.m{micro}.s"
                      f"{ch.stage + 1}", (last, *self.hooks.flush()))

    def send_grad(self, ch: Chunk, micro: int, last: int) -> None:
        if ch.stage > 0:
            self._p2p("send", ch.stage - 1, self.out_bytes(ch.stage - 1),
                      f"B.m{micro}.s{ch.stage - 1}", (last, *self.hooks.flush()))

    def forward_layer(self, ch: Chunk, li: int, layer, micro: int, first: bool, deps,
                      key: str | None = None):
        """Layer ``li`` of ``ch`` forward (``key``: the combined pass's side, "F")."""
        return self.forward_piece(ch, li, layer, layer, micro, first, deps, start=True,
                                  end=True, key=key)

    def forward_piece(self, ch: Chunk, li: int, layer, piece, micro: int, first: bool, deps,
                      *, start: bool = False, end: bool = False, key: str | None = "F"):
        """``piece`` (``layer`` itself, or one of its nodes, :func:`.a2a_overlap.pieces`)
        forward; ``start``/``end``: the layer's first/last piece, where the data-parallel
        hooks run."""
        self.micro, self.pass_key = micro, key
        self.hooks.start_layer(piece)
        if start:
            deps = [*deps, *self.dp.before_forward(ch.chunk, li, layer, micro, first,
                                                   after=self.layer_start)]
        span = emit_forward(self.ol, piece, self.layer_cfg(ch, li), micro, deps, self.hooks)
        if start:
            self.layer_start = span.first
        if end:
            self.dp.after_forward(ch.chunk, li, layer, span.last)
        return span

    def backward_layer(self, ch: Chunk, li: int, layer, micro: int, last_micro: bool, deps,
                       key: str | None = None):
        """Layer ``li`` of ``ch`` backward, input and weight gradients."""
        return self.backward_piece(ch, li, layer, layer, micro, deps, start=True,
                                   last_micro=last_micro, key=key)

    def backward_piece(self, ch: Chunk, li: int, layer, piece, micro: int, deps, *,
                       start: bool = False, last_micro: bool | None = None,
                       key: str | None = "B"):
        """``piece`` backward (as :meth:`forward_piece`); ``last_micro`` given (True or
        False) on the layer's last piece, which holds its gradients."""
        self.micro, self.pass_key = micro, key
        self.hooks.start_layer(piece)
        if start:
            deps = [*deps, *self.dp.before_backward(ch.chunk, li, layer, micro,
                                                    after=self.layer_start)]
        end = last_micro is not None
        span = emit_backward(self.ol, piece, self.layer_cfg(ch, li), micro, deps,
                             grad_bytes=self.dp.grad_bytes(ch.chunk, li, layer) if end else 0,
                             hooks=self.hooks)
        if start:
            self.layer_start = span.first
        if end:
            self.dp.after_backward(ch.chunk, li, layer, span.last, micro, last_micro)
        return span

    def combined(self, a, first: bool, last_micro: bool) -> None:
        """A combined forward + backward pass (:mod:`.a2a_overlap`)."""
        emit_combined(self, self.chunks[a.f.chunk], a.f.micro, self.chunks[a.b.chunk],
                      a.b.micro, first, last_micro)

    def forward(self, ch: Chunk, micro: int, first: bool) -> int | None:
        deps: list = list(self.barrier)
        if ch.stage > 0 and not self.lockstep:
            deps = [self.recv_input(ch, micro)]
        start = None
        for li, layer in enumerate(ch.layers):
            span = self.forward_layer(ch, li, layer, micro, first, deps)
            start = span.first if start is None else start
            last = span.last
            deps = []
        self.prev_start = start
        if self.lockstep:
            self.pass_end = (last, *self.hooks.flush())
            if ch.last:
                return None
            return self._p2p("send", ch.stage + 1, self.out_bytes(ch.stage),
                             f"F.m{micro}.s{ch.stage + 1}", self.pass_end)
        self.send_output(ch, micro, last)
        return None

    def backward(self, ch: Chunk, micro: int, split: bool, last_micro: bool) -> int | None:
        deps: list = list(self.barrier)
        if not ch.last and not self.lockstep:
            deps = [self.recv_grad(ch, micro)]
        start = None
        for li in reversed(range(len(ch.layers))):
            layer = ch.layers[li]
            if split:
                span = self.backward_piece(ch, li, layer, input_grad_view(layer), micro,
                                           deps, start=True, key=None)
                self.ol.alloc(span.last, kept_for_w(layer))
            else:
                span = self.backward_layer(ch, li, layer, micro, last_micro, deps)
            last = span.last
            start = span.first if start is None else start
            deps = []
        self.prev_start = start
        if self.lockstep:
            self.pass_end = (last, *self.hooks.flush())
            if ch.stage == 0:
                return None
            return self._p2p("send", ch.stage - 1, self.out_bytes(ch.stage - 1),
                             f"B.m{micro}.s{ch.stage - 1}", self.pass_end)
        self.send_grad(ch, micro, last)
        return None

    def weight_pass(self, ch: Chunk, micro: int, last_micro: bool) -> None:
        start = None
        for li in reversed(range(len(ch.layers))):
            layer = ch.layers[li]
            self.hooks.start_layer(layer)
            span = emit_backward(self.ol, weight_grad_view(layer), self.cfg, micro,
                                 grad_bytes=self.dp.grad_bytes(ch.chunk, li, layer),
                                 hooks=self.hooks)
            self.dp.after_backward(ch.chunk, li, layer, span.last, micro, last_micro)
            start = span.first if start is None else start
        self.prev_start = start

    def run(self, actions, steps: list[list[Action | None]] | None = None) -> None:
        """Issue ``actions`` (this rank's passes in order); ``steps`` (lockstep): every
        rank's table of time steps, whose row for this rank holds the same passes."""
        split = self.plan.schedule in SPLIT_W
        closing = "W" if split else "B"
        last_of, first_of = {}, {}
        for i, a in enumerate(actions):
            if a.kind in (closing, "FB"):
                last_of[a.b.chunk if a.kind == "FB" else a.chunk] = i
            if a.kind in ("F", "FB"):
                first_of.setdefault(a.f.chunk if a.kind == "FB" else a.chunk, i)
        self.dp.start_params()
        issued = iter(range(len(actions)))
        for t, step in enumerate(steps[self.rank] if steps else actions):
            sent = None
            if step is not None:
                i, a = next(issued), step
                self.micro = a.micro
                ch = self.chunks[a.f.chunk if a.kind == "FB" else a.chunk]
                if a.kind == "FB":
                    self.combined(a, i == first_of[a.f.chunk], i == last_of[a.b.chunk])
                elif a.kind == "F":
                    sent = self.forward(ch, a.micro, i == first_of[a.chunk])
                elif a.kind == "B":
                    sent = self.backward(ch, a.micro, split, i == last_of[a.chunk])
                else:
                    self.weight_pass(ch, a.micro, i == last_of[a.chunk])
            if steps:
                self._step_exchange(steps, t, sent)
        last = self.ol.last_on("compute")
        if self.tied:
            size = tied.copy_params(self.model, self.plan) * self.cfg.grad_reduce_bytes()
            self.collective("all_reduce", "dp", tied.COMM, size, (last,),
                            "all_reduce.embedding_grads", "backward", self.micro, shared=True)
        ends = self.dp.finish(last, self.micro)
        opt = emit_optimizer(self.ol, self.cfg, self.dp.optimizer_params(),
                             deps=(last, *ends, *self.hooks.flush()),
                             fp8_recipe=self.fp8_recipe)
        self.dp.after_optimizer(opt, self.micro)

    def _step_exchange(self, steps: list[list[Action | None]], t: int, sent: int | None) -> None:
        """Lockstep: the receives of what the neighbouring ranks ran in time step ``t``
        (a forward into a stage this rank holds, a backward out of one), posted with this
        rank's send after its pass; the next pass waits for them all."""
        posted = [sent] if sent is not None else []
        after = self.pass_end or self.barrier
        last_stage = self.plan.pp * self.plan.vp - 1
        for other in sorted({(self.rank - 1) % self.plan.pp, (self.rank + 1) % self.plan.pp}
                            - {self.rank}):
            a = steps[other][t] if t < len(steps[other]) else None
            if a is None:
                continue
            stage = self.all_chunks[(other, a.chunk)].stage
            into = stage + 1 if a.kind == "F" else stage - 1
            if not 0 <= into <= last_stage or neighbour(self.plan, into, 0).rank != self.rank:
                continue
            self.micro = a.micro
            size = self.out_bytes(min(stage, into))
            posted.append(self._p2p("recv", stage, size, f"{a.kind}.m{a.micro}.s{into}",
                                    after))
        self.pass_end = ()
        self.barrier = tuple(posted) or after


def fp8_tp_gathers(plan: ParallelPlan, cfg: CommonConfig, fp8_recipe: str | None) -> bool:
    """Whether the plan's sequence-parallel all-gathers move FP8 activations, cast before
    the gather (the strategy's :meth:`~simulator.strategies.base.CommonConfig.fp8_tp_gathers`
    under ``fp8_recipe``)."""
    return plan.tp > 1 and plan.sequence_parallel and cfg.fp8_tp_gathers(fp8_recipe)


def stage_id(rank: int, pp: int) -> str:
    """The rank class of pipeline rank ``rank``: ``stage0``..., zero-padded to the width of
    ``pp - 1`` so that the classes sort in pipeline order (``stage03`` before ``stage10``)."""
    return f"stage{rank:0{len(str(pp - 1))}d}"


def parallel_layers(model: ModelSpec, plan: ParallelPlan, *, micro_batch: int, seq_len: int,
                    precision: str, flash: bool, autocast: bool = False,
                    compile: bool = False, elementwise: str = "fused") -> list[LayerCost]:
    """Per-layer costs on one rank of the plan (TP/SP/CP shapes; ``compile``: torch.compile's
    fusions, :mod:`simulator.models.fusion`; ``elementwise``: :mod:`simulator.models.eager`)."""
    return layer_costs(model, micro_batch, seq_len, precision, flash, autocast, compile,
                       tp=plan.tp, sp=plan.sequence_parallel and plan.tp > 1, cp=plan.cp,
                       elementwise=elementwise)


def build_parallel(model: ModelSpec, plan: ParallelPlan, cfg: CommonConfig, world: World, *,
                   seq_len: int, flash: bool = True, autocast: bool = False,
                   tokens_per_sample: float = 0, model_flops_per_sample: float | None = None,
                   layers: list[LayerCost] | None = None, check: bool = True,
                   compile: bool = False, fp8_recipe: str | None = None,
                   elementwise: str = "fused") -> Trace:
    """The Trace of one iteration of ``model`` under ``plan`` (see the module doc).
    ``cfg.micro_batch`` is per micro-batch and DP rank, ``cfg.grad_accum`` the micro-batches
    per pipeline per step. ``fp8_recipe`` (a training precision of fp8): the blocks' Linear
    GEMMs in FP8 with that recipe's casts (:mod:`simulator.models.fp8`), the expert GEMMs
    of an EP block included; ``nvfp4`` (a training precision of fp4): in NVFP4 with its
    quantize kernels (:mod:`simulator.models.nvfp4`)."""
    if check:
        plan.check(model, world.world_size, seq_len=seq_len)
    layers = layers or planned_layers(
        parallel_layers(model, plan, micro_batch=cfg.micro_batch, seq_len=seq_len,
                        precision=cfg.precision, flash=flash, autocast=autocast,
                        compile=compile, elementwise=elementwise),
        model, plan, cfg, seq_len=seq_len, flash=flash, autocast=autocast,
        gpus_per_node=world.gpus_per_node)
    if fp8_recipe is not None:
        reuse = cfg.fp8_weight_reuse(fp8_recipe)
        fp8_gathers = fp8_tp_gathers(plan, cfg, fp8_recipe)
        fp8_weights = cfg.fp8_weight_gathers(fp8_recipe, plan)
        layers = [nvfp4_layer(layer, reuse) if fp8_recipe == NVFP4 else
                  fp8_layer(layer, fp8_recipe, reuse, model.fp8_any_layout,
                            gathered_input(layer.kind) if fp8_gathers else None, plan.tp,
                            dp_fp8_weights=fp8_weights)
                  for layer in layers]
    if plan.async_tp and plan.tp > 1:     # PyTorch async TP's reduction kernels
        layers = [async_tp_layer(layer, plan.tp, precision_bytes(cfg.precision))
                  for layer in layers]
    layers = cfg.with_main_grad(layers)     # Megatron's main_grad buffer
    if getattr(cfg, "use_transformer_engine_op_fuser", False):     # TE's fused expert MLP
        layers = [op_fused_experts(layer) for layer in layers]
    if getattr(cfg, "cross_entropy", "te") != "te":      # Megatron-Core's own loss kernels
        layers = [megatron_cross_entropy(layer, cfg.cross_entropy) for layer in layers]
    if getattr(cfg, "cuda_graphs", False):     # Megatron's cuda_graph_impl, its scope's layers
        scope = getattr(cfg, "cuda_graph_scope", [])
        layers = [graphed(layer) if in_graph_scope(layer, scope) else layer for layer in layers]
    layers = tied.with_copy(layers, model, plan)
    shared = tied.tied_ranks(model, plan)
    all_chunks = chunks(layers, plan)
    tokens = cfg.micro_batch * (seq_len // plan.cp)
    act = tokens * model.hidden * precision_bytes(cfg.precision)
    steps = lockstep_steps(plan.pp, cfg.grad_accum, plan.vp) if plan.lockstep else None
    orders = [[a for a in row if a is not None] for row in steps] if steps else \
        schedule(plan.schedule, plan.pp, cfg.grad_accum, plan.vp)
    if plan.moe_a2a_overlap:
        orders = [combined_actions(row, plan.pp) for row in orders]
    classes, comms, groups_of = [], {}, {}
    attrs_pool: dict = {}       # kernels' attrs of equal content, one dict for all stages
    for p in range(plan.pp):
        mine = {c: ch for (r, c), ch in all_chunks.items() if r == p}
        b = StageBuilder(p, plan, cfg, mine, all_chunks, act_bytes=act,
                         loss_bytes=tokens * FP32, model=model, tied_ranks=shared,
                         shared_attrs=attrs_pool, fp8_recipe=fp8_recipe)
        b.run(orders[p], steps)
        classes.append(RankClass(stage_id(p, plan.pp), plan.stage_ranks(p), b.ol.ops,
                                 static_memory_bytes=b.dp.static_bytes()))
        members = set(classes[-1].ranks)
        for name in sorted(b.used):
            if name not in groups_of:
                groups_of[name] = _groups(plan, name, world)
            groups = tuple(g for g in groups_of[name] if g[0] in members)
            comms[f"{name}.s{p}"] = Communicator(f"{name}.s{p}", groups)
    if shared:
        comms[tied.COMM] = Communicator(tied.COMM, tied.groups(plan, shared))
    trace = Trace(world.world_size, classes, comms,
                  _meta(model, plan, cfg, layers, seq_len, tokens_per_sample,
                        model_flops_per_sample))
    trace.meta["placement"] = placement(plan, world)
    trace.validate()
    return trace


def _groups(plan: ParallelPlan, name: str, world: World) -> list[tuple[int, ...]]:
    """The rank groups of communicator ``name``: the mesh's (:data:`COMM_DIMS`), or the
    EP groups cut along the NVLink domains (:data:`DOMAIN_COMMS`, the flex dispatcher's)."""
    if name in DOMAIN_COMMS:
        cut = domain_groups(plan.groups("ep"), world.gpus_per_node)
        return cut.inside if name == "ep_nvl" else cut.rails
    return plan.groups(COMM_DIMS[name])


def _meta(model, plan, cfg, layers, seq_len, tokens_per_sample, flops_per_sample) -> dict:
    samples = World(plan.dp, 1)      # samples per micro-step: one micro-batch per DP rank
    if flops_per_sample is None:
        flops_per_sample = model_flops_per_sample(model, seq_len)
    meta = build_meta(layers, cfg, samples, strategy=cfg.name, model=model.name,
                      tokens_per_sample=tokens_per_sample,
                      model_flops_per_sample=flops_per_sample,
                      plan=plan.describe(), pp=plan.pp, tp=plan.tp, cp=plan.cp,
                      dp=plan.dp, vp=plan.vp, schedule=plan.schedule, dp_mode=plan.dp_mode,
                      sequence_parallel=plan.sequence_parallel)
    meta["params"] = params_total(model)
    return meta


def build_planned(layers, cfg: CommonConfig, world: World, *, spec: ModelSpec, seq_len: int,
                  flash: bool = True, autocast: bool = False, model: str = "",
                  tokens_per_sample: float = 0,
                  model_flops_per_sample: float | None = None, compile: bool = False,
                  fp8_recipe: str | None = None, elementwise: str = "fused") -> Trace:
    """The build function of a strategy whose config has ``plan(world_size)`` (and
    ``plan_fields()``, the keys its errors name): the plan checked against the model and
    the schedule, then :func:`build_parallel`. ``layers`` (full-model costs) are not used:
    the generator builds the sharded ones from ``spec``."""
    plan = cfg.plan(world.world_size)
    cfg.check_fp8(fp8_recipe)
    names = cfg.plan_fields() if hasattr(cfg, "plan_fields") else {}
    plan.check(spec, world.world_size, seq_len=seq_len, names=names)
    if hasattr(cfg, "check_model"):     # what the strategy checks against the model itself
        cfg.check_model(spec)
    check_schedule(plan.schedule, plan.pp, cfg.grad_accum, plan.vp,
                   fields={k: v for k, v in names.items()
                           if k in ("schedule", "pp", "vp", "micro_batches")})
    return build_parallel(spec, plan, cfg, world, seq_len=seq_len, flash=flash,
                          autocast=autocast, tokens_per_sample=tokens_per_sample,
                          model_flops_per_sample=model_flops_per_sample, check=False,
                          compile=compile, fp8_recipe=fp8_recipe, elementwise=elementwise)
