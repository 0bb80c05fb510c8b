"""From a :class:`~simulator.engine.Timeline` to the numbers people ask for.

Time breakdown of the representative rank class (the one that finishes last):
``compute_s`` is the union of its GPU work (:data:`COMPUTE_KINDS`: kernels and host-device
copies), ``comm_s`` the union of its communication ops, ``exposed_comm_s`` the part of
``comm_s`` not hidden under compute, and ``wait_s`` what is left of the iteration (waiting
on dependencies, collectives' stragglers, and host work: ``delay`` ops such as a CPU
optimizer step, Horovod's cycle wait or a recorded host gap keep no GPU busy):
``compute_s + exposed_comm_s + wait_s == iteration_time_s``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from operator import attrgetter

import numpy as np

from ..engine.records import COMM_KINDS, Timeline

GIB = float(1 << 30)
COMPUTE_KINDS = ("compute", "memcpy")     # what keeps a GPU busy; ``delay`` is host work


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by ``intervals`` (seconds)."""
    total, end = 0.0, -np.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _intersection_length(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    return union_length(a) + union_length(b) - union_length(a + b)


@dataclass(frozen=True)
class Metrics:
    """One iteration's headline numbers (SI units, GiB for memory)."""

    iteration_time_s: float
    samples_per_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    mfu: float
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    wait_s: float
    memory_wait_s: float
    gpu_utilization: float
    peak_memory_gib: float
    peak_memory_gib_per_class: dict
    oom: bool
    oom_at: dict
    world_size: int
    events: int

    def as_dict(self) -> dict:
        return asdict(self)

    def waiting(self, extra_s: float) -> "Metrics":
        """This step made ``extra_s`` seconds longer by a wait in which every GPU idles (for
        its input): the same work over the longer step, the wait in ``wait_s``."""
        if extra_s <= 0:
            return self
        t = self.iteration_time_s + extra_s
        r = self.iteration_time_s / t
        return replace(self, iteration_time_s=t, samples_per_s=self.samples_per_s * r,
                       tokens_per_s=self.tokens_per_s * r,
                       tokens_per_s_per_gpu=self.tokens_per_s_per_gpu * r,
                       tflops_per_gpu=self.tflops_per_gpu * r, mfu=self.mfu * r,
                       wait_s=self.wait_s + extra_s,
                       gpu_utilization=self.gpu_utilization * r)


def compute_metrics(tl: Timeline, world_size: int, peak_flops: float) -> Metrics:
    """Metrics of ``tl``; ``peak_flops`` is one GPU's peak at the run's precision (for MFU)."""
    t = tl.iteration_time_s
    cls = critical_class(tl)
    recs = [r for r in tl.records if r.cls == cls]
    compute = [(r.start_s, r.end_s) for r in recs if r.kind in COMPUTE_KINDS]
    comm = [(r.start_s, r.end_s) for r in recs if r.kind in COMM_KINDS]
    compute_s, comm_s = union_length(compute), union_length(comm)
    exposed = comm_s - _intersection_length(compute, comm)
    meta = tl.meta
    samples = meta.get("global_batch", 0) / t if t > 0 else 0.0
    tokens = samples * meta.get("tokens_per_sample", 0)
    flops = meta.get("model_flops_per_iteration", 0.0)
    tflops = flops / t / world_size / 1e12 if t > 0 else 0.0
    peak = {c: b / GIB for c, b in tl.peak_memory_bytes.items()}
    return Metrics(
        iteration_time_s=t, samples_per_s=samples, tokens_per_s=tokens,
        tokens_per_s_per_gpu=tokens / world_size, tflops_per_gpu=tflops,
        mfu=tflops * 1e12 / peak_flops if peak_flops else 0.0,
        compute_s=compute_s, comm_s=comm_s, exposed_comm_s=exposed,
        wait_s=max(t - compute_s - exposed, 0.0),
        memory_wait_s=tl.memory_wait_s.get(cls, 0.0),
        gpu_utilization=compute_s / t if t > 0 else 0.0,
        peak_memory_gib=max(peak.values(), default=0.0), peak_memory_gib_per_class=peak,
        oom=any(v is not None for v in tl.oom.values()),
        oom_at={c: v for c, v in tl.oom.items() if v is not None},
        world_size=world_size, events=tl.events)


def critical_class(tl: Timeline) -> str:
    """The rank class that finishes last (the one the breakdown describes): of the classes
    whose last op ends at the latest end of all, the first by name. (The ends read by C
    into one array, the few records at that end looked at: a big step has a record per
    op of every class.)"""
    records = tl.records
    if not records:
        return ""
    end = np.fromiter(map(attrgetter("end_s"), records), float, len(records))
    latest = float(end.max())
    if not math.isfinite(latest):       # (no such replay: each class's own maximum)
        ends: dict[str, float] = {}
        for r in records:
            ends[r.cls] = max(ends.get(r.cls, 0.0), r.end_s)
        return max(sorted(ends), key=lambda c: ends[c])
    if latest <= 0.0:       # each class's maximum counts from 0: all tie, the first name
        return min(r.cls for r in records)
    return min(records[i].cls for i in np.flatnonzero(end == latest).tolist())
