"""The SimPy extensions (simulator.sim) take the very places in SimPy's queue that the SimPy
events they stand for would: the same order of everything that happens, with SimPy events
of both priorities interleaved, at one instant and later."""

import pytest
import simpy
from simpy.events import URGENT, Event, Timeout

from simulator.sim import Environment, Relay, Reply, StreamProcess, Tick, after, all_done


def _story(light: bool) -> list:
    """Events made at 0 and fired at 0 and 1, light or SimPy's own: what fired, in order."""
    env = Environment()
    seen = []

    def note(label):
        return lambda e: seen.append((env.now, label, getattr(e, "_value", None)))

    def timeout(delay, label):
        if light:
            env.call_later(delay, note(label))
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
    if light:
        env.call_urgent(note("urgent"))
    else:
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
    at = env.call_at(0.5, note("at half")) if light else Timeout(env, 0.5)
    if not light:
        at.callbacks.append(note("at half"))
    env.run()
    return seen


def test_light_events_fire_in_the_order_simpys_own_would():
    light, simpy_own = _story(True), _story(False)
    assert light == simpy_own
    assert [label for _, label, _ in light][:2] == ["urgent", "relay"]
    assert (0, "reply", ("start", "plan")) in light
    assert (0.5, "at half", None) in light
    assert light[-2:] == [(1, "all done", None), (1, "one done", None)]


def test_a_tick_waits_as_a_timeout_does_and_refuses_a_negative_delay():
    env = Environment()
    log = []

    def proc(label, delays, light):
        for d in delays:
            yield env.tick(d) if light else env.timeout(d)
            log.append((env.now, label))

    StreamProcess(env, proc("light", [1, 0, 2], True))
    env.process(proc("simpy", [1, 0, 2], False))
    env.run()
    assert log == [(1, "light"), (1, "simpy"), (1, "light"), (1, "simpy"), (3, "light"),
                   (3, "simpy")]
    with pytest.raises(ValueError, match="Negative delay"):
        env.tick(-1)


def test_a_stream_starts_and_resumes_where_a_simpy_process_would():
    def story(light: bool) -> list:
        env, log = Environment(), []
        gate = Relay(env) if light else Event(env)

        def waiter(label):
            log.append((env.now, label, "start"))
            yield gate
            log.append((env.now, label, "woke"))

        def opener():
            yield env.timeout(2)
            gate() if light else gate.succeed()

        for label in ("a", "b"):
            StreamProcess(env, waiter(label)) if light else env.process(waiter(label))
        env.process(opener())
        env.run()
        return log

    assert story(True) == story(False) == [(0, "a", "start"), (0, "b", "start"),
                                           (2, "a", "woke"), (2, "b", "woke")]


def test_an_exception_in_a_stream_ends_the_run_with_it_as_the_cause():
    env = Environment()

    def bad():
        yield env.tick(1)
        raise KeyError("boom")

    StreamProcess(env, bad())
    with pytest.raises(KeyError) as info:
        env.run()
    assert isinstance(info.value.__cause__, KeyError)


def test_the_environment_counts_every_event_it_processes():
    env = Environment()
    for d in (0, 1, 2):
        env.tick(d)
    Timeout(env, 3)
    env.run()
    assert env.events_processed == 4 and env.now == 3
    env.tick(1)
    env.step()                         # step() counts too
    assert env.events_processed == 5


def test_a_tick_reads_as_a_processed_event_once_fired_and_has_no_attribute_dict():
    env = Environment()
    tick = env.tick(1)
    assert tick._ok is True and tick._value is None and not tick.processed
    env.run()
    assert tick.processed
    with pytest.raises(AttributeError):
        tick.other = 1                     # slotted: no attribute dict
    assert isinstance(env, simpy.Environment) and isinstance(Relay(env), Tick)


def _log_order(wait):
    """Resume order of processes that wait, through ``wait(env, events)``, on events
    fired in a scrambled order at one instant and at later ones."""
    env = Environment()
    evs = [env.event() for _ in range(6)]
    log = []

    def waiter(name, deps):
        yield wait(env, deps)
        log.append((env.now, name))

    def firer():
        yield env.timeout(1)
        for i in (3, 0, 5):
            evs[i].succeed()
        yield env.timeout(0)
        for i in (1, 2, 4):
            evs[i].succeed()

    env.process(firer())
    for name, deps in [("a", [0]), ("b", [3, 0]), ("c", [1, 5]), ("d", []),
                       ("e", [2, 4, 1]), ("f", [5])]:
        env.process(waiter(name, [evs[i] for i in deps]))
    env.run()

    def late(name, deps):       # waits made after the events were processed
        yield env.timeout(1)
        yield wait(env, deps)
        log.append((env.now, name))
    env.process(late("g", evs[:2]))
    env.process(late("h", [evs[5]]))
    env.run()
    return log


def test_the_dependency_wait_resumes_as_all_of_does():
    assert _log_order(all_done) == _log_order(lambda env, evs: env.all_of(evs))


def test_the_counting_run_loop_counts_what_step_processes():
    def model(env):
        def proc():
            for d in (1, 0, 2):
                yield env.timeout(d)
            yield env.all_of([env.timeout(1), env.timeout(2)])
        env.process(proc())
        env.process(proc())

    env = Environment()
    model(env)
    env.run()
    ref = Environment()
    model(ref)
    while ref.peek() != float("inf"):
        ref.step()
    assert env.events_processed == ref.events_processed > 0
    assert env.now == ref.now


def test_a_failed_event_raises_from_the_counting_run_loop():
    env = Environment()
    env.event().fail(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        env.run()


def test_after_one_event_resumes_as_all_of_that_event_does():
    assert _log_order(lambda env, evs: after(env, evs[0]) if len(evs) == 1
                      else all_done(env, evs)) == \
        _log_order(lambda env, evs: env.all_of(evs))
