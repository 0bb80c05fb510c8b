"""Analytical memory of one rank of a parallel plan: parameters, gradients, optimizer state,
activations and working buffers, per pipeline stage (:func:`rank_memory`) and for the worst
stage (:func:`peak_rank_memory`). What ``clustersim plan`` prunes with and the Selene
validation checks (``validation/parallel/``).

Model state (bytes per parameter as Megatron-LM keeps it, docs/source/api-guide/
distrib_optimizer.md: "bf16 param, fp32 grads: 18 bytes, 6 + 12/d with the distributed
optimizer"): the weights in the compute dtype (2 bytes for bf16/fp16), fp32 gradients
(Megatron's ``main_grad``; ``grad_dtype``), fp32 master weights when the weights are 16-bit
and the optimizer moments (:data:`simulator.strategies.base.OPT_MOMENT_BYTES`). A rank holds
the parameters of its stage's layers split by tensor parallelism (Megatron's column/row
split: norms and the row-parallel output biases replicated), the vocab-parallel word
embedding on the first stage and the head on the last (a tied embedding keeps a copy there
when ``pp > 1``, as Megatron does), and what :data:`SHARDED` says each ``dp_mode`` splits over
the ``dp_shard x cp`` ranks (Megatron's distributed optimizer and torchtitan's FSDP both
shard over data x context parallel ranks). An MoE block's routed experts split over ``ep``
and each over ``etp`` (:func:`block_params_per_rank`), and shard over their own
expert-data-parallel group, ``edp = tp cp dp / (etp ep)`` ranks (``dp_shard x cp / ep``
when ``etp = tp``) less the ``dp_replicate`` replicas, as the dense parameters shard over
``dp_shard x cp``.

Activations (:mod:`.activation_memory`): one layer's saved bytes per micro-batch, times the
layers of a model chunk, times the (micro-batch, chunk) activations the schedule keeps at
once on that stage (:func:`in_flight`: 1F1B holds ``pp - stage`` on stage ``stage``,
interleaved 1F1B ``pp v + pp - 1 - 2 stage`` chunks, GPipe all ``m``), plus the embedding's
mask on the first stage and the head's inputs and logits on the last.

Working buffers (``working_bytes``): one layer rebuilt by a recompute, and under FSDP the
all-gathered parameters of the unit in use and of the prefetched next one (a unit = one
block, PyTorch FSDP's ``BACKWARD_PRE`` / forward prefetch) plus that unit's unsharded
gradients before their reduce-scatter. Megatron's DDP and distributed optimizer keep the
gradients in one contiguous buffer (counted as gradients), so they add no bucket copies.

A fine-tuning (``model.finetune``, :mod:`simulator.models.finetune`): each layer's trainable
parameters and frozen weight bytes are those of the layer costs the replay runs
(:func:`finetune_weights`: :func:`~simulator.models.layer_costs` under the plan's tp, so the
adapters' counts and the frozen base's storage, 16-bit, FP8 or NF4, are the trace's).
Gradients and optimizer state follow the trainable ones only; the frozen bytes are held
whole, or under FSDP sharded like the weights, and gathered with their unit. The saved
activations of each layer change by what the fine-tuning changes in the layer costs
(the weight-gradient-only inputs no longer saved, the adapters' own; :func:`_ft_saved_delta`),
except under full recompute, which keeps the layer input only.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, replace
from typing import NamedTuple

from simulator.errors import ConfigError
from simulator.models.costs import layer_costs
from simulator.models.spec import ModelSpec
from simulator.models.moe import expert_params as moe_expert_params
from simulator.models.mamba import hybrid_layer_params
from simulator.models.moe import is_moe_layer, moe_block_params
from simulator.models.transformer import block_params, embed_params, head_params, vocab_rows
from simulator.precision import precision_bytes, storage_dtype

from ..base import MASTER_BYTES, OPT_MOMENT_BYTES
from . import activation_memory as am
from .schedules import peak_in_flight, schedule, stage_location

# which model-state parts each data-parallel mode splits over the dp_shard x cp ranks
SHARDED = {"ddp": (), "zero1": ("optimizer",), "zero2": ("optimizer", "grads"),
           "fsdp": ("optimizer", "grads", "params")}


@dataclass(frozen=True)
class RankMemory:
    """Bytes on one rank of pipeline stage ``stage``."""

    stage: int
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activations_bytes: int        # everything saved for backward, all micro-batches in flight
    layer_activations_bytes: int  # the transformer layers' part of it (Korthikanti's figures)
    working_bytes: int            # transient: recompute, FSDP gathered units
    in_flight: int                # (micro-batch, chunk) activations held at once

    @property
    def state_bytes(self) -> int:
        """Parameters, gradients and optimizer state."""
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes

    @property
    def total_bytes(self) -> int:
        return self.state_bytes + self.activations_bytes + self.working_bytes


def block_params_per_rank(model: ModelSpec, tp: int, ep: int = 1, index: int = 0,
                          etp: int | None = None) -> int:
    """Block ``index``'s parameters on one rank of its TP (and, for an MoE block, EP)
    group: :func:`~simulator.models.transformer.block_params` (Megatron's column/row
    split); an MoE block's routed experts split over ``ep`` and each over ``etp`` ranks
    (default ``tp``, Megatron-Core's), its shared experts, router and attention whole on
    the EP ranks."""
    if model.layer_pattern and not is_moe_layer(model, index):     # a hybrid's M, *, -
        return hybrid_layer_params(model, model.layer_pattern[index], tp)
    if not is_moe_layer(model, index):
        return block_params(model, tp)
    return moe_block_params(model, model.num_experts // ep, tp, etp or tp)


def _stage_blocks(model: ModelSpec, plan, stage: int) -> tuple[int, ...]:
    """The block indices on pipeline rank ``stage`` (its model stages, in chunk order)."""
    sizes = plan.model_stage_blocks(model.layers)
    return _rank_blocks(plan.schedule, plan.pp, plan.vp, tuple(sizes))[stage]


@functools.lru_cache(maxsize=1024)
def _rank_blocks(name: str, pp: int, vp: int, sizes: tuple) -> tuple[tuple[int, ...], ...]:
    """The block indices of every pipeline rank (model stages of ``sizes`` blocks), found
    once per split and schedule: ``plan`` estimates thousands of candidates, each stage of
    each, and most share a few splits."""
    out: list[list[int]] = [[] for _ in range(pp)]
    first = 0
    for v, size in enumerate(sizes):
        out[stage_location(name, pp, vp, v).rank] += range(first, first + size)
        first += size
    return tuple(tuple(blocks) for blocks in out)


def _moe_blocks(model: ModelSpec, blocks) -> int:
    """How many of ``blocks`` are MoE blocks."""
    return sum(1 for i in blocks if is_moe_layer(model, i)) if model.is_moe else 0


def _kind_params(model: ModelSpec, plan, moe: bool) -> int:
    """:func:`block_params_per_rank` of a dense block, or of an MoE block."""
    if not moe:
        return block_params(model, plan.tp)
    return moe_block_params(model, model.num_experts // plan.ep, plan.tp, plan.expert_tp)


def _blocks_params(model: ModelSpec, plan, blocks) -> int:
    """:func:`block_params_per_rank` summed over ``blocks``: a dense block's count times
    the dense blocks plus an MoE block's times the MoE blocks (the same integer sum)."""
    if model.layer_pattern:      # a hybrid: each layer by its kind
        return sum(block_params_per_rank(model, plan.tp, plan.ep, i, plan.expert_tp)
                   for i in blocks)
    moe = _moe_blocks(model, blocks)
    dense = len(blocks) - moe
    return ((dense * _kind_params(model, plan, False) if dense else 0)
            + (moe * _kind_params(model, plan, True) if moe else 0))


def head_rank(plan) -> int:
    """The pipeline rank holding the last virtual stage (and so the head): the last rank,
    or rank 0 under ZB-V, whose second chunk is the V's last stage."""
    if plan.pp == 1:
        return 0
    return stage_location(plan.schedule, plan.pp, plan.vp, plan.pp * plan.vp - 1).rank


def stage_params(model: ModelSpec, plan, stage: int) -> int:
    """Parameters on one rank of ``stage`` (before data-parallel sharding)."""
    tp = plan.tp
    n = _blocks_params(model, plan, _stage_blocks(model, plan, stage))
    if stage == 0:
        n += embed_params(model, tp)
    if stage == head_rank(plan):
        copy = model.tied_embeddings and plan.pp > 1
        n += head_params(model, tp) + (vocab_rows(model, tp) * model.hidden if copy else 0)
    return n


class StageWeights(NamedTuple):
    """One rank's weights of a pipeline stage before data-parallel sharding: the trainable
    parameters, and the frozen weights' bytes as stored (0 unless a fine-tuning)."""

    trainable: int
    frozen_bytes: int


def fine_tuned(model: ModelSpec) -> bool:
    """Whether ``model`` freezes weights or carries adapters."""
    return model.finetune is not None and not model.finetune.trains_all


@functools.lru_cache(maxsize=64)
def finetune_weights(model: ModelSpec, tp: int, precision: str) -> tuple[tuple[int, int], ...]:
    """(trainable parameters, frozen bytes) on one rank of the TP group, per layer of
    :func:`~simulator.models.layer_costs` (``embed``, the blocks, ``head``): the same
    layer costs the replay's trace is built from, so one price per fine-tuning."""
    return tuple((layer.params, layer.frozen_bytes)
                 for layer in layer_costs(model, 1, 1, precision, tp=tp))


def stage_weights(model: ModelSpec, plan, stage: int, precision: str) -> StageWeights:
    """:class:`StageWeights` of one rank of ``stage``: :func:`stage_params` all trainable
    unless ``model`` is fine-tuned (:func:`finetune_weights`)."""
    if not fine_tuned(model):
        return StageWeights(stage_params(model, plan, stage), 0)
    per = finetune_weights(model, plan.tp, storage_dtype(precision))
    picked = [per[1 + i] for i in _stage_blocks(model, plan, stage)]
    if stage == 0:
        picked.append(per[0])
    if stage == head_rank(plan):
        picked.append(per[-1])
        if model.tied_embeddings and plan.pp > 1:     # the head's copy of the table
            copy = vocab_rows(model, plan.tp) * model.hidden
            e = precision_bytes(storage_dtype(precision))
            picked.append((copy, 0) if per[0][0] else (0, copy * e))
    return StageWeights(sum(n for n, _ in picked), sum(b for _, b in picked))


def in_flight(plan, micro_batches: int, stage: int) -> int:
    """(Micro-batch, model chunk) activations stage ``stage`` holds at once under the plan's
    schedule (:func:`.schedules.peak_in_flight`); 1 without pipelining (gradient
    accumulation runs one micro-batch after another). GPipe holds every micro-batch; the
    other schedules reach their peak in the warm-up, so past :data:`STEADY` micro-batches
    per stage the count is that of ``STEADY x pp`` (no schedule of a million entries)."""
    if plan.pp == 1:
        return 1
    if plan.schedule == "gpipe":
        return micro_batches
    m = min(micro_batches, STEADY * plan.pp)
    return _peaks(plan.schedule, plan.pp, m, plan.vp)[stage]


STEADY = 4      # micro-batches per stage past every schedule's warm-up (tested)


@functools.lru_cache(maxsize=256)
def _peaks(name: str, pp: int, micro_batches: int, vp: int) -> tuple[int, ...]:
    """:func:`peak_in_flight` of every rank (one schedule built per plan, not per stage)."""
    return tuple(peak_in_flight(actions) for actions in schedule(name, pp, micro_batches, vp))


class _State(NamedTuple):
    """Model-state bytes on one rank."""

    params: int
    grads: int
    optimizer: int


class _Activations(NamedTuple):
    """Saved-activation bytes on one rank: all of them, and the transformer layers' part."""

    total: int
    layers: int


def _state(model, plan, stage, *, precision, optimizer, grad_dtype) -> _State:
    """The parameters, gradients and optimizer state on one rank of ``stage``."""
    experts = stage_expert_params(model, plan, stage)
    weights = stage_weights(model, plan, stage, precision)
    dense = weights.trainable - experts
    e = precision_bytes(storage_dtype(precision))
    per = {"params": e, "grads": precision_bytes(grad_dtype),
           "optimizer": (MASTER_BYTES if e < MASTER_BYTES else 0) + OPT_MOMENT_BYTES[optimizer]}
    # experts shard over their own data-parallel group, edp ranks (less the replicas)
    shards = (plan.dp_shard * plan.cp, max(1, plan.edp // plan.dp_replicate))
    out = {}
    for part, nbytes in per.items():
        split = part in SHARDED[plan.dp_mode]
        out[part] = sum(-(-n * nbytes // (shard if split else 1))
                        for n, shard in ((dense, shards[0]), (experts, shards[1])) if n)
    frozen_split = shards[0] if "params" in SHARDED[plan.dp_mode] else 1
    out["params"] += -(-weights.frozen_bytes // frozen_split)
    return _State(**out)


def stage_expert_params(model: ModelSpec, plan, stage: int) -> int:
    """The routed experts' parameters on one rank of ``stage``."""
    if not model.is_moe:
        return 0
    local = model.num_experts // plan.ep
    return (_moe_blocks(model, _stage_blocks(model, plan, stage))
            * (local * moe_expert_params(model) // plan.expert_tp))


def _activations(model, plan, stage, held, *, b, s, e, ac, flash,
                 precision, copies=None) -> _Activations:
    """The saved activations on one rank of ``stage`` (a fine-tuning's change added:
    :func:`_ft_saved_delta`); an MoE block's at the ``copies`` its experts keep (None:
    balanced routing)."""
    par = dict(tp=plan.tp, sp=plan.sequence_parallel, cp=plan.cp)
    blocks = _stage_blocks(model, plan, stage)
    kinds = Counter(is_moe_layer(model, i) for i in blocks) if model.is_moe else \
        ({False: len(blocks)} if blocks else {})
    stage_bytes = sum(n * am.layer_saved_bytes(model, batch=b, seq_len=s, e=e, ac=ac,
                                               flash=flash, moe=moe, etp=plan.expert_tp,
                                               copies=copies, **par)
                      for moe, n in kinds.items())
    delta = _ft_saved_delta(model, b, s, precision, flash, **par) \
        if fine_tuned(model) and ac != "full" else None
    if delta:
        stage_bytes += sum(delta[1 + i] for i in blocks)
    layers = round(held * stage_bytes / plan.vp)      # one chunk's layers per activation
    extra = 0
    if stage == 0:
        extra += -(-held // plan.vp) * (am.embedding_saved_bytes(model, batch=b, seq_len=s,
                                                                 **par)
                                        + (delta[0] if delta else 0))
    if stage == head_rank(plan):
        extra += am.head_saved_bytes(model, batch=b, seq_len=s, e=e, **par) \
            + (delta[-1] if delta else 0)
    return _Activations(total=layers + extra, layers=layers)


@functools.lru_cache(maxsize=64)
def _ft_saved_delta(model: ModelSpec, b: int, s: int, precision: str, flash: bool, *,
                    tp: int, sp: bool, cp: int) -> tuple[int, ...]:
    """Per layer (``embed``, the blocks, ``head``): the saved bytes of the fine-tuned layer
    costs less those of the same layers trained whole (the inputs only a frozen weight's
    gradient read, no longer kept; the adapters' saved tensors; nothing where no gradient
    flows), as the replay's trace has them."""
    kw = dict(tp=tp, sp=sp, cp=cp)
    tuned = layer_costs(model, b, s, precision, flash, **kw)
    whole = layer_costs(replace(model, finetune=None), b, s, precision, flash, **kw)
    return tuple(t.activation_bytes - w.activation_bytes for t, w in zip(tuned, whole))


def _largest_unit(model, plan, precision) -> int:
    """Trainable parameters of the largest FSDP unit (a block) on one rank."""
    if fine_tuned(model):
        per = finetune_weights(model, plan.tp, storage_dtype(precision))[1:1 + model.layers]
        return max(n for n, _ in per)
    moe = _moe_blocks(model, range(model.layers))
    return max(_kind_params(model, plan, kind)
               for kind, n in ((False, model.layers - moe), (True, moe)) if n)


def _working(model, plan, stage, *, b, s, e, ac, flash, grad_dtype, precision) -> int:
    par = dict(tp=plan.tp, sp=plan.sequence_parallel, cp=plan.cp)
    working = am.layer_working_bytes(model, batch=b, seq_len=s, e=e, ac=ac, flash=flash, **par)
    if plan.dp_mode == "fsdp" and plan.pp > 1 and plan.dp_shard * plan.cp > 1:
        # under a pipeline FSDP keeps the stage gathered, and its gradients unsharded, from
        # the first forward to the one reduce-scatter after the last micro-batch (.dp)
        weights = stage_weights(model, plan, stage, precision)
        working += weights.trainable * (e + precision_bytes(grad_dtype)) + weights.frozen_bytes
    elif plan.dp_mode == "fsdp" and not plan.reshard_after_forward and plan.dp_shard * plan.cp > 1:
        # kept from each block's forward to its backward (FSDP2 reshard_after_forward=False):
        # at the end of the forward every block is gathered; one unit's gradients at a time
        weights = stage_weights(model, plan, stage, precision)
        working += (weights.trainable * e + weights.frozen_bytes
                    + _largest_unit(model, plan, precision) * precision_bytes(grad_dtype))
    elif plan.dp_mode == "fsdp" and fine_tuned(model):     # a block's trainable and frozen
        per = finetune_weights(model, plan.tp, storage_dtype(precision))[1:1 + model.layers]
        working += max(2 * (n * e + frozen) + n * precision_bytes(grad_dtype)
                       for n, frozen in per)
    elif plan.dp_mode == "fsdp":
        working += _largest_unit(model, plan, precision) * (2 * e + precision_bytes(grad_dtype))
    return working


def rank_memory(model: ModelSpec, plan, *, seq_len: int, micro_batch: int,
                micro_batches: int, precision: str = "bf16", optimizer: str = "adam",
                ac: str = "none", flash: bool = False, stage: int = 0,
                grad_dtype: str = "fp32", expert_copies: float | None = None) -> RankMemory:
    """Bytes on one rank of pipeline stage ``stage`` of ``plan`` (see the module doc); an
    MoE block's activations at the ``expert_copies`` the rank's experts keep per
    micro-batch (the busiest EP rank's under uneven routing, :func:`.moe.ep_loads`; None:
    balanced routing).

    :raises ConfigError: a stage outside the plan, an unknown checkpointing mode or
        precision, a non-transformer model.
    """
    if not model.is_transformer:
        raise ConfigError(f"{model.name} is not a transformer", field="model")
    if not 0 <= stage < plan.pp:
        raise ConfigError(f"stage {stage} outside 0..{plan.pp - 1}", field="stage")
    e = precision_bytes(storage_dtype(precision))
    held = in_flight(plan, micro_batches, stage)
    act = dict(b=micro_batch, s=seq_len, e=e, ac=am.check_ac(ac), flash=flash,
               precision=storage_dtype(precision))
    state = _state(model, plan, stage, precision=precision, optimizer=optimizer,
                   grad_dtype=grad_dtype)
    saved = _activations(model, plan, stage, held, **act, copies=expert_copies)
    return RankMemory(stage=stage, params_bytes=state.params, grads_bytes=state.grads,
                      optimizer_bytes=state.optimizer, activations_bytes=saved.total,
                      layer_activations_bytes=saved.layers,
                      working_bytes=_working(model, plan, stage, grad_dtype=grad_dtype,
                                             **act),
                      in_flight=held)


def peak_rank_memory(model: ModelSpec, plan, **kw) -> RankMemory:
    """The :func:`rank_memory` of the stage with the most bytes (the first on a tie)."""
    ranks = [rank_memory(model, plan, stage=stage, **kw) for stage in range(plan.pp)]
    return max(ranks, key=lambda r: (r.total_bytes, -r.stage))


__all__ = ["RankMemory", "SHARDED", "StageWeights", "block_params_per_rank", "fine_tuned",
           "finetune_weights", "head_rank", "in_flight", "peak_rank_memory", "rank_memory",
           "stage_params", "stage_weights"]
