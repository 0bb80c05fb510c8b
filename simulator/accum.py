"""Identical micro-steps replayed a few times, not ``grad_accum`` times.

DDP and FSDP write every micro-step of gradient accumulation into the trace, so a step of
N micro-steps costs N replays of the same ops. Where the micro-steps are provably the same
(a strategy of :data:`UNROLLED`, no ``training.sequence_lengths`` histogram, so every
micro-batch has the same ops and costs) and N > :data:`THRESHOLD`, the step is replayed
with k, k+1 and k+2 micro-steps (:data:`REPLAYED`) and extrapolated. Each additive time X
(iteration, compute, communication, exposed communication, memory wait) becomes

    X(N) = X(k+2) + (N - k - 2) * (X(k+2) - X(k+1)),

accepted only when the step is periodic: for each X,
``|(X(k+2) - X(k+1)) - (X(k+1) - X(k))| <= PERIOD_RTOL * T(k+2)`` (T the iteration time),
and the peak memory and out-of-memory verdicts are the same at k+1 and k+2 micro-steps.
Throughput, TFLOP/s and MFU follow from the extrapolated time and the full step's batch.
When the check fails the step is replayed in full up to :data:`FULL_LIMIT` micro-steps,
and refused above it with the work a full replay would take. At or below THRESHOLD the
step is always replayed in full, so those results are the exact ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from .errors import ConfigError
from .metrics import Metrics
from .trace import Trace

THRESHOLD = 64            # micro-steps; up to here every micro-step is replayed
REPLAYED = (4, 5, 6)      # micro-steps of the three replayed steps (k, k+1, k+2)
PERIOD_RTOL = 1e-9        # periodicity tolerance, relative to the k+2 iteration time
FULL_LIMIT = 1024         # a step that is not periodic is replayed in full up to here
UNROLLED = ("ddp", "fsdp")   # strategies that write each micro-step into the trace
_ADDITIVE = ("iteration_time_s", "compute_s", "comm_s", "exposed_comm_s", "memory_wait_s")
_SAME = ("peak_memory_gib", "peak_memory_gib_per_class", "oom", "oom_at")


@dataclass(frozen=True)
class Extrapolation:
    """How an extrapolated step was obtained (reported beside its metrics)."""

    grad_accum: int                 # micro-steps of the step reported
    replayed: tuple[int, ...]       # micro-steps of each replayed step
    micro_step_s: float             # one steady micro-step: T(k+2) - T(k+1)
    events_replayed: int            # simulated events of all replays together

    def as_dict(self) -> dict:
        return {"grad_accum": self.grad_accum, "replayed_micro_steps": list(self.replayed),
                "micro_step_s": self.micro_step_s, "events_replayed": self.events_replayed,
                "timeline": f"the {self.replayed[-1]}-micro-step replay"}

    def note(self) -> str:
        ks = ", ".join(map(str, self.replayed))
        return (f"step extrapolated from replays of {ks} micro-steps (periodic, one "
                f"micro-step {self.micro_step_s:.6g} s) to grad_accum {self.grad_accum}; "
                f"a timeline shows the {self.replayed[-1]}-micro-step replay")


def brief(done: dict) -> str:
    """One clause for ``Extrapolation.as_dict()`` (``done``), as compare, capacity and study
    reports say it."""
    ks = ", ".join(map(str, done["replayed_micro_steps"]))
    return (f"extrapolated from replays of {ks} micro-steps to grad_accum "
            f"{done['grad_accum']} (periodic), not replayed in full")


@dataclass(frozen=True)
class AccumPlan:
    """The replayed traces of a step that may be extrapolated, and how to build it whole."""

    grad_accum: int
    traces: tuple[Trace, ...]            # one per REPLAYED
    full_trace: Callable[[], Trace]
    meta: dict                           # Trace.meta of the whole step

    def owns(self, trace: Trace) -> bool:
        """True while ``trace`` is still the plan's own (not replaced by a caller)."""
        return trace.classes is self.traces[-1].classes


def plan_accum(cfg, training, make: Callable[[object], Trace]) -> AccumPlan | None:
    """An :class:`AccumPlan` for ``cfg`` (a strategy config) when its micro-steps are
    identical and more than THRESHOLD; ``make(cfg)`` builds the trace of a config."""
    n = cfg.grad_accum
    if cfg.name not in UNROLLED or n <= THRESHOLD or training.sequence_lengths is not None:
        return None
    traces = tuple(make(cfg.model_copy(update={"grad_accum": k})) for k in REPLAYED)
    return AccumPlan(n, traces, lambda: make(cfg), _full_meta(traces[-1].meta, n))


def mapped(plan: AccumPlan, fn: Callable[[Trace], Trace]) -> AccumPlan:
    """``plan`` with ``fn`` applied to each replayed trace and to the whole step's."""
    full = plan.full_trace
    return AccumPlan(plan.grad_accum, tuple(fn(t) for t in plan.traces), lambda: fn(full()),
                     plan.meta)


def plan_trace(plan: AccumPlan) -> Trace:
    """The Trace a Setup shows for ``plan``: the last replayed one with the whole step's meta."""
    return replace(plan.traces[-1], meta=plan.meta)


def _full_meta(meta: dict, n: int) -> dict:
    """``meta`` of a k-micro-step trace rewritten for ``n`` micro-steps (batch and FLOPs scale
    with the micro-steps, see :func:`simulator.strategies.base.build_meta`)."""
    k, batch = meta["grad_accum"], meta["global_batch"]
    full = batch // k * n
    return {**meta, "grad_accum": n, "global_batch": full,
            "model_flops_per_iteration": meta["model_flops_per_iteration"] / batch * full}


def extrapolate(plan: AccumPlan, runs: list[Metrics], peak_flops: float
                ) -> tuple[Metrics, Extrapolation] | None:
    """The whole step's metrics from ``runs`` (the metrics of each replayed trace); None
    when the replays are not periodic."""
    m0, m1, m2 = runs
    scale = m2.iteration_time_s
    times = {}
    for key in _ADDITIVE:
        x0, x1, x2 = (getattr(m, key) for m in (m0, m1, m2))
        if abs((x2 - x1) - (x1 - x0)) > PERIOD_RTOL * scale:
            return None
        times[key] = x2 + (plan.grad_accum - REPLAYED[-1]) * (x2 - x1)
    if any(getattr(m1, key) != getattr(m2, key) for key in _SAME):
        return None
    t = times["iteration_time_s"]
    info = Extrapolation(plan.grad_accum, REPLAYED, m2.iteration_time_s - m1.iteration_time_s,
                         sum(m.events for m in runs))
    return _metrics(m2, times, plan.meta, peak_flops, info.events_replayed, t), info


def _metrics(last: Metrics, times: dict, meta: dict, peak_flops: float, events: int,
             t: float) -> Metrics:
    """``last`` with the extrapolated times and the rates they give (as compute_metrics)."""
    world = last.world_size
    samples = meta["global_batch"] / t
    tokens = samples * meta.get("tokens_per_sample", 0)
    tflops = meta["model_flops_per_iteration"] / t / world / 1e12
    return replace(last, **times, samples_per_s=samples, tokens_per_s=tokens,
                   tokens_per_s_per_gpu=tokens / world, tflops_per_gpu=tflops,
                   mfu=tflops * 1e12 / peak_flops if peak_flops else 0.0,
                   wait_s=max(t - times["compute_s"] - times["exposed_comm_s"], 0.0),
                   gpu_utilization=times["compute_s"] / t, events=events)


def full_trace(plan: AccumPlan) -> Trace:
    """The whole step's trace, for a step that is not periodic; ConfigError (with the work a
    full replay would take) above FULL_LIMIT micro-steps."""
    if plan.grad_accum <= FULL_LIMIT:
        return plan.full_trace()
    ops = [sum(len(c.ops) for c in tr.classes) for tr in plan.traces]
    total = ops[-1] + (plan.grad_accum - REPLAYED[-1]) * (ops[-1] - ops[-2])
    raise ConfigError(f"the micro-steps do not repeat exactly, so the step cannot be "
                      f"extrapolated; replaying all {plan.grad_accum} would take {total} "
                      f"ops per rank class; use at most {FULL_LIMIT}",
                      field="training.grad_accum")
