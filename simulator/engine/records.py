"""What a replay leaves behind: one job's op records and memory, and what the machine's
fabric carried. A job's :class:`Timeline` holds its own records and a reference to the
:class:`MachineRecord` of the machine it ran on (several jobs on one machine share it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..trace.schema import Op

COMM_KINDS = ("collective", "send", "recv")


@dataclass(slots=True)
class OpRecord:
    """What happened to one op of one rank class (times in seconds)."""

    cls: str
    op_id: int
    name: str
    stream: str
    kind: str
    layer: str
    phase: str
    ready_s: float       # dependencies done, stream free
    start_s: float       # started (after rendezvous for collectives)
    end_s: float
    size_bytes: int = 0
    algorithm: str = ""
    protocol: str = ""
    op_class: str = ""   # a kernel's class (matmul, elementwise...): what power it draws
    comm: str = ""       # a collective's communicator (``tp.s0``, ``shard``): what it is for
    collective: str = ""  # which collective (``all_gather``...; OPS), for NCCL's kernel name

    @property
    def wait_s(self) -> float:
        return self.start_s - self.ready_s

    @staticmethod
    def of(cls_id: str, op: Op, ready_s: float, start_s: float, end_s: float,
           plan=None) -> OpRecord:
        """The record of ``op`` of rank class ``cls_id``, run by ``plan`` (a planned
        collective or transfer; None for the rest). Its fields in their order (a class
        called with keywords builds a dict of them first), checked by
        ``tests/test_engine.py``."""
        return OpRecord(cls_id, op.id, op.name, op.stream, op.kind, op.layer, op.phase,
                        ready_s, start_s, end_s, op.size_bytes,
                        plan.algo if plan else "", plan.proto if plan else "", op.op_class,
                        op.comm, op.collective)


@dataclass
class MachineRecord:
    """What the machine did while its jobs ran: the SimPy events it processed and its
    fabric's counters. ``link_bytes`` and ``link_occupancy_bytes`` per directed link
    (:class:`~simulator.network.fabric.Fabric`); ``link_samples``: (time_s, load of each of
    ``link_groups`` over its capacity) rows, summed where first read; ``fabric_stats``:
    the solves and the bundles split."""

    events: int
    link_groups: list[str]
    link_bytes: np.ndarray
    link_occupancy_bytes: np.ndarray
    link_samples: Sequence[tuple[float, np.ndarray]] = field(default_factory=list)
    fabric_stats: dict = field(default_factory=dict)


@dataclass
class Timeline:
    """One job's replay: its op records, memory per rank class and step time, with the
    record of the machine it ran on (``machine``)."""

    records: list[OpRecord]
    memory: dict[str, list[tuple[float, int]]]     # class -> (time_s, bytes) in use
    peak_memory_bytes: dict[str, int]
    oom: dict[str, str | None]                      # class -> the op that ran out, or None
    iteration_time_s: float
    machine: MachineRecord
    capacity_bytes: int = 0
    meta: dict = field(default_factory=dict)
    memory_wait_s: dict = field(default_factory=dict)    # class -> seconds ops waited

    @property
    def events(self) -> int:
        """SimPy events of the machine's run (one job alone: this job's)."""
        return self.machine.events
