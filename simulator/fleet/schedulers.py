"""Schedulers: which waiting jobs start now, each a small function in a registry.

A scheduler is ``scheduler(ctx)``, called whenever a job arrives or ends, a node fails or
comes back. It reads ``ctx.queue`` (waiting jobs in arrival order), ``ctx.running`` and
``ctx.now``, and acts through ``ctx.start(job)`` (places the job with the placement policy
and starts it, all of its GPUs at once: gang scheduling; False where it does not fit now)
and ``ctx.preempt(job)`` (stops a running job; it waits again, from its last checkpoint).
``ctx.expected_end(job)`` is when a running job will end at its current pace and
``ctx.estimate_s(job)`` how long a waiting one would run (its time alone: exact estimates).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Context(Protocol):
    now: float
    queue: list
    running: list
    n_gpus: int

    def start(self, job) -> bool: ...

    def preempt(self, job) -> None: ...

    def expected_end(self, job) -> float: ...

    def estimate_s(self, job) -> float: ...

    def free_gpus(self) -> int: ...


def fifo(ctx: Context) -> None:
    """First come, first served: start waiting jobs in arrival order until one does not fit."""
    for job in list(ctx.queue):
        if not ctx.start(job):
            return


def reservation(ctx: Context, gpus: int) -> tuple[float, int]:
    """When ``gpus`` GPUs will be free at the latest, counting the running jobs' ends in
    order (the *shadow time*), and how many GPUs beyond ``gpus`` are free then."""
    free = ctx.free_gpus()
    if free >= gpus:
        return ctx.now, free - gpus
    for job in sorted(ctx.running, key=lambda j: (ctx.expected_end(j), j.index)):
        free += job.gpus
        if free >= gpus:
            return ctx.expected_end(job), free - gpus
    return float("inf"), 0


def easy(ctx: Context) -> None:
    """EASY backfilling: FIFO, and where the first waiting job does not fit, it gets a
    reservation at the shadow time; a later job starts now if it fits and either ends by
    then or uses only GPUs the first will not need (the extra GPUs)."""
    fifo(ctx)
    if not ctx.queue:
        return
    shadow, extra = reservation(ctx, ctx.queue[0].gpus)
    for job in list(ctx.queue[1:]):
        ends_in_time = ctx.now + ctx.estimate_s(job) <= shadow
        if not ends_in_time and job.gpus > extra:
            continue
        if ctx.start(job) and not ends_in_time:
            extra -= job.gpus


def priority(ctx: Context) -> None:
    """Highest priority first (then arrival): a job that does not fit preempts running
    jobs of lower priority (lowest first, the latest started first among equals) where
    that frees enough GPUs; otherwise it and everything behind it waits."""
    for job in sorted(ctx.queue, key=lambda j: (-j.priority, j.index)):
        if ctx.start(job):
            continue
        victims = sorted((r for r in ctx.running if r.priority < job.priority),
                         key=lambda r: (r.priority, -r.started_s, -r.index))
        if ctx.free_gpus() + sum(v.gpus for v in victims) < job.gpus:
            return
        for victim in victims:
            ctx.preempt(victim)
            if ctx.start(job):
                break
        else:
            return


SCHEDULERS: dict[str, tuple[Callable[[Context], None], str]] = {
    "fifo": (fifo, "first come, first served; the first job that does not fit blocks"),
    "easy": (easy, "EASY backfilling: later jobs start early where they do not delay the "
                   "first waiting job"),
    "priority": (priority, "highest priority first, preempting lower-priority jobs"),
}
