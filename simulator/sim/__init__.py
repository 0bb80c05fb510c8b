"""SimPy extensions: the only code of the package that touches SimPy's internals.

The replay and the fabric make hundreds of thousands of events per simulated step; most
only fire (nobody reads a value) or only wake one waiter. The events here take exactly the
place in SimPy's queue that the SimPy event they stand for would take (the same time,
priority and insertion order: SimPy's ``Environment.schedule``), so a run gives the same
order of everything as one built from SimPy's own events; ``tests/test_sim.py`` checks
each against its SimPy original, interleaved with SimPy's events of both priorities.

* :class:`Environment`: SimPy's, counting the events it processes, with the scheduling
  calls the rest of the package uses instead of SimPy's private queue
  (:meth:`~Environment.tick`, :meth:`~Environment.call_at`, :meth:`~Environment.call_later`,
  :meth:`~Environment.call_urgent`).
* :class:`Tick` (a ``Timeout`` that carries no value), :class:`Relay` (an ``Event`` whose
  ``succeed()`` is a call), :class:`Reply` (a Relay with a value), :func:`all_done` and
  :func:`after` (``env.all_of`` of several events or of one, without a value),
  :func:`countdown` (a callback that fires on the n-th call).
* :class:`StreamProcess`: a SimPy ``Process`` without an event at its end.
"""

from .environment import Environment
from .events import Relay, Reply, Tick, after, all_done, countdown
from .process import StreamProcess

__all__ = ["Environment", "Relay", "Reply", "StreamProcess", "Tick", "after", "all_done",
           "countdown"]
