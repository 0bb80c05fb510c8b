"""The analytical step time and memory of a candidate: what ``clustersim plan`` prunes with
before it replays the best ones.

* compute: the busiest pipeline stage's kernels for one micro-batch, timed by the
  simulator's own compute model (:class:`~simulator.compute.ComputeModel` over
  :func:`~simulator.models.layer_costs` under the candidate's tp/sp/cp and the scenario's
  compile and elementwise code; a fine-tuned model's, so frozen GEMMs have no
  weight-gradient GEMM and adapters run, as in the replay's trace), each kernel priced as
  the replay prices the op written from it (:func:`~simulator.compute.pricing.cost_time_s`)
  and slowed by rank-to-rank variability's mean factor
  (:func:`~simulator.engine.variability.expected_factor`), recompute added (full: every
  block's forward again; selective: the attention core's), times the micro-batches, then
  the optimizer step (:meth:`Estimator._optimizer_s`);
* host: the GPU waiting for the CPU's launches (:func:`launch_bound_s`, the replay's host
  stream: :mod:`simulator.strategies.host`);
* bubble: ``f / (1 - f)`` of the micro-batches' GPU time, ``f`` the schedule's published
  idle share (:func:`~simulator.strategies.parallel.schedules.bubble_fraction`); where the
  CPU paces a 1F1B pipeline of up to :data:`PIPELINE_STEPS_MAX` micro-batches, the bubble
  and the host wait together are the schedule walked through stage by stage
  (:func:`one_f_one_b_s`: each stage's CPU launches while the others' GPUs fill and drain);
* exposed communication from the collective model's alpha-beta time
  (:meth:`~simulator.collectives.model.CollectiveModel.plan`, ``predicted_s``: the time
  alone on the fabric) on the candidate's real groups: TP/SP collectives (4 per block and
  micro-batch, 2 more under full recompute) all exposed unless TP overlap is on; pipeline
  send/recv on the fill-and-drain path, ``2 (m + pp - 1)`` transfers; data-parallel
  traffic beyond the compute it hides behind (FSDP per micro-batch, DDP and the
  distributed optimizer once per step, behind one micro-batch's backward); under a
  fine-tuning (``model.finetune``) the gradients are the trainable weights' only and FSDP
  also gathers the frozen base's shards (:func:`~simulator.strategies.parallel.memory.stage_weights`);
* context parallelism's K/V traffic beyond the attention it overlaps
  (:meth:`Estimator._cp_block`);
* a mixture of experts' EP and expert-TP collectives, exposed (:meth:`Estimator._ep_block`):
  the block and the sizes are the trace generator's own
  (:func:`~simulator.strategies.parallel.ep_cp.expert_block`: the busiest EP rank's
  ``E / ep`` experts over the token copies it keeps, the all-to-all dispatcher's sizes), the
  expert gradients reduce over the expert-data-parallel group;
* memory: :func:`simulator.strategies.parallel.memory.peak_rank_memory` (Korthikanti et al. 2022).

It ranks candidates; the replay decides (``clustersim plan`` prints both).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

from ..collectives.model import CollectiveModel
from ..compute import ComputeModel
from ..compute.launch import graphed
from ..compute.pricing import cost_time_s
from ..engine.variability import class_sigma, expected_factor
from ..models import ModelSpec, layer_costs
from ..models.fp8 import fp8_gemm_weights
from ..models.mamba import in_graph_scope
from ..models.moe import is_moe_block
from ..models.ops import MainGrad, accumulated_wgrad
from ..strategies.frameworks.translate import pure_data_parallel
from ..strategies.fsdp_copies import copy_in_bytes, copy_out_bytes
from ..strategies.host import layer_dispatch_s
from ..strategies.optim import OPT_STEP_FLOPS, config_step_bytes
from ..strategies.parallel.context import (a2a_sizes, allgather_size_bytes, cp_sliced,
                                           ring_backward_blocks, ring_step_size_bytes)
from ..strategies.parallel.ep_cp import Routing, expert_block, moe_tokens
from ..strategies.parallel.memory import (StageWeights, peak_rank_memory, stage_expert_params,
                                          stage_weights)
from ..strategies.parallel.moe import (BESIDE, EP_COLLECTIVES, FLEX_COLLECTIVES, EpSizes,
                                      ep_loads)
from ..strategies.parallel.place import DomainGroups, domain_groups
from ..strategies.parallel.plan import ParallelPlan
from ..strategies.parallel.schedules import bubble_fraction, schedule
from ..precision import compute_precision, is_half, precision_bytes, storage_dtype
from .space import Candidate
from .strategy import ONLY_WHERE

_PROBE_BYTES = (1 << 20, 1 << 28)      # two sizes for a collective's alpha and beta
# Collective fits one Estimator keeps, (op, group) each: a search fits 82 on 128 GPUs
# (llama2-7b-fsdp-128gpu, the defaults) and 123 on 8,192 (--max-tp 8 --max-pp 8); past
# this the least recently used is fitted again when asked (the same numbers), so memory
# stays bounded however many groups a search lists.
FITS_KEPT = 1024
# the most micro-batches a CPU-paced 1F1B candidate's schedule is stepped through
# (one_f_one_b_s); past it the fill and drain are a small part of the step and the
# estimate adds the GPU's bubble to the CPU-paced time
PIPELINE_STEPS_MAX = 64


@dataclass(frozen=True)
class Estimate:
    """Seconds of one step on the busiest rank, by cause, and its peak memory."""

    compute_s: float
    bubble_s: float
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    memory_bytes: int
    cp_comm_s: float = 0.0
    ep_comm_s: float = 0.0
    host_s: float = 0.0      # the GPU waiting for the CPU's kernel launches

    @property
    def step_s(self) -> float:
        return (self.compute_s + self.host_s + self.bubble_s + self.tp_comm_s
                + self.pp_comm_s + self.dp_comm_s + self.cp_comm_s + self.ep_comm_s)

    def parts(self) -> dict[str, float]:
        return {"bubble": self.bubble_s, "host dispatch wait": self.host_s,
                "exposed TP traffic": self.tp_comm_s,
                "exposed CP traffic": self.cp_comm_s, "exposed EP traffic": self.ep_comm_s,
                "pipeline send/recv": self.pp_comm_s,
                "exposed DP traffic": self.dp_comm_s, "compute": self.compute_s}


class Phased(NamedTuple):
    """Seconds of a layer's forward, backward and recomputed forward."""

    forward: float
    backward: float
    recompute: float = 0.0

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.recompute


class Costed(NamedTuple):
    """One micro-batch of a layer: its kernels' GPU seconds and the CPU's seconds launching
    them."""

    gpu: Phased
    cpu: Phased


class LayerTimes(NamedTuple):
    """One micro-batch of a block, the embedding and the head (:meth:`Estimator._layer_times`);
    the block's attention (GPU); the sizes of its EP and expert-TP collectives (None
    without)."""

    block: Costed
    embed: Costed
    head: Costed
    attn: Phased
    sizes: EpSizes | None


class Span(NamedTuple):
    """GPU seconds of some kernels and the CPU's seconds launching them."""

    gpu: float
    cpu: float


def launch_bound_s(phases: Sequence[Span], m: int) -> float:
    """Seconds of ``m`` identical micro-batches of ``phases`` (in order) where the CPU
    launches every kernel and runs ahead of the GPU, and the GPU runs a phase's last kernel
    no earlier than the CPU has launched it (the replay's host stream,
    :mod:`simulator.strategies.host`): the largest of the GPU's own time and, over every
    phase's end, the CPU's time to launch up to there plus the GPU's time after it. That
    sum is linear in the micro-batch, so only the first and the last micro-batch's phase
    ends can give the largest."""
    g = sum(span.gpu for span in phases)
    c = sum(span.cpu for span in phases)
    best = m * g
    gpu_done = cpu_done = 0.0
    for span in phases:
        gpu_done += span.gpu
        cpu_done += span.cpu
        for before in {0, m - 1}:       # micro-batches launched whole before this one
            best = max(best, before * c + cpu_done + (m - 1 - before) * g + g - gpu_done)
    return best


def one_f_one_b_s(stages: Sequence[tuple[Span, Span]], m: int) -> float:
    """Seconds of a 1F1B step over ``stages`` (each stage's forward and backward of one
    micro-batch) and ``m`` micro-batches where every stage's CPU
    launches its own kernels in the schedule's order without waiting for the GPU, and a
    stage's GPU runs a phase once its input has arrived (the previous stage's forward, the
    next one's backward) and finishes it no earlier than its CPU has launched it (the
    replay's host stream, as :func:`launch_bound_s` for one stage): a stage's CPU
    launches its share of the pipeline while the others' GPUs work, so the fill and drain
    are the GPUs' and only the steady phases the slower of CPU and GPU. Each stage's order
    is the generator's (:func:`~simulator.strategies.parallel.schedules.schedule`);
    transfers take no time here (the estimate prices them apart)."""
    pp = len(stages)
    order = [[(a.kind, a.micro) for a in actions] for actions in schedule("1f1b", pp, m)]
    ends: dict[tuple[int, str, int], float] = {}
    nxt, gpu_free, cpu = [0] * pp, [0.0] * pp, [0.0] * pp
    left = 2 * m * pp
    while left:
        for s in range(pp):
            while nxt[s] < len(order[s]):
                kind, i = order[s][nxt[s]]
                dep = (s - 1, "F", i) if kind == "F" else (s + 1, "B", i)
                if kind == "B" and s == pp - 1:
                    dep = (s, "F", i)
                if 0 <= dep[0] < pp and dep not in ends:
                    break                         # its input has not arrived yet
                span = stages[s][0 if kind == "F" else 1]
                cpu[s] += span.cpu
                start = max(gpu_free[s], ends.get(dep, 0.0))
                gpu_free[s] = ends[(s, kind, i)] = max(start + span.gpu, cpu[s])
                nxt[s] += 1
                left -= 1
    return ends[(0, "B", m - 1)]


def _stage_spans(t: LayerTimes, blocks: int, ends: Sequence[Costed],
                 copy_out: float) -> tuple[Span, Span]:
    """A pipeline stage's forward and backward of one micro-batch (``t``: the candidate's
    :class:`LayerTimes`): ``blocks`` blocks with their recompute, the ``ends`` (the
    embedding, the head) it holds, FSDP2's copy-outs in the forward."""
    forward = Span(blocks * t.block.gpu.forward + sum(e.gpu.forward for e in ends) + copy_out,
                   blocks * t.block.cpu.forward + sum(e.cpu.forward for e in ends))
    backward = Span(blocks * (t.block.gpu.backward + t.block.gpu.recompute)
                    + sum(e.gpu.backward for e in ends),
                    blocks * (t.block.cpu.backward + t.block.cpu.recompute)
                    + sum(e.cpu.backward for e in ends))
    return forward, backward


class OptimizerStep(NamedTuple):
    """A stack's optimizer step per parameter: the bytes its kernels move and their FLOPs
    (:func:`simulator.strategies.optim.config_step_bytes`, ``OPT_STEP_FLOPS``)."""

    bytes: int
    flops: int


def optimizer_step(cfg, fp8_recipe: str | None = None) -> OptimizerStep:
    """:class:`OptimizerStep` of a strategy config's GPU step, as its replay emits it."""
    return OptimizerStep(config_step_bytes(cfg, fp8_recipe), OPT_STEP_FLOPS[cfg.optimizer])


class DpTime(NamedTuple):
    """Seconds of one part's data-parallel work (:meth:`Estimator._dp_part`): traffic per
    micro-batch, at the step's end and after it, and FSDP2's copy-outs per micro-batch
    (kernels on the compute stream, which the layers wait for)."""

    per_micro: float
    tail: float
    after: float
    copy_out: float = 0.0


class Estimator:
    """Estimates for one model, sequence and cluster (caches what candidates share)."""

    def __init__(self, model: ModelSpec, seq_len: int, precision: str, flash: bool,
                 collectives: CollectiveModel, compute: ComputeModel,
                 fp8_recipes: dict[str, str] | None = None,
                 stacks: dict[str, ComputeModel] | None = None,
                 stack_of: Callable[[Candidate], str] | None = None,
                 main_grads: dict[str, MainGrad] | None = None,
                 fp8_params: frozenset[str] = frozenset(),
                 host_modes: dict[str, str] | None = None,
                 graphs: dict[str, list[str]] | None = None,
                 sigmas: dict[str, float] | None = None, compile: bool = False,
                 elementwise: str = "fused",
                 optimizer_steps: dict[str, OptimizerStep] | None = None,
                 routings: dict[str, Routing] | None = None,
                 flex: frozenset[str] = frozenset(), gpus_per_node: int = 0):
        self.model, self.seq_len, self.precision, self.flash = model, seq_len, precision, flash
        # each stack's optimizer step per parameter (none given: none is estimated)
        self.optimizer_steps = optimizer_steps or {}
        # how each stack's candidates route an MoE layer's tokens (the scenario's moe_load
        # and capacity factor, carried into its framework's candidates; none: balanced)
        self.routings = routings or {}
        # the stacks whose candidates dispatch tokens with Megatron-Core's flex dispatcher
        # (the scenario's moe_token_dispatcher_type, carried), over NVLink domains of
        # ``gpus_per_node`` GPUs (0: one domain holds every EP group)
        self.flex, self.gpus_per_node = flex, gpus_per_node
        # the scenario's training.compile and training.elementwise, as every replay takes them
        self.compile, self.elementwise = compile, elementwise
        self.collectives, self.compute = collectives, compute
        # the kernels of a candidate priced as its replay's software stack prices them
        # (``stack_of(c)`` names it in ``stacks``; ``compute`` for all by default)
        self.stacks = {"": compute, **(stacks or {})}
        self.stack_of = stack_of or (lambda _c: "")
        # the gradient buffer a stack's weight gradients accumulate into (Megatron's
        # main_grad, simulator.models.ops.accumulated_wgrad), as its replay's config keeps it
        self.main_grads = main_grads or {}
        # the stacks whose candidates hold the blocks' GEMM weights as FP8 parameters (the
        # scenario's Megatron fp8_param_gather, carried into its candidates): one byte each
        self.fp8_params = fp8_params
        # each stack's strategy.host_dispatch (eager where none is given: every PyTorch
        # strategy's default), the CPU's launches the GPU waits for
        self.host_modes = host_modes or {}
        # the stacks whose candidates launch their blocks from CUDA graphs (Megatron's
        # cuda_graph_impl, carried from the scenario), each with its cuda_graph_scope
        self.graphs = graphs or {}
        # rank-to-rank variability's sigmas (simulation.variability; None: the ideal machine)
        self.sigmas = sigmas or {}
        self._fp8_block = functools.lru_cache(maxsize=None)(self._fp8_weights)
        # an FP8 step runs its GEMMs in FP8 (the layer costs' recipe, per stack: each
        # framework's candidates at the recipe their replay runs) and keeps its weights,
        # activations and the rest in bf16, as the replay's strategy config does
        self.fp8_recipes = fp8_recipes or {}
        self.kept = compute_precision(precision)
        self.e = precision_bytes(storage_dtype(self.kept))
        self._layer_s = functools.lru_cache(maxsize=None)(self._layer_times)
        # the layers, kept apart from their times (which also depend on the tied ranks)
        self._stack_layers = functools.lru_cache(maxsize=None)(self._replayed_layers)
        self._stage0 = functools.lru_cache(maxsize=None)(self._stage0_weights)
        self._fit = functools.lru_cache(maxsize=FITS_KEPT)(self._alpha_beta)
        self._copies = functools.lru_cache(maxsize=None)(self._busiest_copies)

    def estimate(self, c: Candidate) -> Estimate:
        p, m = c.plan, c.micro_batches
        stack = self.stack_of(c)
        cut = self._flex_cut(p, stack)
        t = self._layer_s(c.micro_batch, p.tp, p.sequence_parallel, p.cp, c.ac, stack, p.ep,
                          self.autocasts(c), self.tied(c), p.cp_mode,
                          None if cut is None else cut.domains)
        blocks = max(p.stage_layers(self.model.layers))
        # the embedding and the head: on one rank without a pipeline, else the heavier on
        # its stage
        ends = [t.embed, t.head]
        if p.pp > 1:
            ends = [max(ends, key=lambda end: end.gpu.total)]
        dp = self._dp_parts(c)
        copy_out = sum(part.copy_out for part in dp)
        forward, backward = _stage_spans(t, blocks, ends, copy_out)
        gpu = m * (forward.gpu + backward.gpu)          # the micro-batches' kernels
        host = max(0.0, launch_bound_s((forward, backward), m) - gpu)
        bubble = 0.0
        if p.pp > 1:
            f = bubble_fraction(p.schedule, p.pp, m, p.vp)
            bubble = gpu * f / (1 - f)          # GPU time: the CPU launches meanwhile
            if host > 0 and p.schedule == "1f1b" and m <= PIPELINE_STEPS_MAX:
                # the CPU paces the stages: it launches while the other stages' GPUs
                # fill and drain the pipeline (one_f_one_b_s), not on top of the bubble
                piped = one_f_one_b_s(
                    [_stage_spans(t, n, [t.embed] * (s == 0) + [t.head] * (s == p.pp - 1),
                                  copy_out)
                     for s, n in enumerate(p.stage_layers(self.model.layers))], m)
                host = max(0.0, piped - gpu - bubble)
                bubble = piped - gpu - host
        layers_s = forward.gpu + backward.gpu - copy_out     # what hides DP traffic
        return Estimate(gpu + self._optimizer_s(c), bubble, self._tp(c, blocks), self._pp(c),
                        self._dp(c, dp, layers_s, blocks * t.block.gpu.backward),
                        self._memory(c),
                        m * blocks * self._cp_block(c, t.attn.forward, t.attn.backward),
                        m * blocks * self._ep_block(c, t.sizes, cut), host)

    def _optimizer_s(self, c: Candidate) -> float:
        """The optimizer step over a rank's parameters, as the replay's
        (:func:`simulator.strategies.optim.emit_optimizer`): a memory-bound kernel moving the
        stack's step bytes per parameter, over stage 0's trainable parameters on the rank,
        sharded over the data-parallel group by the distributed optimizer, over the shard
        group by FSDP or ZeRO-2 (the routed experts over their expert-data-parallel group),
        whole under DDP."""
        step = self.optimizer_steps.get(self.stack_of(c))
        if step is None:
            return 0.0
        p = c.plan
        weights, experts = self._stage0(p)
        params = trainable = weights.trainable
        if p.dp_mode != "ddp":
            shard = p.dp * p.cp if p.dp_mode == "zero1" else p.dp_shard * p.cp
            params = (trainable - experts) / shard + experts / p.edp
        seconds = self.stacks[self.stack_of(c)].op_time_s(
            "optimizer", params * step.flops, params * step.bytes, self.kept)
        return seconds * expected_factor(class_sigma(self.sigmas, "optimizer"), self.tied(c))

    def _stage0_weights(self, p: ParallelPlan) -> tuple[StageWeights, int]:
        """(the weights of a stage-0 rank, the routed experts' parameters of them kept apart
        where ``p.experts_apart``, else 0)."""
        return (stage_weights(self.model, p, 0, self.kept),
                stage_expert_params(self.model, p, 0) if p.experts_apart else 0)

    def tied(self, c: Candidate) -> int:
        """The ranks a rank of ``c`` waits for through its collectives: its pipeline stage's
        (every data-, tensor-, context- and expert-parallel group lies inside a stage), as
        the replay's variability ties its rank class
        (:func:`simulator.engine.variability.tied_ranks`)."""
        return c.plan.size // c.plan.pp

    # -------------------------------------------------------------------- compute
    def _op_s(self, ops, stack: str, tied: int) -> float:
        """GPU seconds of ``ops`` under ``stack``'s prices, as the replay prices the ops
        written from them (:func:`~simulator.compute.pricing.cost_time_s`: by shape and
        launch), each slowed by its class's mean rank-to-rank factor on a rank tied to
        ``tied`` ranks (:func:`~simulator.engine.variability.expected_factor`)."""
        compute = self.stacks[stack]
        return sum(cost_time_s(compute, o, self.kept)
                   * expected_factor(class_sigma(self.sigmas, o.op_class), tied) for o in ops)

    def _dispatch_s(self, layer, ops, phase: str, stack: str) -> float:
        """CPU seconds of launching ``ops`` of ``layer`` in ``phase`` under ``stack``'s
        ``host_dispatch`` mode (eager where none is given), as the replay's host stream
        spends them (:func:`~simulator.strategies.host.layer_dispatch_s`)."""
        return layer_dispatch_s(layer.kind, ops, self.host_modes.get(stack, "eager"), phase)

    def autocasts(self, c: Candidate) -> bool:
        """Whether ``c``'s replay runs 16-bit kernels on fp32 weights under torch.autocast,
        casting each weight: DDP without model parallelism, which plan spells as torchtitan's
        or PyTorch's (:func:`.strategy.strategy_of`; torchtitan's autocasts there as PyTorch
        DDP does, :func:`simulator.strategies.frameworks.torchtitan.torchtitan`)."""
        return (c.plan.dp_mode == "ddp" and pure_data_parallel(c.plan)
                and is_half(self.precision))

    def _layer_times(self, mb: int, tp: int, sp: bool, cp: int, ac: str, stack: str = "",
                     ep: int = 1, autocast: bool = False, tied: int = 1,
                     cp_mode: str = "ring", domains: int | None = None) -> LayerTimes:
        """One micro-batch of the block, the embedding and the head under ``stack``'s kernel
        prices (with ``autocast``'s casts) on a rank tied to ``tied`` others, as the stack's
        replay runs them (:meth:`_replayed_layers`): GPU seconds (:meth:`_op_s`) and the
        CPU's seconds launching them (:meth:`_dispatch_s`); the block's attention; the
        sizes of its EP and expert-TP collectives (None without). The block is an MoE one
        where the model has any, as the busiest EP rank runs it under ``ep`` and expert TP
        (``etp = tp``), with the flex dispatcher over ``domains`` NVLink domains where the
        stack runs it (None: the all-to-all dispatcher)."""
        embed_layer, block, head_layer, sizes = self._stack_layers(mb, tp, sp, cp, ep, stack,
                                                                   autocast, cp_mode, domains)
        recomputed = {"none": (), "full": block.forward,
                      "selective": tuple(o for o in block.forward
                                         if o.op_class == "attention")}[ac]

        def costed(layer, again=()):
            passes = ((layer.forward, "forward"), (layer.backward, "backward"),
                      (again, "recompute"))
            return Costed(Phased(*(self._op_s(ops, stack, tied) for ops, _ in passes)),
                          Phased(*(self._dispatch_s(layer, ops, phase, stack)
                                   for ops, phase in passes)))
        attention = [tuple(o for o in ops if o.op_class == "attention")
                     for ops in (block.forward, block.backward)]
        return LayerTimes(costed(block, recomputed), costed(embed_layer), costed(head_layer),
                          Phased(*(self._op_s(ops, stack, tied) for ops in attention)), sizes)

    def _replayed_layers(self, mb: int, tp: int, sp: bool, cp: int, ep: int, stack: str,
                         autocast: bool, cp_mode: str = "ring", domains: int | None = None):
        """(the embedding, the block, the head, the block's EP sizes or None) as ``stack``'s
        replay runs them: :meth:`_priced_block`'s, the block's attention as context
        parallelism ``cp_mode`` runs it (:func:`~simulator.strategies.parallel.context.
        cp_sliced`), their weight gradients into the stack's gradient buffer (Megatron's
        main_grad), the block launched from the stack's CUDA graphs where it has them
        (:func:`~simulator.compute.launch.graphed`)."""
        layers, block, sizes = self._priced_block(mb, tp, sp, cp, ep, stack, autocast,
                                                  domains)
        block = cp_sliced(block, cp, cp_mode,
                          allgather_size_bytes(self.model, mb, self.seq_len, self.e, tp))
        embed_layer, head_layer = layers[0], layers[-1]
        main_grad = self.main_grads.get(stack)
        if main_grad is not None:
            block, embed_layer, head_layer = (accumulated_wgrad(x, main_grad, self.e)
                                              for x in (block, embed_layer, head_layer))
        if stack in self.graphs and in_graph_scope(block, self.graphs[stack]):
            block = graphed(block)
        return embed_layer, block, head_layer, sizes

    # -------------------------------------------------------------- communication
    def _alpha_beta(self, op: str, ranks: tuple[int, ...]) -> tuple[float, float]:
        """(seconds, seconds per byte) of ``op`` on ``ranks`` from two probe sizes."""
        small, big = (self.collectives.plan(op, size, list(ranks)).predicted_s
                      for size in _PROBE_BYTES)
        beta = max(big - small, 0.0) / (_PROBE_BYTES[1] - _PROBE_BYTES[0])
        return small - beta * _PROBE_BYTES[0], beta

    def _time(self, op: str, size: float, ranks: tuple[int, ...]) -> float:
        if len(ranks) < 2 or size <= 0:
            return 0.0
        alpha, beta = self._fit(op, ranks)
        return alpha + beta * size

    def _tp(self, c: Candidate, blocks: int) -> float:
        p = c.plan
        if p.tp == 1 or p.tp_overlap:
            return 0.0
        size = c.micro_batch * (self.seq_len // p.cp) * self.model.hidden * self.e
        group = group_ranks(p, "tp")
        if p.sequence_parallel:
            one = (self._time("all_gather", size, group)
                   + self._time("reduce_scatter", size, group)) / 2
        else:
            one = self._time("all_reduce", size, group)
        per_block = (6 if c.ac == "full" else 4) * one
        return c.micro_batches * blocks * per_block

    def _cp_block(self, c: Candidate, attn_fwd_s: float, attn_bwd_s: float) -> float:
        """Exposed K/V traffic of one block and micro-batch (``simulator/strategies/parallel/context.py``):
        ring: ``cp - 1`` block exchanges forward, each behind a ``1 / cp`` share of the
        attention, and ``cp`` backward, each behind a share of the attention's backward (the
        K/V block first, the K/V block with the dK/dV so far in between, the dK/dV home
        last: :func:`~simulator.strategies.parallel.context.ring_backward_blocks`), each
        exchange the all-gather the replay stands it for
        (:func:`~simulator.strategies.parallel.context.ring_step_size_bytes`); allgather:
        an all-gather of the whole sequence's K/V and a reduce-scatter of their gradients,
        not hidden; a2a: all-to-alls of Q, K, V, O forward (again when the attention is
        recomputed) and of dO, dQ, dK, dV backward, not hidden."""
        p = c.plan
        if p.cp == 1:
            return 0.0
        width = self.model.kv_heads // p.tp * self.model.head_dim
        kv = 2 * c.micro_batch * (self.seq_len // p.cp) * width * self.e
        group = group_ranks(p, "cp")
        if p.cp_mode == "a2a":
            z = a2a_sizes(self.model, c.micro_batch, self.seq_len, p.cp, self.e, p.tp)
            passes = 2 if c.ac == "none" else 3
            return passes * sum(self._time("all_to_all", size, group)
                                for size in (z.q, z.kv, z.kv, z.o))
        if p.cp_mode == "allgather":
            return (self._time("all_gather", kv * p.cp, group)
                    + self._time("reduce_scatter", kv * p.cp, group))

        def exchange(blocks: int) -> float:
            return self._time("all_gather", ring_step_size_bytes(blocks * kv, p.cp), group)
        fwd = (p.cp - 1) * max(0.0, exchange(1) - attn_fwd_s / p.cp)
        bwd = sum(max(0.0, exchange(ring_backward_blocks(i, p.cp)) - attn_bwd_s / p.cp)
                  for i in range(p.cp))
        return fwd + bwd

    def _flex_cut(self, p: ParallelPlan, stack: str) -> DomainGroups | None:
        """``p``'s EP groups cut along the NVLink domains where ``stack``'s candidates run
        the flex dispatcher, as the trace generator cuts them
        (:func:`~simulator.strategies.parallel.place.domain_groups`; one domain of every
        rank with no domain size known), else None.

        :raises ConfigError: groups that span their domains unevenly (not modelled)."""
        if stack not in self.flex or p.ep == 1:
            return None
        return domain_groups(p.groups("ep"), self.gpus_per_node or p.size)

    def _ep_block(self, c: Candidate, sizes: EpSizes | None,
                  cut: DomainGroups | None = None) -> float:
        """Exposed EP and expert-TP traffic of one MoE block and micro-batch: each
        collective of the all-to-all dispatcher (:data:`~simulator.strategies.parallel.moe.EP_COLLECTIVES`:
        the count all-gather, the token all-to-alls for dispatch and combine, the
        probabilities' all-to-all, the expert-TP all-gather and reduce-scatter; forward, and
        again under full recompute, and backward), at its size in ``sizes``, on rank 0's EP
        or expert-TP group, not hidden (Megatron-LM without the a2a overlap: the experts
        wait for their tokens). Under the flex dispatcher (``cut``: the EP groups along the
        NVLink domains, :meth:`_flex_cut`) its collectives (:data:`~simulator.strategies.parallel.moe.FLEX_COLLECTIVES`): each token
        all-to-all as two run side by side, the one across the domains (on rank 0's rail)
        and the one inside a domain (on its ranks there), the slower of the two exposed."""
        if sizes is None:
            return 0.0
        p = c.plan
        groups = {comm: p.groups(comm)[0] for comm in ("ep", "etp")}
        rows = EP_COLLECTIVES
        if cut is not None:
            groups.update(ep_nvl=cut.inside[0], ep_rail=cut.rails[0])
            rows = FLEX_COLLECTIVES
        passes = {"forward": 2 if c.ac == "full" else 1, "backward": 1}
        total = beside = 0.0
        for row in rows:
            seconds = passes[row.phase] * self._time(row.kind, getattr(sizes, row.size),
                                                     groups[row.comm])
            if row.size in BESIDE:          # issued beside the next one, the carrier
                beside = seconds
                continue
            total += max(seconds, beside)
            beside = 0.0
        return total

    def _pp(self, c: Candidate) -> float:
        p = c.plan
        if p.pp == 1:
            return 0.0
        size = c.micro_batch * (self.seq_len // p.cp) * self.model.hidden * self.e
        size /= p.tp if p.sequence_parallel else 1
        stride = plan_strides(p)["pp"]
        one = self._time("send_recv", size, (0, stride))
        return 2 * (c.micro_batches + p.pp - 1) * p.vp * one

    def _dp(self, c: Candidate, parts: list[DpTime], micro_s: float,
            backward_s: float) -> float:
        """Data-parallel traffic beyond what compute hides: each part's (:meth:`_dp_parts`)
        traffic per micro-batch, at the step's end (behind the backward) and after it,
        added up."""
        per_micro = sum(d.per_micro for d in parts)
        tail = sum(d.tail for d in parts)
        after = sum(d.after for d in parts)
        return (c.micro_batches * max(0.0, per_micro - micro_s)
                + max(0.0, tail - backward_s) + after)

    def _dp_parts(self, c: Candidate) -> list[DpTime]:
        """The dense parameters' data-parallel work over the data-parallel groups, and, when
        the experts are split apart (``ep`` above 1), the routed experts' over rank 0's
        expert-data-parallel group (``edp`` ranks, as Megatron keeps them in buffers of
        their own); none without data parallelism."""
        p = c.plan
        if p.dp_replicate * p.dp_shard * p.cp == 1:
            return []
        weights, experts = self._stage0(p)
        dense = (weights.trainable - experts) * self.e     # gradients: trainable weights only
        # DDP's and the distributed optimizer's gradients: the stack's gradient buffer
        # (Megatron's main_grad), else fp32 (DDP autocasts on fp32 weights)
        main_grad = self.main_grads.get(self.stack_of(c))
        grad_bytes = main_grad.bytes if main_grad is not None else 4
        parts = [self._dp_part(p, dense, weights.frozen_bytes,
                               group_ranks(p, ("dp_shard", "cp")),
                               group_ranks(p, "dp_replicate"),
                               group_ranks(p, ("dp_replicate", "dp_shard", "cp")),
                               c.micro_batches, grad_bytes)]
        if experts:
            edp = p.groups("edp")[0]
            parts.append(self._dp_part(p, experts * self.e, 0, edp, (0,), edp,
                                       c.micro_batches, grad_bytes))
        return parts

    def _dp_part(self, p: ParallelPlan, nbytes: float, frozen: float, shard, replicate,
                 every, micro_batches: int, grad_bytes: int = 4) -> DpTime:
        """The :class:`DpTime` of ``nbytes`` of trainable parameters' data-parallel traffic
        (and ``frozen`` bytes of a fine-tuning's frozen base, which FSDP gathers but nothing
        reduces): FSDP gathers and reduce-scatters on ``shard`` per micro-batch (under a
        pipeline once a step, at its end, of ``micro_batches``) and all-reduces its shard
        over ``replicate`` at the end, FSDP2 (``fsdp_copies``) with
        its copy kernels (:mod:`simulator.strategies.fsdp_copies`: a copy-out of each
        gather on the compute stream, a ``chunk_cat`` before the reduce-scatter on its
        stream, gradients reduced in the weights' dtype as the planner's replays run
        them); the distributed optimizer reduce-scatters its gradients (``grad_bytes`` an
        element) at the end and all-gathers the parameters after; DDP all-reduces its
        gradients over ``every`` at the end."""
        if p.dp_mode in ("fsdp", "zero2"):
            # FSDP under a pipeline gathers once a step and reduce-scatters after the last
            # micro-batch (torch.distributed.pipelining): that traffic at the step's end
            once = p.dp_mode == "fsdp" and p.pp > 1
            # FSDP gathers a block for its forward and again for its backward, unless it
            # keeps it in between (reshard_after_forward false)
            gathers = 2 if p.dp_mode == "fsdp" and not once and p.reshard_after_forward else 1
            gathered = nbytes + (frozen if p.dp_mode == "fsdp" else 0)
            traffic = (gathers * self._time("all_gather", gathered, shard)
                       + self._time("reduce_scatter", nbytes, shard))
            copy_out = 0.0
            if p.dp_mode == "fsdp" and p.fsdp_copies != "none" and len(shard) > 1:
                copy_out = gathers * self._copy_s(copy_out_bytes(gathered))
                traffic += self._copy_s(copy_in_bytes(nbytes / self.e, self.e, self.e,
                                                      p.fsdp_copies))
            tail = self._time("all_reduce", nbytes / len(shard), replicate)
            if once:        # one copy-out a step, spread over the micro-batches' compute
                return DpTime(per_micro=0.0, tail=traffic + tail, after=0.0,
                              copy_out=copy_out / micro_batches)
            return DpTime(per_micro=traffic, tail=tail, after=0.0, copy_out=copy_out)
        grads = nbytes / self.e * grad_bytes        # at ``grad_bytes`` an element
        if p.dp_mode == "zero1":
            return DpTime(per_micro=0.0, tail=self._time("reduce_scatter", grads, shard),
                          after=self._time("all_gather", nbytes, shard))
        return DpTime(per_micro=0.0, tail=self._time("all_reduce", grads, every), after=0.0)

    def _copy_s(self, nbytes: float) -> float:
        """A memory-bound copy kernel of ``nbytes`` (the compute model's elementwise class)."""
        return self.compute.op_time_s("elementwise", 0.0, nbytes, self.kept)

    # ----------------------------------------------------------------------- memory
    def _memory(self, c: Candidate) -> int:
        grads = "fp32" if c.plan.dp_mode in ("ddp", "zero1") else storage_dtype(self.kept)
        p = c.plan
        held = peak_rank_memory(self.model, p, seq_len=self.seq_len,
                                micro_batch=c.micro_batch, micro_batches=c.micro_batches,
                                precision=self.kept, ac=c.ac, flash=self.flash,
                                grad_dtype=grads, expert_copies=self._copies(
                                    c.micro_batch, p.tp, p.sequence_parallel, p.cp, p.ep,
                                    self.stack_of(c)))
        if (self.stack_of(c) not in self.fp8_params
                or not ONLY_WHERE["fp8_param_gather"](c.plan)):   # as strategy_of carries it
            return held.total_bytes
        # FP8 parameters: the stage's blocks' GEMM weights at one byte instead of e
        p = c.plan
        blocks = p.stage_layers(self.model.layers)[held.stage]
        return held.total_bytes - (self.e - 1) * blocks * self._fp8_block(
            p.tp, p.sequence_parallel, p.cp, p.ep, self.stack_of(c))

    def _busiest_copies(self, mb: int, tp: int, sp: bool, cp: int, ep: int,
                        stack: str) -> float | None:
        """The token copies the busiest EP rank's experts keep per micro-batch under
        ``stack``'s routing (:func:`~simulator.strategies.parallel.moe.ep_loads`, as the
        trace generator routes them); None for a dense model."""
        if not self.model.is_moe:
            return None
        routing = self.routings.get(stack, Routing())
        tokens = moe_tokens(ParallelPlan(tp=tp, cp=cp, ep=ep, sequence_parallel=sp), mb,
                            self.seq_len)
        return ep_loads(routing.model(self.model), tokens, ep, routing.load).slowest

    def _fp8_weights(self, tp: int, sp: bool, cp: int, ep: int, stack: str) -> int:
        """The FP8 GEMM weight elements of one block on one rank (the busiest EP rank's
        experts in an MoE block), as the replay's layer costs count them."""
        _, block, _ = self._priced_block(1, tp, sp, cp, ep, stack)
        return sum(fp8_gemm_weights(block).values())

    def _priced_block(self, mb: int, tp: int, sp: bool, cp: int, ep: int, stack: str,
                      autocast: bool = False, domains: int | None = None):
        """(the layer costs, the block the estimate prices, the sizes of its EP and
        expert-TP collectives or None): an MoE block where the model has any, as the
        busiest EP rank runs it under ``ep`` and expert TP (``etp = tp``), its tokens
        dispatched by the flex dispatcher over ``domains`` NVLink domains (None: the
        all-to-all dispatcher's sizes)."""
        recipe = self.fp8_recipes.get(stack)
        layers = layer_costs(self.model, mb, self.seq_len, self.precision, self.flash,
                             tp=tp, sp=sp, cp=cp, autocast=autocast, compile=self.compile,
                             elementwise=self.elementwise,
                             **({"fp8_recipe": recipe} if recipe else {}))
        blocks = [layer for layer in layers if layer.kind.endswith("block")]
        block = next((b for b in blocks if is_moe_block(b)), blocks[0])
        if not (is_moe_block(block) and (ep > 1 or tp > 1)):
            return layers, block, None
        plan = ParallelPlan(tp=tp, cp=cp, ep=ep, sequence_parallel=sp)
        routing = self.routings.get(stack, Routing())
        moe = expert_block(routing.model(self.model), plan, micro_batch=mb,
                           seq_len=self.seq_len, e=self.e, flash=self.flash,
                           load=routing.load, flex_domains=domains)
        return layers, moe.of(block), moe.sizes


def plan_strides(plan: ParallelPlan) -> dict[str, int]:
    """Rank distance between neighbours along each mesh dimension (``order`` innermost
    last: the ParallelPlan numbering)."""
    strides, s = {}, 1
    for d in reversed(plan.order):
        strides[d] = s
        s *= getattr(plan, d)
    return strides


def group_ranks(plan: ParallelPlan, dims) -> tuple[int, ...]:
    """The group of rank 0 along ``dims`` (a dimension or a tuple of them)."""
    dims = (dims,) if isinstance(dims, str) else tuple(dims)
    strides = plan_strides(plan)
    ranks = [0]
    for d in dims:
        ranks = [r + k * strides[d] for k in range(getattr(plan, d)) for r in ranks]
    return tuple(sorted(ranks))
