"""When was the host busy, and when was it waiting for a collective?

Host-run collectives (gloo, TensorFlow's collective executor) run on a pool of worker
threads that takes them in order as threads come free. Each gets a stream of its own
(:func:`lane`: the k-th collective of a process group, the same name on every rank, so the
replay matches them across ranks) and depends on the collective its recorded worker thread
ran before (:func:`after_worker`); the time the worker took to start it beyond that is kept
as a *dispatch* delay.

A thread's *leaf* events (those with no other event of the thread inside them) say what it
was doing; the merged leaves of every host thread say when the host was busy. A gap in
that coverage that a host-run collective (gloo, TensorFlow's collective executor) ends in,
and after which the host goes on promptly, is the host waiting for that collective: the
waiting is replayed as a dependency. "Promptly" means within ``WAKE_S`` or within
``WAKE_FRACTION`` of the gap: a gap that goes on long after the collective ended was
waiting for something else and stays recorded host time.
"""

from __future__ import annotations

import bisect

from .ir import Block, CommOp

WAKE_S = 200e-6          # a woken thread resumes within this (2-core machines, gloo)
WAKE_FRACTION = 0.25     # ... or within this fraction of the gap
MIN_GAP_S = 5e-6         # shorter gaps are bookkeeping between two ops, not waits


def leaves(events: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (ts, end) events of ONE thread that contain no other event of it."""
    order = sorted(events, key=lambda e: (e[0], -e[1]))
    has_child = [False] * len(order)
    stack: list[int] = []
    for i, (ts, end) in enumerate(order):
        while stack and order[stack[-1]][1] <= ts:
            stack.pop()
        if stack:
            has_child[stack[-1]] = True
        stack.append(i)
    return [e for e, child in zip(order, has_child) if not child]


def busy_intervals(threads: dict, lo: float, hi: float) -> list[tuple[float, float]]:
    """Union of the leaf events of all ``threads`` ({thread: [(ts, end), ...]}) in
    [lo, hi], as sorted disjoint intervals. Instant (zero-length) events, e.g. TensorFlow's
    ``ThreadpoolListener`` markers while a thread waits, are not busy time."""
    merged: list[list[float]] = []
    spans = sorted((max(a, lo), min(b, hi)) for evs in threads.values()
                   for a, b in leaves([e for e in evs if e[1] > e[0]])   # not instants
                   if b > lo and a < hi)
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def gaps(busy: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """Idle intervals of at least ``MIN_GAP_S`` between ``lo`` and ``hi``."""
    out, t = [], lo
    for a, b in busy:
        if a - t >= MIN_GAP_S:
            out.append((t, a))
        t = max(t, b)
    if hi - t >= MIN_GAP_S:
        out.append((t, hi))
    return out


def collective_waits(idle: list[tuple[float, float]], comms: list[CommOp]) -> list[Block]:
    """Blocks for the gaps in which the host waited for host-run collectives."""
    starts = [g[0] for g in idle]
    ending: dict[int, list[CommOp]] = {}
    for c in comms:
        if c.on_device:
            continue
        i = bisect.bisect_left(starts, c.end) - 1
        if i >= 0 and idle[i][0] < c.end <= idle[i][1]:
            ending.setdefault(i, []).append(c)
    blocks = []
    for i, cs in sorted(ending.items()):
        g0, g1 = idle[i]
        last = max(c.end for c in cs)
        if g1 - last <= max(WAKE_S, WAKE_FRACTION * (g1 - g0)):
            blocks.append(Block(g0, g1, [c.key for c in cs]))
    return blocks


def issue_time(start: float, idle: list[tuple[float, float]]) -> float:
    """When the host issued work that started at ``start``: the start itself, or, if the
    host was already idle then, the beginning of that idle gap."""
    i = bisect.bisect_right([g[0] for g in idle], start) - 1
    if i >= 0 and idle[i][0] <= start <= idle[i][1]:
        return idle[i][0]
    return start


def lane(backend: str, pg: str, k: int) -> str:
    """Stream of the ``k``-th host-run collective of process group ``pg``."""
    return f"{backend}:{pg}#{k}"


def after_worker(op: CommOp, previous: CommOp | None) -> None:
    """``op`` ran on the worker thread after ``previous``: depend on it, and keep the start
    delay that neither the host issuing it late nor the thread being busy explains."""
    free = previous.end if previous is not None else 0.0
    if previous is not None:
        op.waits_on.append(previous.key)
    op.attrs["dispatch_s"] = max(0.0, op.ts - max(op.issue_ts, free))
