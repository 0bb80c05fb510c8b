"""SimPy's environment with the scheduling calls of the package's light events."""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from operator import attrgetter

import simpy
from simpy.events import NORMAL, URGENT

from .events import Tick


class Environment(simpy.Environment):
    """A SimPy environment that counts the events it processes (``events_processed``)
    and schedules :class:`~simulator.sim.events.Tick` events.

    Every call below puts its event where SimPy's ``schedule`` puts an event of that
    priority and time (ties broken by insertion order); ``call_at`` takes the instant
    itself rather than a delay added to now (an addition would round it).

    ``run()`` without ``until`` processes the events in its own loop, the one of
    :meth:`simpy.Environment.step` written out, so the count costs no Python frame per
    event; :meth:`step` (and ``run(until)``, which goes through it) counts too.
    """

    # SimPy's ``now``, read by a C getter rather than a Python function (the replay reads
    # the clock several times per op)
    now = property(attrgetter("_now"), doc="The current simulation time.")

    def __init__(self, initial_time: float = 0):
        super().__init__(initial_time)
        self.events_processed = 0

    # ------------------------------------------------------------------ scheduling
    def schedule_now(self, event, priority: int = NORMAL) -> None:
        """Put ``event`` (already triggered) on the queue at this instant."""
        heappush(self._queue, (self._now, priority, next(self._eid), event))

    def tick(self, delay: float) -> Tick:
        """A :class:`Tick` that fires ``delay`` seconds from now, where
        ``env.timeout(delay)`` would.

        :raises ValueError: for a negative delay (as ``Timeout`` does).
        """
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        tick = Tick()
        tick.callbacks = []
        heappush(self._queue, (self._now + delay, NORMAL, next(self._eid), tick))
        return tick

    def call_at(self, when: float, callback: Callable) -> Tick:
        """Call ``callback(tick)`` at the instant ``when`` (not before now), normal
        priority; the :class:`Tick` is returned."""
        tick = Tick()
        tick.callbacks = [callback]
        heappush(self._queue, (when, NORMAL, next(self._eid), tick))
        return tick

    def call_later(self, delay: float, callback: Callable) -> Tick:
        """Call ``callback(tick)`` ``delay`` seconds from now, where a ``Timeout`` with
        that callback would fire."""
        return self.call_at(self._now + delay, callback)

    def call_urgent(self, callback: Callable) -> Tick:
        """Call ``callback(tick)`` at this instant before any event of normal priority,
        where SimPy starts a new process (an urgent ``Initialize`` event)."""
        tick = Tick()
        tick.callbacks = [callback]
        heappush(self._queue, (self._now, URGENT, next(self._eid), tick))
        return tick

    # ------------------------------------------------------------------ running
    def step(self) -> None:
        self.events_processed += 1
        super().step()

    def run(self, until=None):
        if until is not None:
            return super().run(until)
        queue, pop, count = self._queue, heappop, 0
        try:
            while queue:
                self._now, _, _, event = pop(queue)
                count += 1
                callbacks, event.callbacks = event.callbacks, None
                for callback in callbacks:
                    callback(event)
                if not event._ok and not hasattr(event, "_defused"):
                    exc = type(event._value)(*event._value.args)    # as step() raises it
                    exc.__cause__ = event._value
                    raise exc
        finally:
            self.events_processed += count
        return None
