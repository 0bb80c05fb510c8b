"""Replay a :class:`~simulator.trace.Trace` alone on a cluster: one job on an empty machine.

The work is done by the machine (:mod:`simulator.engine.machine`: environment, cluster,
fabric) and the job (:mod:`simulator.engine.job`: streams, dependencies, rendezvous,
memory); :func:`replay` puts the trace's ranks on the cluster's first GPUs and runs the two.
"""

from __future__ import annotations

from ..gcpause import gc_paused
from ..lifetime import keep
from ..trace.schema import Trace
from .job import Job, JobConfig
from .machine import Machine, MachineConfig, run_jobs
from .placement import Placement
from .records import Timeline
from .seams import CollectivePlanner, ComputeTimer


def replay(trace: Trace, collectives: CollectivePlanner, compute: ComputeTimer,
           job: JobConfig | None = None, machine: MachineConfig | None = None,
           capacity_bytes: int = 0, *, placement: Placement | None = None,
           checked: bool = False) -> Timeline:
    """Run one iteration of ``trace`` on ``collectives.cluster``, its ranks on the GPUs of
    ``placement`` (the first GPUs when None); ``capacity_bytes`` (GPU memory) enables the
    OOM check. ``checked``: the caller validated ``trace`` and has not changed it since
    (the pipeline's generated traces), so it is not validated again.

    :raises ValueError: if the trace breaks its contract (see :meth:`Trace.validate`).
    :raises ClusterSimError: if the replay deadlocks (ops that can never finish).
    """
    if not checked:
        trace.validate()
    # The events, records and plans of a replay are freed by reference counting (it makes
    # no garbage cycles while it runs); the cyclic collector would only walk them, and the
    # trace and cluster, again and again.
    with gc_paused():
        on = Machine(collectives.cluster, machine)
        one = Job(on, trace, placement or Placement.first(trace.world_size), collectives,
                  compute, job, capacity_bytes)
        one.start()
        run_jobs(on, [one])
        timeline = one.timeline(on.record())
        keep("replay", one)     # (and its machine) freed at exit, not object by object
        return timeline
