"""Replay an imported Trace on a topology, and compare it with what the profile recorded.

Compute and host time are the recorded durations; collectives are simulated on the
topology's fabric. By default each NCCL collective uses the algorithm and protocol its
recorded kernel used (``ncclKernel_AllReduce_RING_LL...``: ring, LL), so the replay costs
what NCCL actually ran; ``nccl_choice="auto"`` lets the simulator's tuner choose instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..cluster import Cluster
from ..collectives.constants import load_constants
from ..collectives.model import CollectiveModel
from ..compute import ComputeModel
from ..engine import MachineConfig, Timeline, replay
from ..errors import ConfigError
from ..hardware import gpu_spec
from ..metrics import Metrics, compute_metrics
from ..topology.build import load_cluster
from ..topology.loader import resolve_topology
from ..trace.schema import Trace

if TYPE_CHECKING:           # pandas loads once the replay has run (start-up time)
    import pandas as pd

NCCL_CHOICES = ("recorded", "auto")


class RecordedChoice:
    """A collective model that plans each (collective, size) with the algorithm and
    protocol NCCL recorded for it, and falls back to the tuner where those do not apply."""

    def __init__(self, model: CollectiveModel, choices: dict[tuple[str, int], tuple[str, str]]):
        self.model, self.choices = model, choices
        self.cluster = model.cluster

    def plan(self, op: str, size_bytes: int, ranks, algo: str = "auto", proto: str = "auto",
             root: int = 0):
        a, p = self.choices.get((op, size_bytes), (algo, proto))
        try:
            return self.model.plan(op, size_bytes, ranks, a, p, root)
        except ConfigError:
            return self.model.plan(op, size_bytes, ranks, algo, proto, root)


def recorded_choices(trace: Trace) -> dict[tuple[str, int], tuple[str, str]]:
    """(collective, size) -> (algorithm, protocol) read from the recorded NCCL kernels."""
    out = {}
    for cls in trace.classes:
        for op in cls.ops:
            a, p = op.attrs.get("algorithm"), op.attrs.get("protocol")
            if op.kind == "collective" and (a or p):
                out.setdefault((op.collective, op.size_bytes), (a or "auto", p or "auto"))
    return out


@dataclass
class ReplayResult:
    trace: Trace
    cluster: Cluster
    topology: Path
    timeline: Timeline
    metrics: Metrics


def replay_trace(trace: Trace, topology: str = "dgx-a100", nodes: int | None = None,
                 fidelity: str = "flow", nccl_choice: str = "recorded") -> ReplayResult:
    """Replay ``trace`` on ``topology`` (a file or shipped name).

    :raises ConfigError: unknown choice, or a topology with fewer GPUs than the trace's
        ranks.
    """
    if nccl_choice not in NCCL_CHOICES:
        raise ConfigError(f"unknown NCCL choice {nccl_choice!r}; choose "
                          f"{', '.join(NCCL_CHOICES)}", field="--nccl")
    path = resolve_topology(topology)
    k = load_constants()
    cluster = load_cluster(path, nodes, constants=k)
    if trace.world_size > cluster.n_gpus:
        raise ConfigError(f"the trace has {trace.world_size} ranks; the topology has only "
                          f"{cluster.n_gpus} GPUs (add --nodes)", source=str(path))
    model = CollectiveModel(cluster, k)
    if nccl_choice == "recorded":
        model = RecordedChoice(model, recorded_choices(trace))
    gpu = gpu_spec(cluster.G.graph["gpu"])
    compute = ComputeModel(gpu)
    tl = replay(trace, model, compute, machine=MachineConfig(fidelity=fidelity))
    metrics = compute_metrics(tl, trace.world_size, compute.peak_flops("matmul", "bf16"))
    return ReplayResult(trace, cluster, path, tl, metrics)


def collective_table(result: ReplayResult) -> pd.DataFrame:
    """Each collective of the first rank class: recorded and simulated duration (s)."""
    import pandas as pd                      # the table only: loaded after the replay
    cls = result.trace.classes[0]
    ops = {op.id: op for op in cls.ops
           if op.kind == "collective" and op.attrs.get("recorded_s") is not None}
    rows = []
    for r in result.timeline.records:
        op = ops.get(r.op_id) if r.cls == cls.id else None
        if op is None:
            continue
        rec = op.attrs.get("recorded_s")
        sim = r.end_s - r.start_s
        rows.append({"op_id": op.id, "collective": op.collective, "size_bytes": op.size_bytes,
                     "dtype": op.attrs.get("dtype"), "recorded_algo": op.attrs.get("algorithm"),
                     "recorded_proto": op.attrs.get("protocol"), "algorithm": r.algorithm,
                     "protocol": r.protocol, "recorded_s": rec, "simulated_s": sim,
                     "error": (sim - rec) / rec if rec else float("nan")})
    return pd.DataFrame(rows).sort_values("op_id", ignore_index=True) if rows else \
        pd.DataFrame(columns=["op_id", "collective", "size_bytes", "recorded_s", "simulated_s",
                              "error"])


def with_recorded_collectives(trace: Trace) -> Trace:
    """The same trace with every collective taking its recorded time (a check of the
    imported dependencies: replayed, it should give back the recorded iteration)."""
    from dataclasses import replace
    classes = []
    for cls in trace.classes:
        ops = [replace(op, kind="compute", duration_s=op.attrs.get("recorded_s", 0.0),
                       op_class="comm", collective="", size_bytes=0, comm="")
               if op.kind == "collective" else op for op in cls.ops]
        classes.append(replace(cls, ops=ops))
    return replace(trace, classes=classes, communicators={})


def device_busy_s(result: ReplayResult) -> float:
    """Seconds some GPU stream of the first rank class was busy (compute or comm)."""
    from ..metrics.summary import union_length
    cls = result.trace.classes[0].id
    return union_length([(r.start_s, r.end_s) for r in result.timeline.records
                         if r.cls == cls and r.stream.startswith(("cuda:", "nccl:"))])
