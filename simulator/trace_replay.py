"""Replay a Trace file on a topology: an imported profile, or one ``clustersim trace`` wrote.

An imported trace's compute and host time are the recorded durations; collectives are
simulated on the topology's fabric. By default each NCCL collective uses the algorithm and
protocol its recorded kernel used (``ncclKernel_AllReduce_RING_LL...``: ring, LL), so the
replay costs what NCCL actually ran; ``nccl_choice="auto"`` lets the simulator's tuner
choose instead.

A generated trace carries how ``run`` ran it (``meta.run``, :func:`simulator.pipeline.run_meta`:
the training precision, attention kernels, model family, overlap slowdown, rank-to-rank
variability, seed and NCCL knobs), so its replay on the scenario's topology costs what
``run`` costs: the same compute model, job knobs, GPU memory limit and peak FLOP/s. Each
value is checked; a trace without ``meta.run`` runs at bf16 with the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from collections.abc import Mapping

from pydantic import ValidationError

from .choices import ATTENTION
from .cluster import Cluster
from .constants import load_constants
from .collectives.model import CollectiveModel
from .collectives.nccl_config import NcclConfig
from .compute import ComputeModel
from .engine import JobConfig, MachineConfig, Timeline, replay
from .energy.power import capped_gpu
from .engine.variability import resolve_sigmas
from .errors import ConfigError, validation_error
from .hardware import check_training_precision, gpu_spec
from .metrics import Metrics, compute_metrics
from .models.spec import FAMILIES as MODEL_FAMILIES
from .precision import OP_PRECISIONS, compute_precision
from .topology.build import load_cluster
from .topology.loader import resolve_topology
from .trace.schema import Trace

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


@dataclass(frozen=True)
class RunSettings:
    """How a trace is to be run (``meta.run``): the job knobs, the attention kernels, the
    training precision the peak FLOP/s are counted at, the NCCL knobs, and the family of
    the model it was generated from (None: not said, as in an imported trace)."""

    job: JobConfig
    attention: str
    precision: str
    nccl: NcclConfig
    fp8_attention: bool = False
    model_family: str | None = None


def run_settings(meta: Mapping) -> RunSettings:
    """The settings in ``meta["run"]`` (the defaults where the trace has none).

    :raises ConfigError: naming ``meta.run.<key>`` for a value that is not one.
    """
    run = meta.get("run", {})
    if not isinstance(run, Mapping):
        raise ConfigError(f"must be a mapping, got {type(run).__name__}", field="meta.run")
    unknown = sorted(set(run) - {"precision", "attention", "fp8_attention", "model_family",
                                 "overlap_slowdown", "variability", "seed", "nccl"})
    if unknown:
        raise ConfigError("unknown key", field=f"meta.run.{unknown[0]}")
    precision = _one_of(run, "precision", OP_PRECISIONS, "bf16")
    attention = _one_of(run, "attention", ATTENTION, "sdpa")
    fp8_attention = run.get("fp8_attention", False)
    if not isinstance(fp8_attention, bool):
        raise ConfigError(f"must be true or false, got {fp8_attention!r}",
                          field="meta.run.fp8_attention")
    model_family = run.get("model_family")
    if model_family is not None:
        model_family = _one_of(run, "model_family", MODEL_FAMILIES, "")
    overlap = run.get("overlap_slowdown", 0.0)
    if isinstance(overlap, bool) or not isinstance(overlap, (int, float)) \
            or not 0.0 <= overlap <= 1000.0:
        raise ConfigError(f"must be a number in [0, 1000], got {overlap!r}",
                          field="meta.run.overlap_slowdown")
    seed = run.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"must be an integer, got {seed!r}", field="meta.run.seed")
    variability = run.get("variability")
    if variability is not None:
        if not isinstance(variability, Mapping):
            raise ConfigError(f"must be a mapping of op class to sigma, got {variability!r}",
                              field="meta.run.variability")
        try:
            variability = resolve_sigmas(variability)
        except ConfigError as exc:
            raise ConfigError(exc.reason, field=f"meta.run.{exc.field.split('.', 1)[-1]}") \
                from None
    try:
        nccl = NcclConfig(**run.get("nccl", {}))
    except (TypeError, ValidationError) as exc:
        if isinstance(exc, TypeError):
            raise ConfigError("must be a mapping of NCCL knobs", field="meta.run.nccl") \
                from None
        raise validation_error(exc, prefix="meta.run.nccl") from None
    return RunSettings(JobConfig(overlap_slowdown=float(overlap),
                                 precision=compute_precision(precision),
                                 variability=variability, seed=seed),
                       attention, precision, nccl, fp8_attention, model_family)


def _one_of(run: Mapping, key: str, choices: tuple, default: str) -> str:
    value = run.get(key, default)
    if value not in choices:
        raise ConfigError(f"must be one of {', '.join(choices)}, got {value!r}",
                          field=f"meta.run.{key}")
    return value


def replay_trace(trace: Trace, topology: str = "dgx-a100", nodes: int | None = None,
                 fidelity: str = "flow", nccl_choice: str = "recorded",
                 cluster: Cluster | None = None) -> ReplayResult:
    """Replay ``trace`` on ``topology`` (a file or shipped name), or on ``cluster`` (one
    already built: a scenario's, with its what-ifs), as its ``meta.run`` says.

    :raises ConfigError: unknown choice, a topology with fewer GPUs than the trace's ranks,
        a ``meta.run`` value that is not one, or a precision the GPU cannot run.
    """
    if nccl_choice not in NCCL_CHOICES:
        raise ConfigError(f"unknown NCCL choice {nccl_choice!r}; choose "
                          f"{', '.join(NCCL_CHOICES)}", field="--nccl")
    settings = run_settings(trace.meta)
    path = resolve_topology(topology) if cluster is None else Path("<cluster>")
    k = load_constants()
    if cluster is None:
        cluster = load_cluster(path, nodes, constants=k)
    if trace.world_size > cluster.n_gpus:
        raise ConfigError(f"the trace has {trace.world_size} ranks; the topology has only "
                          f"{cluster.n_gpus} GPUs (add --nodes)", source=str(path))
    model = CollectiveModel(cluster, k, settings.nccl)
    if nccl_choice == "recorded":
        model = RecordedChoice(model, recorded_choices(trace))
    gpu = capped_gpu(gpu_spec(cluster.G.graph["gpu"]), None)   # at its own board limit
    try:
        check_training_precision(gpu, settings.precision)
        compute = ComputeModel(gpu, attention=settings.attention,
                               strategy=trace.meta.get("strategy"),
                               fp8_attention=settings.fp8_attention,
                               model_family=settings.model_family)
    except ConfigError as exc:      # what this GPU cannot run of the trace's settings
        raise ConfigError(exc.reason, field="meta.run." + {
            "training.precision": "precision", "training.fp8_attention": "fp8_attention"}.get(
                exc.field, "attention")) from None
    tl = replay(trace, model, compute, settings.job, MachineConfig(fidelity=fidelity),
                gpu.memory_capacity_bytes)
    metrics = compute_metrics(tl, trace.world_size,
                              compute.peak_flops("matmul", settings.precision))
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
    from .metrics.summary import union_length
    cls = result.trace.classes[0].id
    return union_length([(r.start_s, r.end_s) for r in result.timeline.records
                         if r.cls == cls and r.stream.startswith(("cuda:", "nccl:"))])
