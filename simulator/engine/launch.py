"""Collectives in the replay: the rendezvous of the rank classes and the launch of the flows.

A collective starts when every rank class of its communicator has reached it (classes meet
at their k-th collective on a communicator and stream: every class issues a stream's
collectives in the same order, SPMD). Then the instance groups of the communicator put
their flows (bundled, :mod:`simulator.network.bundle`) on the fabric at once, and the op
ends when the last is done, later by the variability's factor of the slowest rank.

Two steps a process-per-collective schedule would take are left out: a communicator of one
rank class whose flows all have a latency is launched in the step that reaches it (a
process waiting for the rendezvous would launch it one step later: with every flow's
latency still to elapse, nothing the launch does can be seen in between), and the fabric
reports each flow done in the step that finds it so (a done event would report it one
step later; this shifts every completion's consequences by one step alike, so their order
among themselves holds). Both keep the order of what happens at one instant except where
two unrelated events fall at the very same time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import simpy
from simpy.events import Timeout

from ..network.bundle import bundled
from ..network.fabric import Fabric, Flow
from ..sim import Relay, Reply, countdown
from ..trace.schema import Op, Trace
from .planning import Plans
from .variability import Variability


class Outcome(NamedTuple):
    """How a collective or transfer went, for the op's record: when its bytes started
    moving and the plan they moved by (None for a copy with no plan)."""

    start_s: float
    plan: object


@dataclass(slots=True)
class _Launch:
    """A collective of one communicator, size and pinned choice, planned once: the plans
    of its instance groups, their bundled flows, and whether every flow has a latency."""

    plans: list
    flows: list[Flow]
    all_latency: bool


class _Rendezvous:
    """Collective matching across rank classes: key (comm, stream, k-th use)."""

    __slots__ = ("arrived", "expected", "all_here", "done")

    def __init__(self, env: simpy.Environment, expected: int):
        self.arrived = 0
        self.expected = expected
        self.all_here = Relay(env)
        self.done = Reply(env)


class Launcher:
    """The collectives of one replay: :meth:`arrive` when a class reaches one."""

    def __init__(self, env: simpy.Environment, fabric: Fabric, trace: Trace, plans: Plans,
                 vary: Variability | None):
        self.env, self.fabric, self.trace, self.plans = env, fabric, trace, plans
        self.vary = vary
        self.members = _class_members(trace)
        self.rendezvous: dict[tuple, _Rendezvous] = {}
        # (comm, collective, size, how) -> its launch; attrs may pin the algorithm, protocol
        # and root
        self._launches: dict[tuple, _Launch] = {}

    def arrive(self, op: Op, k: int) -> Reply:
        """A class reaches ``op``, its ``k``-th collective on ``op.comm`` and ``op.stream``;
        the returned event fires, with its :class:`Outcome`, when the collective is done."""
        expected = self.members[op.comm]
        if expected == 1:           # no one to meet: no rendezvous, only its done event
            done = Reply(self.env)
            launch = self._launch_of(op)
            if launch.all_latency:
                self._launch(op, done, launch)
            else:       # one step later, as a process waiting for the rendezvous would
                ready = Relay(self.env)
                ready.callbacks.append(lambda _e: self._launch(op, done, launch))
                ready()
            return done
        key = (op.comm, op.stream, k)
        rv = self.rendezvous.get(key)
        if rv is None:
            rv = self.rendezvous[key] = _Rendezvous(self.env, expected)
            # launched when the last class is here (as a process that waits on all_here
            # would be, with no process: one callback, the only one of all_here)
            rv.all_here.callbacks.append(
                lambda _e: self._launch(op, rv.done, self._launch_of(op)))
        rv.arrived += 1
        if rv.arrived == rv.expected:
            rv.all_here()
        return rv.done

    def _launch_of(self, op: Op) -> _Launch:
        attrs = op.attrs
        how = ((attrs.get("algorithm", "auto"), attrs.get("protocol", "auto"),
                attrs.get("root", 0)) if attrs else ("auto", "auto", 0))
        key = (op.comm, op.collective, op.size_bytes, how)
        launch = self._launches.get(key)
        if launch is None:      # the instance groups' plans, bundled (module docstring)
            groups = self.trace.communicators[op.comm].groups
            plans = self.plans.groups(op.collective, op.size_bytes, groups, how)
            flows = bundled([p.flow() for p in plans])
            launch = self._launches[key] = _Launch(plans, flows,
                                                   all(f.latency_s > 0 for f in flows))
        return launch

    def _launch(self, op: Op, done: Reply, launch: _Launch) -> None:
        """Every class is here: put the instance groups' flows on the fabric, at once
        (nothing else is scheduled in this step, see :meth:`Fabric.start`); ``done``
        (the rendezvous') fires, with its :class:`Outcome`, one step after the last transfer is
        done (as a wait on all of them would) and after the variability's extra time."""
        start, flows = self.env.now, launch.flows
        after = Relay(self.env)
        after.callbacks.append(lambda _e: self._launched(op, done, start, launch.plans[0]))
        if not flows:
            after()
            return
        # (one flow, most collectives: its end calls ``after`` itself, as a countdown of
        # one would)
        moved = after if len(flows) == 1 else countdown(len(flows), after)
        for flow in flows:
            self.fabric.start(flow.fresh(), moved)

    def _launched(self, op: Op, done: Reply, start: float, plan) -> None:
        if self.vary is not None:       # the slowest rank's collective (sigma 0: no-op)
            factor = self.vary.collective_factor(op.comm, self.trace.communicators[op.comm].size)
            if factor != 1.0:
                Timeout(self.env, (factor - 1.0) * (self.env.now - start)).callbacks.append(
                    lambda _e: done.succeed(Outcome(start, plan)))
                return
        done.succeed(Outcome(start, plan))


def _class_members(trace: Trace) -> dict[str, int]:
    """Per communicator, how many rank classes take part."""
    owner = {}
    for cls in trace.classes:
        for r in cls.ranks:
            owner[r] = cls.id
    return {cid: len({owner[r] for grp in comm.groups for r in grp})
            for cid, comm in trace.communicators.items()}
