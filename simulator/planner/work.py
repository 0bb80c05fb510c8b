"""The work of a ``clustersim plan`` search, counted before any of it is done, and the
refusal past ``--max-work`` (docs/plan.md, "Work bound").

A unit is about a millisecond of one core (measured on the two-core development machine,
2026-12-05, llama-2-7b on the dgx-a100-superpod):

* one candidate's estimate: 1 unit, 1 more per 16,384 GPUs (0.3 ms each on 128 GPUs,
  2-5 ms on 131,072: its data-parallel groups are listed rank by rank, and the collective
  fits on them);
* a pipeline schedule the memory model walks: 1 unit per 100 slots (pp x vp x micro-batches;
  9.4 us a slot, 1f1b and interleaved 1f1b, up to 1M slots), once per distinct schedule
  (the memory model caches them);
* one replay: 500 units (0.4-0.5 s at 128 GPUs), 1 more per 10 GPUs (13 s at 131,072 GPUs),
  and its pipeline's slots as above (the largest of any candidate: which ones are replayed
  is known only after the estimates).

The bound keeps a search a user did not mean (every ``--max-*`` at its top on 16,384 nodes:
120,000 candidates and 100 replays on 131,072 GPUs; a global batch of 10^21 through a
pipeline schedule) from running for hours: it is refused at once, in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..workunits import replay_units
from .space import Candidate

MAX_WORK = 100_000              # units (about a millisecond each): about two minutes here
GPUS_PER_CANDIDATE_UNIT = 16_384
SLOTS_PER_UNIT = 100


@dataclass(frozen=True)
class Work:
    """What a search will do, and its units."""

    candidates: int
    schedule_slots: int          # distinct schedules the estimates walk, slots in all
    replays: int
    gpus: int
    replay_slots: int            # the largest pipeline schedule a replay may walk

    @property
    def units(self) -> int:
        per_replay = replay_units(self.gpus) + self.replay_slots // SLOTS_PER_UNIT
        per_candidate = 1 + self.gpus // GPUS_PER_CANDIDATE_UNIT
        return (self.candidates * per_candidate + self.schedule_slots // SLOTS_PER_UNIT
                + self.replays * per_replay)


def slots(c: Candidate) -> int:
    """Schedule slots of ``c``'s pipeline: pp x vp x micro-batches; 0 without one."""
    p = c.plan
    return p.pp * p.vp * c.micro_batches if p.pp > 1 else 0


def count(cands: list[Candidate], replay: int, gpus: int) -> Work:
    """The :class:`Work` of estimating ``cands`` and replaying ``replay`` of them."""
    schedules = {(c.plan.schedule, c.plan.pp, c.plan.vp, c.micro_batches): slots(c)
                 for c in cands if c.plan.pp > 1}
    return Work(len(cands), sum(schedules.values()), min(replay, len(cands)), gpus,
                max(schedules.values(), default=0))


def check(work: Work, most: int | None) -> None:
    """Refuse ``work`` past ``most`` units (default :data:`MAX_WORK`).

    :raises ConfigError: one line naming ``--max-work``, the count and what it is made of.
    """
    most = MAX_WORK if most is None else most
    if work.units <= most:
        return
    raise ConfigError(
        f"this search is about {work.units:,} units of work (a unit is about a millisecond): "
        f"{work.candidates:,} candidates to estimate, {work.schedule_slots:,} pipeline "
        f"schedule slots, {work.replays} replays on {work.gpus:,} GPUs; more than "
        f"{most:,} (narrow --max-tp/--max-pp/--max-cp/--max-micro-batch, lower --replay "
        f"or --global-batch, or raise --max-work)", source="--max-work")
