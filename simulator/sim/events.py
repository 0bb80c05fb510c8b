"""Events lighter than SimPy's, each scheduled exactly where its SimPy original would be."""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappush

import simpy
from simpy.events import NORMAL


class Tick:
    """An event that only fires: what a SimPy ``Timeout`` (or an event succeeded with no
    value) is to whoever waits on it, without ``__init__`` work or an attribute dict.
    :class:`Environment` makes them (:meth:`~Environment.tick`, :meth:`~Environment.call_at`);
    SimPy's run loop and a :class:`StreamProcess` read ``callbacks``, ``_ok`` and ``_value``
    of an event, nothing else."""

    __slots__ = ("callbacks",)
    _ok = True
    _value = None

    @property
    def processed(self) -> bool:
        """Whether the event has fired (SimPy's ``Event.processed``)."""
        return self.callbacks is None


class Relay(Tick):
    """An event whose value nobody reads: calling it (directly, or as the callback of
    another event) puts it on the queue now, where ``event.succeed()`` of a SimPy event
    would go (now, normal priority, the next insertion number). ``env`` is a
    :class:`~simulator.sim.environment.Environment`."""

    __slots__ = ("env",)

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.callbacks = []

    def __call__(self, _event=None) -> None:
        env = self.env      # Environment.schedule_now(self), without a call more per event
        heappush(env._queue, (env._now, NORMAL, next(env._eid), self))


class Reply(Relay):
    """A :class:`Relay` with a value: ``succeed(value)`` puts it on the queue now, as
    SimPy's ``event.succeed(value)`` does; whoever waits on it reads the value."""

    __slots__ = ("_value",)

    def succeed(self, value) -> None:
        self._value = value
        self()


def after(env: simpy.Environment, event) -> Relay:
    """An event scheduled exactly as ``env.all_of([event])`` is (at once where ``event``
    has fired, else as it does), with no value and no Condition: a :class:`Relay`."""
    ev = Relay(env)
    callbacks = event.callbacks
    if callbacks is None:
        ev()
    else:
        callbacks.append(ev)
    return ev


def all_done(env: simpy.Environment, events: list) -> Relay:
    """An event scheduled exactly as ``env.all_of(events)`` is (at once where every one of
    ``events`` has fired, else as the last of them does), with no value and no Condition:
    a :class:`Relay`, fired by the last of them."""
    if len(events) == 1:
        return after(env, events[0])
    ev = Relay(env)
    pending = [e for e in events if e.callbacks is not None]
    if not pending:
        ev()
    elif len(pending) == 1:
        pending[0].callbacks.append(ev)
    else:
        check = countdown(len(pending), ev)
        for e in pending:
            e.callbacks.append(check)
    return ev


def countdown(n: int, fire: Callable[[], object]) -> Callable[[object], None]:
    """A callback that calls ``fire()`` the ``n``-th time it is called."""
    left = [n]

    def count(_done) -> None:
        left[0] -= 1
        if left[0] == 0:
            fire()
    return count
