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
from simpy.events import Event

from ..network.bundle import bundle_flows, runs_of, signature
from ..network.fabric import Fabric
from ..trace.matching import peer_ops, ranks_array
from ..trace.schema import Op, RankClass, TransferKey, op_transfer_keys
from .launch import Outcome


@dataclass
class _Meeting:
    """One transfer: the sides that arrived, who waits for it, and when and how it went."""

    size_bytes: int = 0
    waiting: dict = field(default_factory=dict)     # side -> (class id, op) while alone
    waits: list = field(default_factory=list)       # the ops' _Wait objects
    start_s: float = 0.0
    plan: object = None
    left: int = 0                                   # bundles still moving


class _Wait:
    """One send or recv op: fires ``event`` when the last of its transfers is delivered."""

    def __init__(self, event: simpy.Event, left: int):
        self.event, self.left = event, left


class PointToPoint:
    """The rendezvous of every send/recv between ranks of one replay.

    ``plan(size_bytes, pairs)`` lays out the transfers of (sender, receiver) ``pairs`` (a
    planned transfer each, with ``flow()``). The transfers that become ready when one op
    arrives start together, and neighbours among them with the same payload, latency and
    rate cap go as one bundle (:mod:`simulator.network.bundle`). The fabric reports a
    transfer done in the step that finds it so, not by an event one step later
    (:mod:`simulator.engine.launch`).
    """

    def __init__(self, env: simpy.Environment, fabric: Fabric, plan, classes: list):
        self.env, self.fabric, self.plan = env, fabric, plan
        # (class id, op id) -> (class, op, tag, k) of each send/recv between ranks; its
        # transfers (one per member) are listed only when needed (op_transfer_keys)
        self._ops: dict[tuple[str, int], tuple] = {
            (cls.id, op.id): (cls, op, tag, k) for cls in classes
            for op, tag, k in peer_ops(cls)}
        self.meetings: dict[TransferKey, _Meeting] = {}
        self._bundles: dict = {}        # plans of one start -> (plans, bundled flows)
        self._pairs: list[tuple] = []           # (sender, receiver) of each member
        self._group: dict = {}                  # (class id, op id) -> (group, pairs)
        self._met: dict[int, _Meeting] = {}     # group -> its meeting
        self._pair_ops()

    def keys(self, op_key: tuple[str, int]) -> list[TransferKey]:
        """The transfers of the send/recv op ``op_key`` = (class id, op id), one per member."""
        return op_transfer_keys(*self._ops[op_key])

    def _pair_ops(self) -> None:
        """A send op and a recv op that carry the very same transfers (the common case: a
        stage's class sends to the next stage's) meet once for all of them, as a group."""
        by_keys: dict[tuple, list] = {}
        senders: dict = {}
        for op_key, entry in self._ops.items():
            by_keys.setdefault(_transfers_id(entry, senders), []).append(op_key)
        pairs_id: dict[tuple, int] = {}     # (senders, shift) -> its (sender, receiver) list
        for group, (transfers, ops) in enumerate(by_keys.items()):
            if len(ops) != 2:
                continue
            pairs = transfers[0]
            if pairs not in pairs_id:
                pairs_id[pairs] = len(self._pairs)
                self._pairs.append(tuple((src, dst) for src, dst, _, _ in self.keys(ops[0])))
            for op_key in ops:
                self._group[op_key] = (group, pairs_id[pairs])

    def run(self, cls: RankClass, op: Op):
        """Process body of ``op`` (a send or recv of ``cls``): returns its :class:`Outcome`."""
        group = self._group.get((cls.id, op.id))
        if group is not None:
            return (yield from self._run_group(group, cls, op))
        keys = self.keys((cls.id, op.id))
        wait = _Wait(Event(self.env), len(keys))
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
        return Outcome(min(m.start_s for m in met), met[0].plan)

    def _run_group(self, group: tuple[int, int], cls: RankClass, op: Op):
        m = self._met.get(group[0])
        if m is None:
            m = self._met[group[0]] = _Meeting(op.size_bytes)
        m.waiting[op.kind] = (cls.id, op)
        wait = _Wait(Event(self.env), 1)
        m.waits.append(wait)
        if len(m.waiting) == 2:
            m.waiting.clear()
            m.start_s = self.env.now
            key = (m.size_bytes, group[1])
            cached = self._bundles.get(key)
            if cached is None:
                plans = self.plan(m.size_bytes, list(self._pairs[group[1]]))
                cached = self._bundles[key] = (plans, self._runs(plans))
            m.plan = cached[0][0]
            m.left = len(cached[1])
            for flow, _ in cached[1]:
                self.fabric.transfer(flow.fresh(), lambda _e, m=m: self._group_moved(m))
        yield wait.event
        return Outcome(m.start_s, m.plan)

    @staticmethod
    def _group_moved(m: _Meeting) -> None:
        m.left -= 1
        if m.left == 0:
            for wait in m.waits:
                wait.event.succeed()

    def _runs(self, plans: list) -> list[tuple]:
        """(bundled flow, count of members) for each run of neighbours alike."""
        return [(bundle_flows(run), len(run))
                for run in runs_of([p.flow() for p in plans], signature)]

    def _start(self, ready: list) -> None:
        """Both sides of each of ``ready`` are here: move their bytes."""
        now = self.env.now
        sizes = {m.size_bytes for _, m in ready}
        planned = {size: iter(self.plan(size, [key[:2] for key, m in ready
                                                if m.size_bytes == size]))
                   for size in sorted(sizes)}
        plans = []
        for _, m in ready:
            m.waiting.clear()
            m.start_s = now
            m.plan = next(planned[m.size_bytes])
            plans.append(m.plan)
        cached = self._bundles.get(tuple(id(p) for p in plans))
        if cached is None:
            cached = self._bundles[tuple(id(p) for p in plans)] = (plans, self._runs(plans))
        first = 0
        for flow, count in cached[1]:
            met = [m for _, m in ready[first:first + count]]
            self.fabric.transfer(flow.fresh(), lambda _e, met=met: self._delivered(met))
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
        met = list(self.meetings.items()) + [
            (self.keys((cls_id, op.id))[0], m) for m in self._met.values()
            for cls_id, op in m.waiting.values()]
        for (src, dst, tag, k), m in met:
            for kind, (cls_id, op) in m.waiting.items():
                partner = f"recv on rank {dst}" if kind == "send" else f"send on rank {src}"
                out.append(f"rank class {cls_id}, op {op.id} ({op.name}): {kind} from rank "
                           f"{src} to rank {dst} waits for its {partner}, never reached")
        return out


def _transfers_id(entry: tuple, senders: dict) -> tuple:
    """A key equal for two send/recv ops exactly when their lists of transfers are equal:
    ((the senders in member order, receiver minus sender), (tag, k)), the senders as a small
    integer per distinct sequence (``senders``: its bytes -> the integer, and per class and
    shift), so no op lists its members; its first part is equal exactly when the (sender,
    receiver) pairs are. The pairs themselves where ranks do not fit in int64."""
    cls, op, tag, k = entry
    shift = op.peer - cls.ranks[0]
    from_shift = 0 if op.kind == "send" else shift      # the senders: ranks + from_shift
    known = senders.get((cls.id, from_shift))
    if known is None:
        ranks = ranks_array(cls.ranks)
        if ranks is None:
            return (tuple((a, b) for a, b, _, _ in op_transfer_keys(cls, op, tag, k)),
                    (tag, k))
        seq = (ranks + from_shift).tobytes()
        known = senders[(cls.id, from_shift)] = senders.setdefault(seq, len(senders))
    return (known, shift if op.kind == "send" else -shift), (tag, k)
