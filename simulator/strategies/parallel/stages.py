"""Pipeline stages: which layers each (pipeline rank, model chunk) runs.

The model's ``pp x vp`` model stages hold its blocks in order
(:meth:`ParallelPlan.model_stage_blocks`); the embedding sits on model stage 0 and the final
norm, LM head and loss on the last one, as Megatron-LM and torchtitan place them. Model
stage ``v`` runs on the pipeline rank and chunk :func:`schedules.stage_location` gives
(``chunk * pp + rank`` interleaved, a V for zbv).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.models.mtp import is_mtp

from .plan import ParallelPlan
from .schedules import Location, stage_location, virtual_stage


@dataclass(frozen=True)
class Chunk:
    """The layers of one model stage on one pipeline rank."""

    stage: int          # model stage 0 .. pp*vp-1 (0 holds the embedding)
    rank: int           # pipeline rank
    chunk: int          # model chunk on that rank
    layers: tuple       # LayerCost, in forward order
    last: bool          # the model's last stage (head and loss)


def chunks(layers, plan: ParallelPlan) -> dict[tuple[int, int], Chunk]:
    """(pipeline rank, chunk) -> :class:`Chunk` for ``layers`` (``embed``, blocks, ``head``,
    as :func:`simulator.models.layer_costs` returns them). Multi-token-prediction layers
    (:mod:`simulator.models.mtp`) go on the last stage, before the head, outside the split
    of the blocks (Megatron-Core builds them where the loss is)."""
    body = [x for x in layers if x.kind not in ("embedding", "head") and not is_mtp(x)]
    mtp = [x for x in layers if is_mtp(x)]
    pre = [x for x in layers[:1] if x.kind == "embedding"]
    post = [x for x in layers[-1:] if x.kind == "head"]
    sizes = plan.model_stage_blocks(len(body))
    out, start, n = {}, 0, len(sizes)
    for stage, size in enumerate(sizes):
        own = body[start:start + size]
        start += size
        own = (pre if stage == 0 else []) + own + (mtp + post if stage == n - 1 else [])
        at = stage_location(plan.schedule, plan.pp, plan.vp, stage)
        assert virtual_stage(plan.schedule, plan.pp, plan.vp, at.rank, at.chunk) == stage
        out[(at.rank, at.chunk)] = Chunk(stage=stage, rank=at.rank, chunk=at.chunk,
                                         layers=tuple(own), last=stage == n - 1)
    return out


def neighbour(plan: ParallelPlan, stage: int, step: int) -> Location | None:
    """Where model stage ``stage + step`` runs, None past either end."""
    other = stage + step
    if not 0 <= other < plan.pp * plan.vp:
        return None
    return stage_location(plan.schedule, plan.pp, plan.vp, other)
