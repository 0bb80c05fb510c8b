"""The replay's light events (Tick, Relay, Reply, all_done) take the very places in SimPy's
queue that the SimPy events they stand for would: the same order of everything that
happens, with SimPy events of both priorities interleaved, at one instant and later."""

from heapq import heappush

import pytest
from simpy.events import NORMAL, URGENT, Event, Timeout

from simulator.engine.steps import Relay, Reply, all_done
from simulator.network.fabric import CountingEnvironment, Tick


def _story(light: bool) -> list:
    """Events made at 0 and fired at 0 and 1, light or SimPy's own: what fired, in order."""
    env = CountingEnvironment()
    seen = []

    def note(label):
        return lambda e: seen.append((env.now, label, getattr(e, "_value", None)))

    def timeout(delay, label):
        if light:
            ev = Tick()
            ev.callbacks = [note(label)]
            heappush(env._queue, (env._now + delay, NORMAL, next(env._eid), ev))
        else:
            Timeout(env, delay).callbacks.append(note(label))

    def relay(label):
        ev = Relay(env) if light else Event(env)
        ev.callbacks.append(note(label))
        return ev

    def fire(ev, value=None):
        if light and type(ev) is Relay:
            ev()
        else:
            ev.succeed(value)

    Timeout(env, 1).callbacks.append(note("simpy timeout before"))
    timeout(1, "timeout")
    first = relay("relay")
    fire(first)
    urgent = Event(env)
    urgent._ok, urgent._value = True, None
    urgent.callbacks.append(note("urgent"))
    env.schedule(urgent, URGENT)
    reply = (Reply(env) if light else Event(env))
    reply.callbacks.append(note("reply"))
    reply.succeed(("start", "plan"))
    later = relay("later")
    Timeout(env, 1).callbacks.append(lambda _e: fire(later))
    both = all_done(env, [first, later]) if light else env.all_of([first, later])
    both.callbacks.append(lambda e: seen.append((env.now, "all done", None)))
    one = all_done(env, [later]) if light else env.all_of([later])
    one.callbacks.append(lambda e: seen.append((env.now, "one done", None)))
    timeout(0, "timeout now")
    env.run()
    return seen


def test_light_events_fire_in_the_order_simpys_own_would():
    light, simpy_own = _story(True), _story(False)
    assert light == simpy_own
    assert [label for _, label, _ in light][:2] == ["urgent", "relay"]
    assert (0, "reply", ("start", "plan")) in light
    assert light[-2:] == [(1, "all done", None), (1, "one done", None)]


def test_a_stream_reads_a_tick_as_a_processed_event():
    tick = Tick()
    assert tick._ok is True and tick._value is None
    with pytest.raises(AttributeError):
        tick.other = 1                     # slotted: no attribute dict
