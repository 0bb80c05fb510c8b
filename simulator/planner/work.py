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
* one replay: 1 unit per 10 GPUs (the cluster-wide part: 13 s at 131,072 GPUs), counted at
  once, and 1 unit per :data:`simulator.workunits.OPS_PER_UNIT` ops of its trace
  (:func:`simulator.pipeline.replayed_ops`: every rank class's ops of the micro-steps it
  replays), counted once the plans to replay are known (after the estimates) and their
  traces built, before any replay runs (:func:`simulator.workunits.counted_replay_units`).

The bound keeps a search a user did not mean (every ``--max-*`` at its top on 16,384 nodes:
120,000 candidates and 100 replays on 131,072 GPUs; a global batch of 10^21 through a
pipeline schedule) from running for hours: it is refused at once, in one line; replays past
it are refused, in one line, before the first of them runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..workunits import OPS_PER_UNIT, counted_replay_units
from .space import Candidate

MAX_WORK = 100_000              # units (about a millisecond each): about two minutes here
GPUS_PER_CANDIDATE_UNIT = 16_384
SLOTS_PER_UNIT = 100


@dataclass(frozen=True)
class Work:
    """What a search will do, as far as it is known before the estimates, and its units."""

    candidates: int
    schedule_slots: int          # distinct schedules the estimates walk, slots in all
    replays: int
    gpus: int

    @property
    def estimate_units(self) -> int:
        per_candidate = 1 + self.gpus // GPUS_PER_CANDIDATE_UNIT
        return self.candidates * per_candidate + self.schedule_slots // SLOTS_PER_UNIT

    @property
    def units(self) -> int:
        """The estimates' units and the part of each replay's known before its trace is
        built: the cluster-wide part (:func:`counted_replay_units` with no ops)."""
        return self.estimate_units + self.replays * counted_replay_units(0, self.gpus)


@dataclass(frozen=True)
class Replays:
    """The replays a search runs after its estimates, as far as their traces are built."""

    before: Work                 # the estimates
    ops: tuple[int, ...]         # each built replay's ops (simulator.pipeline.replayed_ops)
    planned: int                 # replays the search will run

    @property
    def units(self) -> int:
        return self.before.estimate_units + sum(counted_replay_units(n, self.before.gpus)
                                                for n in self.ops)


def slots(c: Candidate) -> int:
    """Schedule slots of ``c``'s pipeline: pp x vp x micro-batches; 0 without one."""
    p = c.plan
    return p.pp * p.vp * c.micro_batches if p.pp > 1 else 0


def count(cands: list[Candidate], replay: int, gpus: int) -> Work:
    """The :class:`Work` of estimating ``cands`` and replaying ``replay`` of them."""
    schedules = {(c.plan.schedule, c.plan.pp, c.plan.vp, c.micro_batches): slots(c)
                 for c in cands if c.plan.pp > 1}
    return Work(len(cands), sum(schedules.values()), min(replay, len(cands)), gpus)


def check(work: Work, most: int | None) -> None:
    """Refuse ``work`` past ``most`` units (default :data:`MAX_WORK`).

    :raises ConfigError: one line naming ``--max-work``, the count and what it is made of.
    """
    most = MAX_WORK if most is None else most
    if work.units <= most:
        return
    raise ConfigError(
        f"this search is about {work.units:,} units of work before its replays' ops are "
        f"counted (a unit is about a millisecond): {work.candidates:,} candidates to "
        f"estimate, {work.schedule_slots:,} pipeline schedule slots, {work.replays} replays "
        f"on {work.gpus:,} GPUs; more than {most:,} (narrow "
        f"--max-tp/--max-pp/--max-cp/--max-vp/--max-micro-batch, lower --replay or "
        f"--global-batch, or raise --max-work)", source="--max-work")


def check_replays(replays: Replays, most: int | None) -> None:
    """Refuse the replays counted so far past ``most`` units (default :data:`MAX_WORK`),
    with the estimates' units; called as each replay's trace is built, before any runs.

    :raises ConfigError: one line naming ``--max-work``, the ops counted and the units.
    """
    most = MAX_WORK if most is None else most
    if replays.units <= most:
        return
    n = len(replays.ops)
    which = f"{n} replays" if n == replays.planned else f"{n} of its {replays.planned} replays"
    raise ConfigError(
        f"this search's {which} run {sum(replays.ops):,} ops on {replays.before.gpus:,} GPUs "
        f"(counted in their traces, {OPS_PER_UNIT} a unit), about {replays.units:,} units of "
        f"work with the estimates (a unit is about a millisecond); more than {most:,} "
        f"(lower --replay or raise --max-work)", source="--max-work")
