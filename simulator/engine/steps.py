"""SimPy constructs of the replay, lighter: a stream's process, an event that fires when
called (with a value or not) and a wait for all of some events, each scheduled exactly as
the SimPy original is, and a countdown callback."""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappush

import simpy
from simpy.events import NORMAL, URGENT

from ..network.fabric import Tick


class StreamProcess:
    """A SimPy process, lighter: it starts as one does (an urgent event now) and resumes
    its generator as one does (at once on an event already processed, else when the event
    is), without an event at its end (nobody waits for a stream); an exception raised in
    the generator ends the replay as a failed process would (a copy, the original as its
    cause)."""

    __slots__ = ("send",)

    def __init__(self, env: simpy.Environment, gen):
        self.send = gen.send        # the generator's (which holds no reference back here)
        begin = simpy.Event(env)
        begin._ok, begin._value = True, None
        begin.callbacks.append(self.resume)
        env.schedule(begin, URGENT)

    def resume(self, event: simpy.Event) -> None:
        send = self.send
        try:
            while True:
                event = send(event._value)
                if event.callbacks is not None:
                    event.callbacks.append(self.resume)
                    return
        except StopIteration:
            return
        except BaseException as e:
            exc = type(e)(*e.args)
            exc.__cause__ = e
            raise exc from e


class Relay(Tick):
    """An event whose value nobody reads, lighter: calling it (directly, or as the callback
    of another event) puts it on the queue at this instant, where ``event.succeed()`` of
    a SimPy event would (now, normal priority, the next event id). The replay's ops' ends
    that others wait on, a stream's wait for one of them, and a collective's rendezvous and
    launch steps (:mod:`.launch`)."""

    __slots__ = ("env",)

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.callbacks = []

    def __call__(self, _event=None) -> None:
        env = self.env
        heappush(env._queue, (env._now, NORMAL, next(env._eid), self))


class Reply(Relay):
    """A :class:`Relay` with a value: ``succeed(value)`` puts it on the queue now, as SimPy's
    ``event.succeed(value)`` does; who waits on it reads the value (a collective's
    (start, plan) for the stream that waits for it)."""

    __slots__ = ("_value",)

    def succeed(self, value) -> None:
        self._value = value
        self()


def all_done(env: simpy.Environment, events: list) -> Relay:
    """An event scheduled exactly as ``env.all_of(events)`` is (at once where every one of
    ``events`` is processed, else as the last of them is), with no value and no Condition:
    a :class:`Relay`, fired by the last of them."""
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
