"""Sends and receives between ranks, as NCCL runs them.

A transfer (one sender rank, one receiver rank; matched as the Trace contract says,
:func:`simulator.trace.schema.transfer_keys`) starts when the sender has reached its
``send`` and the receiver its ``recv``; the bytes then cross the fabric from the sender's GPU
to the receiver's on the collective model's point-to-point path (``send_recv``: NCCL's p2p
latency and protocol, the route's bandwidth), and both ops end when they are delivered. An
op of a class with several members carries one transfer per member; it ends with the last.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import simpy

from ..network.bundle import bundle_flows, runs_of, signature
from ..network.fabric import Fabric
from ..trace.schema import Op, RankClass, TransferKey


@dataclass
class _Meeting:
    """One transfer: the sides that arrived, who waits for it, and when and how it went."""

    size_bytes: int = 0
    waiting: dict = field(default_factory=dict)     # side -> (class id, op) while alone
    waits: list = field(default_factory=list)       # the ops' _Wait objects
    start_s: float = 0.0
    plan: object = None


class _Wait:
    """One send or recv op: fires ``event`` when the last of its transfers is delivered."""

    def __init__(self, event: simpy.Event, left: int):
        self.event, self.left = event, left


class PointToPoint:
    """The rendezvous of every send/recv between ranks of one replay.

    ``plan(size_bytes, sender, receiver)`` lays a transfer out (a planned transfer, with
    ``flow()``). The transfers that become ready when one op arrives start together, and
    neighbours among them with the same payload, latency and rate cap go as one bundle
    (:mod:`simulator.network.bundle`).
    """

    def __init__(self, env: simpy.Environment, fabric: Fabric, plan, keys: dict):
        self.env, self.fabric, self.plan = env, fabric, plan
        self.keys: dict[tuple[str, int], list[TransferKey]] = keys
        self.meetings: dict[TransferKey, _Meeting] = {}
        self._bundles: dict = {}        # plans of one start -> (plans, bundled flows)

    def run(self, cls: RankClass, op: Op):
        """Process body of ``op`` (a send or recv of ``cls``): returns (start_s, plan)."""
        keys = self.keys[(cls.id, op.id)]
        wait = _Wait(self.env.event(), len(keys))
        ready = []
        for key in keys:
            m = self.meetings.get(key)
            if m is None:
                m = self.meetings[key] = _Meeting(op.size_bytes)
            m.waiting[op.kind] = (cls.id, op)
            m.waits.append(wait)
            if len(m.waiting) == 2:
                ready.append((key, m))
        if ready:
            self._start(ready)
        if wait.left:
            yield wait.event
        met = [self.meetings[key] for key in keys]
        return min(m.start_s for m in met), met[0].plan

    def _start(self, ready: list) -> None:
        """Both sides of each of ``ready`` are here: move their bytes."""
        now = self.env.now
        plans = []
        for key, m in ready:
            m.waiting.clear()
            m.start_s = now
            m.plan = self.plan(m.size_bytes, key[0], key[1])
            plans.append(m.plan)
        cached = self._bundles.get(tuple(id(p) for p in plans))
        if cached is None:
            flows = [p.flow() for p in plans]
            cached = (plans, [(bundle_flows(run), len(run))
                              for run in runs_of(flows, signature)])
            self._bundles[tuple(id(p) for p in plans)] = cached
        first = 0
        for flow, count in cached[1]:
            done = self.fabric.transfer(replace(flow))
            met = [m for _, m in ready[first:first + count]]
            done.callbacks.append(lambda _e, met=met: self._delivered(met))
            first += count

    @staticmethod
    def _delivered(met: list) -> None:
        for m in met:
            for wait in m.waits:
                wait.left -= 1
                if wait.left == 0:
                    wait.event.succeed()

    def stuck(self) -> list[str]:
        """Sides that arrived and whose partner never did (after the replay ran dry)."""
        out = []
        for (src, dst, tag, k), m in self.meetings.items():
            for kind, (cls_id, op) in m.waiting.items():
                partner = f"recv on rank {dst}" if kind == "send" else f"send on rank {src}"
                out.append(f"rank class {cls_id}, op {op.id} ({op.name}): {kind} from rank "
                           f"{src} to rank {dst} waits for its {partner}, never reached")
        return out
