"""Sends and receives between ranks, as NCCL runs them.

A transfer (one sender rank, one receiver rank; matched as the Trace contract says,
:func:`simulator.trace.schema.transfer_keys`) starts when the sender has reached its
``send`` and the receiver its ``recv``; the bytes then cross the fabric from the sender's GPU
to the receiver's on the collective model's point-to-point path (``send_recv``: NCCL's p2p
latency and protocol, the route's bandwidth), and both ops end when they are delivered. An
op of a class with several members carries one transfer per member; it ends with the last.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from ..network.fabric import Fabric
from ..trace.schema import Op, RankClass, TransferKey


@dataclass
class _Meeting:
    """One transfer: each side's arrival, and the delivery (value: (start_s, plan))."""

    sender: simpy.Event
    receiver: simpy.Event
    delivered: simpy.Event
    size_bytes: int = 0
    waiting: dict = field(default_factory=dict)     # side -> (class id, op) while alone


class PointToPoint:
    """The rendezvous of every send/recv between ranks of one replay.

    ``plan(size_bytes, sender, receiver)`` lays a transfer out (a planned transfer, with
    ``flow()``).
    """

    def __init__(self, env: simpy.Environment, fabric: Fabric, plan, keys: dict):
        self.env, self.fabric, self.plan = env, fabric, plan
        self.keys: dict[tuple[str, int], list[TransferKey]] = keys
        self.meetings: dict[TransferKey, _Meeting] = {}

    def run(self, cls: RankClass, op: Op):
        """Process body of ``op`` (a send or recv of ``cls``): returns (start_s, plan)."""
        delivered = []
        for key in self.keys[(cls.id, op.id)]:
            m = self._meeting(key, op.size_bytes)
            (m.sender if op.kind == "send" else m.receiver).succeed()
            m.waiting[op.kind] = (cls.id, op)
            delivered.append(m.delivered)
        yield self.env.all_of(delivered)
        started = [ev.value for ev in delivered]
        return min(s for s, _ in started), started[0][1]

    def _meeting(self, key: TransferKey, size_bytes: int) -> _Meeting:
        m = self.meetings.get(key)
        if m is None:
            m = self.meetings[key] = _Meeting(self.env.event(), self.env.event(),
                                              self.env.event(), size_bytes)
            self.env.process(self._transfer(key, m))
        return m

    def _transfer(self, key: TransferKey, m: _Meeting):
        yield self.env.all_of([m.sender, m.receiver])
        m.waiting.clear()
        start = self.env.now
        plan = self.plan(m.size_bytes, key[0], key[1])
        yield self.fabric.transfer(plan.flow())
        m.delivered.succeed((start, plan))

    def stuck(self) -> list[str]:
        """Sides that arrived and whose partner never did (after the replay ran dry)."""
        out = []
        for (src, dst, tag, k), m in self.meetings.items():
            for kind, (cls_id, op) in m.waiting.items():
                partner = f"recv on rank {dst}" if kind == "send" else f"send on rank {src}"
                out.append(f"rank class {cls_id}, op {op.id} ({op.name}): {kind} from rank "
                           f"{src} to rank {dst} waits for its {partner}, never reached")
        return out
