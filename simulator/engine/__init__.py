"""Replay engine: runs Traces on a machine with SimPy (machine, jobs, placement)."""

from .job import Job, JobConfig, kernel_time_s
from .machine import Machine, MachineConfig, run_jobs
from .placement import Placement
from .records import COMM_KINDS, MachineRecord, OpRecord, Timeline
from .replay import replay

__all__ = ["COMM_KINDS", "Job", "JobConfig", "Machine", "MachineConfig", "MachineRecord",
           "OpRecord", "Placement", "Timeline", "kernel_time_s", "replay", "run_jobs"]
