"""The machine: one simulation's clock, cluster and fabric, on which jobs run.

A :class:`Machine` owns what every job placed on it shares: the SimPy environment
(:class:`~simulator.sim.Environment`), the cluster and its fabric with the fabric's link
counters. Jobs (:class:`~simulator.engine.job.Job`) put their streams, transfers and memory
on it; :func:`run_jobs` runs them together until they are done.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..cluster import Cluster
from ..network.fabric import Fabric, make_fabric
from ..sim import Environment
from .records import MachineRecord


@dataclass(frozen=True, kw_only=True)
class MachineConfig:
    """Knobs of the machine. ``fidelity``: the fabric model by name
    (:data:`~simulator.network.fabric.FABRICS`); ``host_bytes_per_s``: bytes/s of a copy
    between a GPU and its host's memory."""

    fidelity: str = "flow"
    host_bytes_per_s: float = 25e9


class Machine:
    """The environment, the cluster and its fabric (built from ``config.fidelity``, or by
    ``make_fabric(env, capacity_bytes_per_s)`` where given: a test's own fabric)."""

    def __init__(self, cluster: Cluster, config: MachineConfig | None = None,
                 make: Callable[[Environment, np.ndarray], Fabric] | None = None):
        self.cluster = cluster
        self.config = config or MachineConfig()
        self.env = Environment()
        capacity = cluster.capacity_bytes_per_s
        self.fabric = (make(self.env, capacity) if make is not None
                       else make_fabric(self.config.fidelity, self.env, capacity))
        self.link_groups, group_of_link = cluster.link_type_groups()
        self.fabric.track(group_of_link, len(self.link_groups))

    def record(self) -> MachineRecord:
        """What the machine did so far: its events and its fabric's counters (copies)."""
        fabric = self.fabric
        return MachineRecord(self.env.events_processed, self.link_groups,
                             fabric.link_bytes.copy(), fabric.link_occupancy_bytes.copy(),
                             fabric.deferred_samples(),
                             {"solves": fabric.solves, "splits": fabric.splits})


def run_jobs(machine: Machine, jobs: Sequence) -> None:
    """Run ``machine`` until every event of ``jobs`` is done. Where the simulation runs dry
    with memory requests queued (a working set that does not fit), the oldest queued
    request of all is let through over capacity (the class is out of memory there) and the
    run goes on."""
    machine.env.run()
    while True:
        stuck = [pool for job in jobs for pool in job.pools.values() if pool.waiting]
        if not stuck:
            return
        min(stuck, key=lambda p: p.oldest_position).admit_oldest()     # marks the OOM
        machine.env.run()
