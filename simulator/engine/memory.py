"""GPU memory of one rank class as a SimPy-style resource: the caching allocator near its limit.

PyTorch allocates in CPU issue order; when a cudaMalloc fails it frees its cache,
synchronises and retries, so the CPU stops running ahead until the GPU has freed memory.
The engine allocates when an op starts, so an op issued later (a prefetched all-gather) may
start first; it may do so only if it leaves room for the allocations of every op issued
before it that has not started yet (their frees come later). Otherwise it waits, in issue
order, until releases make room; the time spent so is ``wait_s``. Only when nothing left
running can free memory (the working set does not fit: the engine's simulation has run
dry) is the oldest waiter let through over capacity (:meth:`MemoryPool.admit_oldest`), and
the class is out of memory at that op (``oom_at``).

With ``capacity_bytes`` 0 there is no limit: every request is granted at once and only
the use (``timeline``, ``peak_bytes``) is recorded.
"""

from __future__ import annotations

import bisect

import simpy
from simpy.events import Event


_SUMMED = 1024      # ops apart that :meth:`MemoryPool._ahead` sums one by one


class _Fenwick:
    """Prefix sums over issue positions with point updates (allocations not made yet)."""

    def __init__(self, values: list[int]):
        # built in one pass (each node passes its sum to its parent): the same integers
        # as adding the values one by one
        tree = self.tree = [0, *values]
        n = len(tree)
        for i in range(1, n):
            parent = i + (i & -i)
            if parent < n:
                tree[parent] += tree[i]

    def add(self, i: int, delta: int) -> None:
        i += 1
        while i < len(self.tree):
            self.tree[i] += delta
            i += i & -i

    def prefix(self, i: int) -> int:
        """Sum of values with index < i."""
        total = 0
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total


class MemoryPool:
    """One rank class's GPU memory (bytes per rank).

    ``pending_bytes[i]`` is what the op at issue position ``i`` will request. ``request``
    allocates or queues; ``release`` frees and lets queued requests through in issue order
    while they fit.
    """

    def __init__(self, env: simpy.Environment, capacity_bytes: int, static_bytes: int,
                 pending_bytes: list[int]):
        self.env = env
        self.capacity_bytes = capacity_bytes
        self.in_use_bytes = static_bytes
        self.peak_bytes = static_bytes
        self.timeline: list[tuple[float, int]] = [(0.0, static_bytes)]   # (time_s, bytes)
        self.oom_at: str | None = ("static memory" if static_bytes > capacity_bytes > 0
                                   else None)
        self.wait_s = 0.0
        self._queue: list[tuple[int, int, str, float, simpy.Event]] = []
        # what each op will still request, and the first op that will: an op issued no
        # later has no earlier-issued op to leave room for (most requests, ops mostly
        # start in issue order), so no sum is needed; one issued a little later sums the
        # few between (:meth:`_ahead`)
        self._left = list(pending_bytes) if capacity_bytes else None
        self._unstarted: _Fenwick | None = None     # prefix sums of _left, once needed
        self._first = 0
        self._skip_taken()

    @property
    def waiting(self) -> int:
        """How many requests are queued."""
        return len(self._queue)

    @property
    def oldest_position(self) -> int:
        """Issue position of the oldest queued request."""
        return self._queue[0][0]

    def request(self, nbytes: int, position: int, name: str) -> simpy.Event | None:
        """Ask for ``nbytes`` for the op ``name`` at issue ``position``.

        :returns: None when the bytes are allocated at once (no event is scheduled, so an
            uncontended allocation costs no simulation step), else an event that fires
            when they are.
        """
        if nbytes and self.capacity_bytes and (self._queue or
                                               not self._fits(position, nbytes)):
            granted = Event(self.env)
            bisect.insort(self._queue, (position, nbytes, name, self.env.now, granted),
                          key=lambda w: w[0])
            self._admit()
            return granted
        self._take(nbytes, name, position)
        return None

    def release(self, nbytes: int) -> None:
        """Free ``nbytes``; queued requests that now fit are granted in issue order."""
        if not nbytes:
            return
        self._take(-nbytes, "")
        if self._queue:
            self._admit()

    def admit_oldest(self) -> None:
        """Grant the oldest queued request even over capacity (nothing running can free
        memory any more); the class is out of memory at it."""
        self._grant(self._queue.pop(0))

    def _admit(self) -> None:
        while self._queue and self._fits(self._queue[0][0], self._queue[0][1]):
            self._grant(self._queue.pop(0))

    def _grant(self, waiter: tuple[int, int, str, float, simpy.Event]) -> None:
        position, nbytes, name, since_s, granted = waiter
        self._take(nbytes, name, position)
        self.wait_s += self.env.now - since_s
        granted.succeed()

    def _fits(self, position: int, nbytes: int) -> bool:
        """Room for ``nbytes`` now and for every earlier-issued op not started yet."""
        ahead = self._ahead(position) if position > self._first else 0
        return self.in_use_bytes + nbytes + ahead <= self.capacity_bytes

    def _ahead(self, position: int) -> int:
        """Bytes the ops issued before ``position`` will still request: those from
        ``_first`` on (every op before it has requested), summed where they are few (the
        shipped scenarios: at most 35 apart), else by a Fenwick tree built from them the
        first time and kept up to date from then on (integers: the same sum either way)."""
        first = self._first
        if self._unstarted is None:
            if position - first <= _SUMMED:
                return sum(self._left[first:position])
            self._unstarted = _Fenwick(self._left)
        return self._unstarted.prefix(position)

    def _skip_taken(self) -> None:
        """Move ``_first`` past the ops that will request nothing more (it only moves on:
        an op requests once)."""
        left, first = self._left, self._first
        if left is None:
            return
        n = len(left)
        while first < n and not left[first]:
            first += 1
        self._first = first

    def _take(self, delta: int, name: str, position: int | None = None) -> None:
        if not delta:
            return
        if position is not None and self._left is not None:
            if self._unstarted is not None:
                self._unstarted.add(position, -delta)
            self._left[position] -= delta
            if position == self._first:
                self._skip_taken()
        self.in_use_bytes += delta
        self.timeline.append((self.env.now, self.in_use_bytes))
        if self.in_use_bytes > self.peak_bytes:
            self.peak_bytes = self.in_use_bytes
            if self.capacity_bytes and self.in_use_bytes > self.capacity_bytes \
                    and not self.oom_at:
                self.oom_at = name
