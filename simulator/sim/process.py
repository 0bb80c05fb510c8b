"""A SimPy process for a generator whose end nobody waits for."""

from __future__ import annotations

import simpy


class StreamProcess:
    """A SimPy ``Process``, lighter: it starts as one does (an urgent event now) and
    resumes its generator as one does (at once on an event already processed, else when
    the event is), without an event at its end (nobody waits for a stream). An exception
    raised in the generator ends the run as a failed process would: a copy is raised,
    with the original as its cause."""

    __slots__ = ("send",)

    def __init__(self, env: simpy.Environment, gen):
        self.send = gen.send        # the generator's (it holds no reference back here)
        env.call_urgent(self.resume)

    def resume(self, event) -> None:
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
