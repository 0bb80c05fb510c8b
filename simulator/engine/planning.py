"""The plans of one job's collectives and sends, each planned once and cached.

A :class:`Plans` holds only the planner, the job's placement and its cache (no reference
back to the job), so what the job builds around it is freed by reference counting when it
ends. It is where a job's ranks become the cluster's GPUs: the planner lays collectives
out on GPUs, so each rank group is mapped through the placement before it is planned.
"""

from __future__ import annotations

from .placement import Placement
from .seams import CollectivePlanner


class Plans:
    """Plans of (collective, size, rank group, how) through ``coll`` (the collective model
    or another :class:`~simulator.engine.seams.CollectivePlanner`) on the GPUs ``placement``
    gives the ranks, cached by rank group."""

    def __init__(self, coll: CollectivePlanner, placement: Placement):
        self.coll, self.placement = coll, placement
        self._plans: dict = {}

    def p2p(self, size_bytes: int, pairs: list[tuple[int, int]]) -> list:
        """The send/recv plans of (sender, receiver) rank ``pairs``, those not planned yet
        at once (``plan_pairs`` of the collective model, where the planner has it)."""
        batch = getattr(self.coll, "plan_pairs", None)
        return self._batched("send_recv", size_bytes, pairs, ("auto", "auto", 0),
                             batch and (lambda new: batch(size_bytes, new)))

    def groups(self, collective: str, size_bytes: int, groups, how: tuple) -> list:
        """The plans of a communicator's rank ``groups``, those not planned yet at once
        (``plan_groups`` of the collective model, where the planner has it)."""
        batch = getattr(self.coll, "plan_groups", None)
        return self._batched(collective, size_bytes, groups, how,
                             batch and (lambda new: batch(collective, size_bytes, new, *how)))

    def _batched(self, collective: str, size_bytes: int, groups, how: tuple, batch) -> list:
        """The plans of ``groups`` (rank tuples), the ones not cached yet planned together
        by ``batch(their GPU groups)`` when there is one, else one by one."""
        keys = [(collective, size_bytes, tuple(g), how) for g in groups]
        new = [k[2] for k in dict.fromkeys(keys) if k not in self._plans]
        if new and batch is not None:
            on_gpus = [self.placement.group(g) for g in new]
            for group, plan in zip(new, batch(on_gpus)):
                self._plans[(collective, size_bytes, group, how)] = plan
        return [self._cached_plan(*k) for k in keys]

    def _cached_plan(self, collective: str, size_bytes: int, group: tuple[int, ...],
                     how: tuple):
        key = (collective, size_bytes, group, how)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self.coll.plan(
                collective, size_bytes, list(self.placement.group(group)), *how)
        return plan
