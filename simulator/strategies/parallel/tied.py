"""Tied word embeddings under a pipeline: Megatron-LM's embedding group.

A model whose LM head reuses the token embedding (GPT) keeps, with ``pp > 1``, a copy of
the embedding table on the rank that runs the head (``megatron/core/models/common/
language_module``: ``setup_embeddings_and_output_layer``), and after the pipeline flush
all-reduces the two copies' gradients between the first and the last stage
(``finalize_model_grads``: ``_allreduce_word_embedding_grads``), before the data-parallel
reduction and the optimizer. The copy is a parameter of the last stage (its gradient,
optimizer state and data-parallel reduction with the head's).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from simulator.models.transformer import vocab_rows

from .plan import ParallelPlan
from .schedules import stage_location

COMM = "embedding"


class TiedRanks(NamedTuple):
    """The pipeline ranks holding the embedding and the head that shares its weights."""

    embedding: int
    head: int


def tied_ranks(model, plan: ParallelPlan) -> TiedRanks | None:
    """The ranks of the embedding and of the head when they differ and share weights."""
    if not (model.tied_embeddings and plan.pp > 1):
        return None
    first = stage_location(plan.schedule, plan.pp, plan.vp, 0).rank
    last = stage_location(plan.schedule, plan.pp, plan.vp, plan.pp * plan.vp - 1).rank
    return None if first == last else TiedRanks(embedding=first, head=last)


def copy_params(model, plan: ParallelPlan) -> int:
    """Parameters of the embedding copy on one tensor-parallel rank."""
    return vocab_rows(model, plan.tp) * model.hidden


def with_copy(layers: list, model, plan: ParallelPlan) -> list:
    """``layers`` with the embedding copy added to the head's parameters."""
    if tied_ranks(model, plan) is None or layers[-1].kind != "head":
        return layers
    head = layers[-1]
    return [*layers[:-1], replace(head, params=head.params + copy_params(model, plan))]


def groups(plan: ParallelPlan, ranks: TiedRanks) -> tuple[tuple[int, ...], ...]:
    """The embedding groups: each first-stage rank with the last-stage rank at the same
    data-parallel and tensor-parallel coordinates."""
    first, last = plan.stage_ranks(ranks.embedding), plan.stage_ranks(ranks.head)
    return tuple(tuple(sorted(pair)) for pair in zip(first, last))
