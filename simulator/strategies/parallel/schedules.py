"""Pipeline schedules: the order in which each pipeline rank issues its forward and backward
passes, as plain functions over (stages, micro-batches, virtual stages).

A schedule is a list per pipeline rank of :class:`Action` (``F`` forward, ``B`` backward,
``W`` weight-gradient pass) on micro-batch ``micro`` and model chunk ``chunk``. Schedules
carry no times: the trace generator turns each action into compute ops and the send/recv
between stages, and the engine's replay produces the bubble. :func:`replay_uniform` runs a
schedule on an idealised model (every pass a fixed number of time units, free
communication), which the tests compare with :func:`bubble_fraction`, the published
formulas.

* ``gpipe``: all forwards, then all backwards (Huang et al. 2019).
* ``1f1b``: PipeDream-flush (Narayanan et al. 2021): rank ``r`` runs ``pp - r - 1`` warm-up
  forwards, then alternates one forward and one backward, then drains the backwards.
* ``interleaved_1f1b``: Megatron-LM's virtual stages (Narayanan et al. 2021, arXiv
  2104.04473): ``vp`` model chunks per rank, virtual stage ``chunk * pp + rank``;
  micro-batches in groups of ``pp`` per chunk; Megatron requires the micro-batch count to
  be a multiple of ``pp``.
* ``zb_h1``: zero bubble ZB-H1 (Qi et al. 2023, arXiv 2401.10241): ``B`` computes input
  gradients only and the weight gradients ``W`` are deferred to fill the drain bubble;
  rank ``r`` postpones its first ``r`` weight passes (torch.distributed.pipelining's
  ZB1P ordering), so its peak memory equals 1F1B's first stage.
* ``zbv``: zero bubble ZB-V as torchtitan's ``ScheduleZBVZeroBubble``: two chunks per rank
  in a V (chunk 0 is stage ``rank``, chunk 1 is stage ``2 pp - 1 - rank``), warm-up, a
  steady F/B/W phase per chunk, and a cool-down that fills with deferred ``W``.

:func:`lockstep_steps` is the other way to run ``interleaved_1f1b``: torch.distributed.
pipelining's ``ScheduleInterleaved1F1B`` (torchtitan's ``Interleaved1F1B``) as a table of
time steps that every rank walks in step (``PipelineScheduleMulti._step_microbatches``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from simulator.errors import ConfigError

SCHEDULES: tuple[str, ...] = ("gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zbv")
SPLIT_W = ("zb_h1", "zbv")           # schedules whose B is input gradients only
_FIELDS = {"schedule": "strategy.schedule", "pp": "strategy.pp", "vp": "strategy.vp",
           "micro_batches": "training.grad_accum"}


@dataclass(frozen=True)
class Action:
    """One pass a pipeline rank issues.

    ``kind`` is ``"F"``, ``"B"`` (input and weight gradients; input gradients only in the
    zero-bubble schedules) or ``"W"`` (weight gradients); ``micro`` the micro-batch
    ``0..m-1``; ``chunk`` the model chunk on this rank ``0..vp-1`` (see
    :func:`virtual_stage`).
    """

    kind: str
    micro: int
    chunk: int = 0


def check_schedule(name: str, pp: int, micro_batches: int, vp: int = 1, *,
                   fields: dict[str, str] | None = None) -> None:
    """Refuse a schedule that cannot run.

    ``fields`` maps ``schedule``, ``pp``, ``vp``, ``micro_batches`` to the key the user
    wrote (a framework's spelling); the defaults are ``strategy.schedule``, ``strategy.pp``,
    ``strategy.vp`` and ``training.grad_accum``.

    Raises
    ------
    ConfigError
        Unknown name, a count below 1, ``vp`` other than 1 for a single-chunk schedule,
        fewer than 2 chunks or stages for ``interleaved_1f1b`` or micro-batches not a
        multiple of ``pp`` (Megatron's rule), ``vp`` other than 2 for ``zbv``.
    """
    where = {**_FIELDS, **(fields or {})}
    if name not in SCHEDULES:
        raise ConfigError(f"unknown pipeline schedule {name!r}; valid: {', '.join(SCHEDULES)}",
                          field=where["schedule"])
    for key, value in (("pp", pp), ("micro_batches", micro_batches), ("vp", vp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"must be an integer >= 1, got {value!r}", field=where[key])
    if name == "interleaved_1f1b":
        _check_interleaved(pp, micro_batches, vp, where)
    elif name == "zbv" and vp != 2:
        raise ConfigError(f"the zbv schedule runs exactly 2 model chunks per rank (a V), "
                          f"got {vp}", field=where["vp"])
    elif name not in ("interleaved_1f1b", "zbv") and vp != 1:
        raise ConfigError(f"the {name} schedule runs one model chunk per rank, got {vp} "
                          "(virtual stages need interleaved_1f1b or zbv)", field=where["vp"])


def _check_interleaved(pp: int, micro_batches: int, vp: int, where: dict[str, str]) -> None:
    if vp < 2:
        raise ConfigError("interleaved_1f1b needs at least 2 model chunks per rank (vp >= 2); "
                          "with one chunk use 1f1b", field=where["vp"])
    if pp < 2:
        raise ConfigError("interleaved_1f1b needs at least 2 pipeline stages", field=where["pp"])
    if micro_batches % pp:
        raise ConfigError(f"interleaved_1f1b needs the number of micro-batches to be a multiple "
                          f"of the pipeline size, as Megatron-LM requires: {micro_batches} is "
                          f"not a multiple of pp={pp}", field=where["micro_batches"])


def schedule(name: str, pp: int, micro_batches: int, vp: int = 1) -> list[list[Action]]:
    """Per pipeline rank, the actions in the order that rank issues them.

    Raises
    ------
    ConfigError
        As :func:`check_schedule`.
    """
    check_schedule(name, pp, micro_batches, vp)
    build = _BUILDERS[name]
    return [build(pp, micro_batches, vp, rank) for rank in range(pp)]


def virtual_stage(name: str, pp: int, vp: int, rank: int, chunk: int) -> int:
    """The model stage (0 = first layers) that ``chunk`` on pipeline ``rank`` holds."""
    if name == "zbv":
        return rank if chunk == 0 else 2 * pp - 1 - rank
    return chunk * pp + rank


class Location(NamedTuple):
    """Where a model stage runs: its pipeline rank and the model chunk on that rank."""

    rank: int
    chunk: int


def stage_location(name: str, pp: int, vp: int, stage: int) -> Location:
    """The rank and chunk holding model ``stage``: the inverse of :func:`virtual_stage`."""
    if name == "zbv":
        return Location(rank=stage, chunk=0) if stage < pp else \
            Location(rank=2 * pp - 1 - stage, chunk=1)
    return Location(rank=stage % pp, chunk=stage // pp)


def peak_in_flight(actions: list[Action]) -> int:
    """Most forward passes whose activations the rank holds at once.

    A forward's activations are held from its ``F`` until its backward ends: the ``W``
    where the schedule splits it (weight gradients need the saved inputs), else the ``B``.
    With several chunks the count is in chunk activations (one chunk's layers for one
    micro-batch).
    """
    split = any(a.kind == "W" for a in actions)
    release = "W" if split else "B"
    held = peak = 0
    for action in actions:
        if action.kind == "F":
            held += 1
            peak = max(peak, held)
        elif action.kind == release:
            held -= 1
    return peak


def bubble_fraction(name: str, pp: int, micro_batches: int, vp: int = 1) -> float:
    """Idle share of the step on the idealised uniform model (the published formulas).

    With a forward ``t_f``, a backward ``t_b = 2 t_f`` (split ``B = W = t_f`` in the
    zero-bubble schedules) per stage and free communication, a step of ``m`` micro-batches
    over ``p`` stages lasts ``m (t_f + t_b) + bubble``:

    * gpipe, 1f1b: bubble ``(p - 1)(t_f + t_b)``, fraction ``(p - 1) / (m + p - 1)``;
    * interleaved_1f1b: the bubble shrinks ``v`` times (Narayanan et al. 2021),
      fraction ``(p - 1) / (v m + p - 1)``;
    * zb_h1: bubble ``(p - 1)(t_f + t_b - t_w)`` (Qi et al. 2023), a third of 1F1B's,
      fraction ``(p - 1) / (3 m + p - 1)``;
    * zbv: chunks of half a stage (``t_f = t_b = t_w = 1`` per chunk, ``6 m`` per rank);
      Qi et al. 2023 (section 6) call ZB-V bubble-free, neglecting the last rank's wait for
      the ``p - 1`` upstream chunk forwards before its first pass, which no order avoids;
      with it, for ``m >= 2 p``, fraction ``(p - 1) / (6 m + p - 1)``.

    Raises
    ------
    ConfigError
        As :func:`check_schedule`.
    """
    check_schedule(name, pp, micro_batches, vp)
    p, m = pp, micro_batches
    if name == "interleaved_1f1b":
        return (p - 1) / (vp * m + p - 1)
    if name == "zb_h1":
        return (p - 1) / (3 * m + p - 1)
    if name == "zbv":
        return (p - 1) / (6 * m + p - 1)
    return (p - 1) / (m + p - 1)


def _gpipe(pp: int, m: int, vp: int, rank: int) -> list[Action]:
    return [Action("F", i) for i in range(m)] + [Action("B", i) for i in range(m)]


def _one_f_one_b(pp: int, m: int, vp: int, rank: int) -> list[Action]:
    return _zero_bubble_h1(pp, m, vp, rank, split=False)


def _zero_bubble_h1(pp: int, m: int, vp: int, rank: int, split: bool = True) -> list[Action]:
    """1F1B order; with ``split`` each B is followed by the W of the micro-batch ``rank``
    backwards earlier (the first ``rank`` W passes wait for the drain)."""
    warmup = min(pp - rank - 1, m)
    out = [Action("F", i) for i in range(warmup)]
    deferred = rank if split else 0
    for step in range(m):
        if warmup + step < m:
            out.append(Action("F", warmup + step))
        out.append(Action("B", step))
        if split and step >= deferred:
            out.append(Action("W", step - deferred))
    if split:
        out += [Action("W", i) for i in range(max(m - deferred, 0), m)]
    return out


def _interleaved(pp: int, m: int, vp: int, rank: int) -> list[Action]:
    """Megatron-LM's interleaved 1F1B: forward step ``k`` runs chunk ``(k // pp) % vp`` on
    micro-batch ``(k // (pp vp)) pp + k % pp``; backward chunks run in reverse order."""
    total = m * vp
    # Megatron runs every forward first when m == pp (no steady phase to speak of)
    warmup = total if m == pp else min((pp - rank - 1) * 2 + (vp - 1) * pp, total)

    def forward(k: int) -> Action:
        return Action("F", (k // (pp * vp)) * pp + k % pp, (k // pp) % vp)

    def backward(k: int) -> Action:
        return Action("B", (k // (pp * vp)) * pp + k % pp, vp - 1 - (k // pp) % vp)

    out = [forward(k) for k in range(warmup)]
    for k in range(total - warmup):
        out += [forward(warmup + k), backward(k)]
    return out + [backward(k) for k in range(total - warmup, total)]


def _zbv(pp: int, m: int, vp: int, rank: int) -> list[Action]:
    """torchtitan's ScheduleZBVZeroBubble order, generated for ``max(m, 2 pp - 1)``
    micro-batches (the count that fills the V) with the surplus ones dropped."""
    n = max(2 * pp - 1, m)
    nxt = {(kind, c): 0 for kind in "FBW" for c in (0, 1)}
    out: list[Action] = []

    def emit(*steps: tuple[str, int]) -> None:
        for kind, chunk in steps:
            out.append(Action(kind, nxt[kind, chunk], chunk))
            nxt[kind, chunk] += 1

    emit(*[("F", 0)] * (2 * (pp - rank) - 1))
    emit(*[("F", 1), ("F", 0)] * rank)
    emit(*[("F", 1), ("B", 1), ("W", 1)] * (pp - rank))
    while nxt["F", 1] < nxt["F", 0] or nxt["F", 0] < n:
        if nxt["F", 0] < n:
            emit(("F", 0))
        emit(("B", 0), ("W", 0), ("F", 1), ("B", 1), ("W", 1))
    emit(*[("B", 0), ("B", 1)] * rank)
    emit(*[("B", 0), ("W", 0)] * (pp - rank))
    emit(*[("W", 1)] * (nxt["B", 1] - nxt["W", 1]))
    emit(*[("W", 0)] * (nxt["B", 0] - nxt["W", 0]))
    return [a for a in out if a.micro < m]


def lockstep_steps(pp: int, micro_batches: int, vp: int) -> list[list[Action | None]]:
    """torch.distributed.pipelining's ``ScheduleInterleaved1F1B.pipeline_order``: per
    pipeline rank, one entry per time step, an :class:`Action` or None (the rank computes
    nothing in that step).

    As torch builds it (``_calculate_single_rank_operations`` and ``_get_1f1b_rank_ops``,
    torch/distributed/pipelining/schedules.py, torch 2.5-2.6; the torchtitan H100 benchmark
    ran torch 1963fc8 of 2024-12-23): rank ``r`` starts with ``r`` empty steps, runs
    ``w = (v - 1) p + 2 (p - 1 - r)`` warm-up forwards (at most ``v m``), waits empty steps
    until step ``v p + 2 (p - 1 - r)``, then alternates a forward and a backward; in the
    cool-down each backward follows an empty step. The ``k``-th forward runs chunk ``(k //
    p) mod v`` and the ``k``-th steady backward chunk ``v - 1 - ((k - w) // p) mod v``, each
    chunk's micro-batches in order. With ``m`` a multiple of ``p`` (one round per ``p``
    micro-batches: torch's ``microbatches_per_round`` is then ``p``) the actions of a rank
    are Megatron's interleaved order (:func:`schedule`) except at ``m == p``, where Megatron
    runs every forward first.

    The runtime (``PipelineScheduleMulti._step_microbatches``) walks the table in step:
    at each time step a rank runs its action, then posts its sends together with the
    receives of what its neighbouring ranks ran in the same step, and waits for all of them
    (``_batch_p2p(ops).wait()``) before the next step; the trace generator builds that
    (:mod:`.generate`).

    Raises
    ------
    ConfigError
        As :func:`check_schedule` for ``interleaved_1f1b``.
    """
    check_schedule("interleaved_1f1b", pp, micro_batches, vp)
    return [_lockstep_rank(pp, micro_batches, vp, rank) for rank in range(pp)]


def _lockstep_rank(pp: int, m: int, vp: int, rank: int) -> list[Action | None]:
    warmup = min((vp - 1) * pp + 2 * (pp - 1 - rank), m * vp)
    total = m * vp
    pad = vp * pp + 2 * (pp - 1 - rank) - (warmup + rank)
    done = {"F": [0] * vp, "B": [0] * vp}

    def next_action(kind: str, chunk: int) -> Action:
        micro = done[kind][chunk]
        done[kind][chunk] += 1
        return Action(kind, micro, chunk)

    out: list[Action | None] = [None] * rank
    for k in range(total + warmup):     # warm-up forwards, steady pairs, cool-down
        if k < warmup:
            out.append(next_action("F", (k // pp) % vp))
            if k == warmup - 1:
                out += [None] * pad
            continue
        out.append(next_action("F", (k // pp) % vp) if k < total else None)
        out.append(next_action("B", vp - 1 - ((k - warmup) // pp) % vp))
    return out


_BUILDERS = {"gpipe": _gpipe, "1f1b": _one_f_one_b, "interleaved_1f1b": _interleaved,
             "zb_h1": _zero_bubble_h1, "zbv": _zbv}
