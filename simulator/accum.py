"""Identical micro-steps replayed a few times, not ``grad_accum`` times.

DDP and FSDP write every micro-step of gradient accumulation into the trace, and a pipeline
schedule (:mod:`simulator.strategies.parallel`) every micro-batch of the step, so a step of
N micro-steps costs N replays of the same ops. Where the micro-steps are provably the same
(a strategy of :data:`UNROLLED` or a parallel plan, no ``training.sequence_lengths``
histogram, so every micro-batch has the same ops and costs), the step is replayed with k,
k+d and k+2d micro-steps and extrapolated (:func:`replayed_counts`):

* DDP, FSDP and plans without a pipeline: k = 4, d = 1 (:data:`REPLAYED`), for N >
  :data:`THRESHOLD`;
* pipelines: k = :data:`PIPELINE_FILL` x pp, past the warm-up and cool-down of every rank
  (1F1B's ``pp - r - 1`` warm-up forwards, interleaved 1F1B's ``2 (pp - r - 1) + (vp -
  1) pp`` chunk forwards, ZB-V's ``2 pp - 1`` micro-batches that fill the V) so that each
  replay has a steady phase; d = pp for ``interleaved_1f1b`` (its micro-batch count is a
  multiple of pp), else 1; only when N is above THRESHOLD and at least :data:`WORTH`
  times the micro-batches the replays run together: a step whose replays are refused is
  then replayed in full, and the refused replays cost at most half of that again (GPT
  530B over 35 stages, 280 micro-batches, replays of 70-72 refused: 219 s and 3.3 GB
  replayed in full, 432 s and 4.5 GB with the replays first). GPipe holds
  every micro-batch's activations at once (its memory grows with N), so it is not
  extrapolated; above :data:`FULL_LIMIT` it is refused before any trace is built.

Each additive time X (iteration, compute, communication, exposed communication, memory
wait) becomes

    X(N) = X(k+2d) + (N - k - 2d) / d * (X(k+2d) - X(k+d)),

(exact for the ideal pipeline: 1F1B's step is (N + p - 1)(t_f + t_b), a line in N)
accepted when the step is periodic: the iteration time T exactly,
no rank class busier by one more step than T grows (:func:`class_busy`: GB200's Llama 3.1
405B at PP16 x VP8 grows 2.9049 s per 16 micro-batches from 32 to 64 while its busiest
stage's work grows 2.9297 s, the slope of the full 384-micro-batch step: that stage sets
the pace only later; see the converging case below),
``|(T(k+2d) - T(k+d)) - (T(k+d) - T(k))| <= PERIOD_RTOL * T(k+2d)``, the peak memory and
out-of-memory verdicts the same at k+d and k+2d micro-steps, and each time of the
breakdown within ``BREAKDOWN_RTOL`` of the step's increment ``T(k+2d) - T(k+d)`` (or
PERIOD_RTOL of T): where a pipeline's step repeats exactly, the share of a send or a
collective hidden under compute can still fall differently from one replay to the next
(GB200's Llama 3.1 405B, PP16 x VP8: communication 0.485 then 0.483 s per 16
micro-batches, exposed 0.062 then 0.072, for a step increment of 2.905 s), so the
extrapolated breakdown is good to about 1% of the step, the step itself to PERIOD_RTOL.

Or the step converges on its busiest class's pace (:func:`pace`): that class's own work
repeats exactly, but it still idles, less from one replay to the next and by less each
time (a pipeline whose slowest stage sets the pace only gradually: the last stage of GPT-3
175B in FP8 on 128 H100, TP8 x PP16 x VP2, whose step grows 0.608810, 0.608963, 0.609024 s
per 16 micro-batches from 32 to 80 towards that stage's 0.609117 s; ZB-V's first replays).
The step is that class's busy time B plus its idle time, so

    T(N) = T(k+2d) + (N - k - 2d) / d * (B(k+2d) - B(k+d)),

the idle time held at the last replay's: as it can fall at most by its last fall per
increment still to come, T(N) is at most (N - k - 2d) / d times that fall above the full
step, and the extrapolation is taken when that bound is within CONVERGE_RTOL (0.1%, issue
43's exactness) of the step, and reported with it. The breakdown is extrapolated as above.
Throughput, TFLOP/s and MFU follow from the extrapolated time and the full step's batch.
When neither holds the step is replayed in full up to :data:`FULL_LIMIT` micro-steps,
and refused above it with the work a full replay would take. At or below THRESHOLD the
step is always replayed in full, so those results are the exact ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from .errors import ConfigError
from .metrics import Metrics
from .metrics.summary import union_length
from .trace import Trace

THRESHOLD = 64            # micro-steps; up to here every micro-step is replayed
REPLAYED = (4, 5, 6)      # micro-steps of the three replayed steps (k, k+1, k+2)
PIPELINE_FILL = 2         # a pipeline's first replay runs this many micro-batches per stage
PIPELINE_DEEPEST = 16     # ... and its deepest this many (k grows by pp while not periodic)
WORTH = 2                 # a pipeline's replays together run at most 1/WORTH of its step
PERIOD_RTOL = 1e-9        # periodicity tolerance, relative to the k+2 iteration time
CONVERGE_RTOL = 1e-3      # a step converging on its busiest class's pace: the most the
                          # reported step may be above the full replay, relative to it
                          # (issue 43's exactness, 0.1%)
BREAKDOWN_RTOL = 0.01     # ... of the breakdown's times, relative to the step's increment
FULL_LIMIT = 1024         # a step that is not periodic is replayed in full up to here
UNROLLED = ("ddp", "fsdp")   # strategies that write each micro-step into the trace
_ADDITIVE = ("iteration_time_s", "compute_s", "comm_s", "exposed_comm_s", "memory_wait_s")
_SAME = ("peak_memory_gib", "peak_memory_gib_per_class", "oom", "oom_at")
_BUSY = ("compute", "memcpy", "collective")     # record kinds that keep a class busy


@dataclass(frozen=True)
class Extrapolation:
    """How an extrapolated step was obtained (reported beside its metrics)."""

    grad_accum: int                 # micro-steps of the step reported
    replayed: tuple[int, ...]       # micro-steps of each replayed step
    micro_step_s: float             # one steady micro-step: (T(k+2d) - T(k+d)) / d, or the
                                    # pace class's work per micro-step
    events_replayed: int            # simulated events of all replays together
    pace_class: str | None = None   # the busiest rank class whose pace the step converges
                                    # on (None: the replays repeat exactly)
    bound_s: float = 0.0            # the most the step may be above the full replay

    def as_dict(self) -> dict:
        return {"grad_accum": self.grad_accum, "replayed_micro_steps": list(self.replayed),
                "micro_step_s": self.micro_step_s, "events_replayed": self.events_replayed,
                "pace": self.pace_text(), "bound_s": self.bound_s,
                "timeline": f"the {self.replayed[-1]}-micro-step replay"}

    def pace_text(self) -> str:
        """How the replays repeat: ``periodic`` or ``converging on <class>``."""
        return "periodic" if self.pace_class is None else f"converging on {self.pace_class}"

    def note(self) -> str:
        ks = ", ".join(map(str, self.replayed))
        bound = (f", at most {self.bound_s:.3g} s above a full replay"
                 if self.pace_class is not None else "")
        return (f"step extrapolated from replays of {ks} micro-steps ({self.pace_text()}, one "
                f"micro-step {self.micro_step_s:.6g} s{bound}) to grad_accum "
                f"{self.grad_accum}; a timeline shows the {self.replayed[-1]}-micro-step "
                f"replay")


def brief(done: dict) -> str:
    """One clause for ``Extrapolation.as_dict()`` (``done``), as compare, capacity and study
    reports say it."""
    ks = ", ".join(map(str, done["replayed_micro_steps"]))
    return (f"extrapolated from replays of {ks} micro-steps to grad_accum "
            f"{done['grad_accum']} ({done.get('pace', 'periodic')}), not replayed in full")


@dataclass(frozen=True)
class AccumPlan:
    """The replayed traces of a step that may be extrapolated, and how to build it whole."""

    grad_accum: int
    traces: tuple[Trace, ...]            # one per entry of ``replayed``
    full_trace: Callable[[], Trace]
    meta: dict                           # Trace.meta of the whole step
    replayed: tuple[int, int, int] = REPLAYED   # micro-steps of each replayed trace
    deeper: tuple = ()                   # a pipeline's next (k, k+d, k+2d), tried in order
    make: Callable[[int], Trace] | None = None   # the trace of k micro-steps (for ``deeper``)

    def owns(self, trace: Trace) -> bool:
        """True while ``trace`` is still the plan's own (not replaced by a caller)."""
        return trace.classes is self.traces[-1].classes


def check_whole(cfg) -> None:
    """Refuse to build a whole step of more than FULL_LIMIT micro-steps of a strategy that
    writes each one into the trace (``clustersim trace``, a full replay asked for).

    :raises ConfigError: (``training.grad_accum``).
    """
    if (cfg.name in UNROLLED or hasattr(cfg, "plan")) and cfg.grad_accum > FULL_LIMIT:
        raise ConfigError(f"a whole step of {cfg.grad_accum} micro-steps is not built (each "
                          f"is written into the trace): use at most {FULL_LIMIT}",
                          field="training.grad_accum")


def replayed_counts(cfg, world_size: int) -> tuple[int, int, int] | None:
    """The micro-steps (k, k+d, k+2d) of the three replays of ``cfg``'s step (see the
    module doc), None where its micro-steps are not written one by one or do not repeat
    (GPipe's memory grows with them).

    :raises ConfigError: (``training.grad_accum``) for a GPipe step above FULL_LIMIT.
    """
    if cfg.name in UNROLLED:
        return REPLAYED
    if not hasattr(cfg, "plan"):
        return None
    try:
        plan = cfg.plan(world_size)
    except ConfigError:           # the trace builder says why, where it belongs
        return None
    if plan.pp == 1:
        return REPLAYED
    if plan.schedule == "gpipe":
        if cfg.grad_accum > FULL_LIMIT:
            raise ConfigError(f"gpipe holds every micro-batch's activations at once, so its "
                              f"step is replayed in full: {cfg.grad_accum} micro-batches, use "
                              f"at most {FULL_LIMIT}", field="training.grad_accum")
        return None
    d = plan.pp if plan.schedule == "interleaved_1f1b" else 1
    k = PIPELINE_FILL * plan.pp
    return (k, k + d, k + 2 * d)


def plan_accum(cfg, training, make: Callable[[object], Trace],
               world_size: int = 0) -> AccumPlan | None:
    """An :class:`AccumPlan` for ``cfg`` (a strategy config on ``world_size`` GPUs) when
    its micro-steps are identical and more than THRESHOLD (and, for a pipeline, at least
    WORTH times what its replays run together); ``make(cfg)`` builds the trace of a
    config."""
    n = cfg.grad_accum
    if n <= THRESHOLD or training.sequence_lengths is not None:
        return None
    counts = replayed_counts(cfg, world_size)
    if counts is None or (counts != REPLAYED and n < WORTH * sum(counts)):
        return None
    if n % (counts[1] - counts[0]):   # not a whole number of steps: the builder refuses it
        return None

    def of(k: int) -> Trace:
        return make(cfg.model_copy(update={"grad_accum": k}))

    traces = tuple(of(k) for k in counts)
    return AccumPlan(n, traces, lambda: make(cfg), _full_meta(traces[-1].meta, n), counts,
                     _deeper(counts, n) if counts != REPLAYED else (), of)


def _deeper(counts: tuple[int, int, int], n: int) -> tuple:
    """A pipeline's later replays, tried in turn while the earlier ones are not periodic:
    k grows by one stage's share (k / PIPELINE_FILL, that is pp) up to PIPELINE_DEEPEST
    micro-batches per stage, while all the replays together run at most 1/WORTH of the
    ``n`` micro-batches of the full replay (a replay of a count already run is not run
    again)."""
    k, d = counts[0], counts[1] - counts[0]
    pp = k // PIPELINE_FILL
    done, out = set(counts), []
    while k + pp <= PIPELINE_DEEPEST * pp:
        k += pp
        nxt = (k, k + d, k + 2 * d)
        done |= set(nxt)
        if WORTH * sum(done) > n:
            break
        out.append(nxt)
    return tuple(out)


def mapped(plan: AccumPlan, fn: Callable[[Trace], Trace]) -> AccumPlan:
    """``plan`` with ``fn`` applied to each replayed trace and to the whole step's."""
    full, make = plan.full_trace, plan.make
    return AccumPlan(plan.grad_accum, tuple(fn(t) for t in plan.traces), lambda: fn(full()),
                     plan.meta, plan.replayed, plan.deeper,
                     (lambda k: fn(make(k))) if make else None)


def deepened(plan: AccumPlan) -> AccumPlan | None:
    """``plan`` replayed with its next, longer micro-steps (a pipeline whose replays were
    not yet periodic), None when it has no longer ones (replay the step in full). A
    replayed trace of a count it keeps is kept, not built again."""
    if not plan.deeper:
        return None
    counts = plan.deeper[0]
    have = dict(zip(plan.replayed, plan.traces))
    traces = tuple(have[k] if k in have else plan.make(k) for k in counts)
    return replace(plan, traces=traces, replayed=counts, deeper=plan.deeper[1:])


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


def class_busy(timeline) -> dict[str, float]:
    """Rank class -> the time it keeps its GPUs busy (compute, copies and collectives; not
    a send or receive, which may wait on a peer) in ``timeline``."""
    spans: dict[str, list] = {}
    for r in timeline.records:
        if r.kind in _BUSY:
            spans.setdefault(r.cls, []).append((r.start_s, r.end_s))
    return {cls: union_length(v) for cls, v in spans.items()}


def extrapolate(plan: AccumPlan, runs: list[Metrics], peak_flops: float,
                events: int | None = None, busy: list[dict] | None = None
                ) -> tuple[Metrics, Extrapolation] | None:
    """The whole step's metrics from ``runs`` (the metrics of each replayed trace); None
    when the replays are neither periodic nor converging on their busiest class's pace
    (:func:`pace`). ``events``: of every replay run (a pipeline's earlier, not yet periodic
    ones included), by default those of ``runs``. ``busy``: :func:`class_busy` of each of
    the three replays."""
    m0, m1, m2 = runs
    last, d = plan.replayed[-1], plan.replayed[-1] - plan.replayed[-2]
    later = (plan.grad_accum - last) // d        # increments of d micro-steps still to come
    found = pace(runs, busy, later)
    if found is None:
        return None
    step, pace_class, bound = found
    times = {"iteration_time_s": m2.iteration_time_s + later * step}
    for key in _ADDITIVE[1:]:
        x0, x1, x2 = (getattr(m, key) for m in (m0, m1, m2))
        if abs((x2 - x1) - (x1 - x0)) > max(PERIOD_RTOL * m2.iteration_time_s,
                                            BREAKDOWN_RTOL * abs(step)):
            return None
        times[key] = x2 + later * (x2 - x1)
    if any(getattr(m1, key) != getattr(m2, key) for key in _SAME):
        return None
    t = times["iteration_time_s"]
    info = Extrapolation(plan.grad_accum, plan.replayed, step / d,
                         sum(m.events for m in runs) if events is None else events,
                         pace_class, bound)
    return _metrics(m2, times, plan.meta, peak_flops, info.events_replayed, t), info


def pace(runs: list[Metrics], busy: list[dict] | None, later: int
         ) -> tuple[float, str | None, float] | None:
    """How the step grows per ``d`` micro-steps past the last of three replays ``d`` apart
    (``runs``, ``busy`` their :func:`class_busy`; ``later``: the increments still to come):
    (the increment, the class whose pace it is or None, the most the extrapolated step may
    be above the full one), or None.

    * **periodic**: the step's increment the same within PERIOD_RTOL and no class busier by
      more than it (bound 0);
    * **converging on the busiest class's pace**: the class whose busy time grows most
      repeats its own work exactly, but still has idle time that shrinks from one replay to
      the next, and shrinks less each time (a pipeline whose slowest stage sets the pace
      only after more micro-batches). The step is that class's busy time plus its idle
      time; its busy time is a line, and its idle time, falling ever more slowly, falls by
      at most the last fall per increment still to come. The step is extrapolated at the
      class's pace with the idle time of the last replay (an upper estimate, at most
      ``later x`` the last fall above), accepted when that bound is within CONVERGE_RTOL of
      the step.
    """
    t0, t1, t2 = (m.iteration_time_s for m in runs)
    step, tol = t2 - t1, PERIOD_RTOL * t2
    periodic = abs((t2 - t1) - (t1 - t0)) <= tol
    if busy is None:
        return (step, None, 0.0) if periodic else None
    grows = {c: busy[2][c] - busy[1][c] for c in sorted(busy[2])}
    if periodic and all(g <= step + tol for g in grows.values()):
        return step, None, 0.0
    cls = max(grows, key=grows.__getitem__)
    b0, b1, b2 = (b[cls] for b in busy)
    if abs((b2 - b1) - (b1 - b0)) > tol:
        return None                                 # its own work does not repeat
    fall, before = (t1 - b1) - (t2 - b2), (t0 - b0) - (t1 - b1)   # its idle time's falls
    if not -tol <= fall <= before + tol:
        return None
    bound = later * max(fall, 0.0)
    step_s = t2 + later * grows[cls]
    return (grows[cls], cls, bound) if bound <= CONVERGE_RTOL * step_s else None


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
    last, d = plan.replayed[-1], plan.replayed[-1] - plan.replayed[-2]
    total = ops[-1] + (plan.grad_accum - last) // d * (ops[-1] - ops[-2])
    raise ConfigError(f"the micro-steps do not repeat exactly, so the step cannot be "
                      f"extrapolated; replaying all {plan.grad_accum} would take {total} "
                      f"ops per rank class; use at most {FULL_LIMIT}",
                      field="training.grad_accum")
