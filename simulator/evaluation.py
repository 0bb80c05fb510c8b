"""The evaluation pass of a training run (``training.evaluation``; docs/energy.md).

A run is its training steps and, every ``every_steps`` of them, an evaluation: the model
runs forward over a fixed evaluation set of ``samples`` samples, in batches of the
training's global batch, with no backward, no optimizer and no gradient reduction
(Lightning's validation loop under NeMo and Megatron: ``validation_step`` under
``torch.no_grad``, MLPerf's Llama 2 70B LoRA every 384 samples on its 173 evaluation
samples). Two things make an evaluation batch more than a third of a training step:

* **forward only**, cut from the training step's own trace (:func:`forward_only`): the
  ops of phase ``forward`` and the host's dispatch of them; every backward, recompute and
  optimizer op and every gradient reduction gone; the distributed optimizer's overlapped
  parameter all-gather too (it carries the previous optimizer step's update; between two
  evaluation batches nothing is updated). An FSDP forward keeps its parameter all-gathers
  (a sharded forward needs them). Nothing is kept for a backward, so no activation memory.
* **no training CUDA graphs**: the graphs the strategy captures are of the training step.
  Transformer Engine's ``make_graphed_callables`` (which Megatron's and NeMo's
  ``cuda_graph_impl``/``enable_cuda_graph`` use) replaces a module's forward by one that
  replays the graph only while ``module.training`` matches the state it was captured in,
  and runs the module eagerly otherwise (``transformer_engine/pytorch/graph.py``,
  ``make_graphed_forward``); the validation loop puts the model in eval mode. So the
  evaluation's kernels are launched eagerly: each pays its launch and host dispatch
  (:mod:`simulator.compute.launch`).

Each evaluation is ``ceil(samples / global batch)`` such forward steps (a last, partial
batch is taken whole: the data-parallel ranks run in step), of the evaluation's own
``global_batch`` where given, else the training's (NeMo's validation_ds takes the model's).
With ``dense_mask_workers`` the batches come from a DataLoader whose workers collate each
sample with a dense causal mask (:mod:`simulator.loader`; the same function and the same
:func:`simulator.pipeline.fed_by_loader` as the training steps' loader, the evaluation's
worker count in the training's place): the pass is a two-stage pipeline, ``batches x
max(step, loader) + min(step, loader)`` (the loader's iterator starts with each
evaluation, so the first batch is not prefetched), and the GPUs are idle while they wait
for it. Its energy is the integral of power over the forward steps' own timeline
and that wait (:func:`simulator.energy.timeline.pass_energy_of`).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace

from .energy.timeline import pass_energy_of
from .loader import fed_pass_s
from .scenario import Scenario, evaluations_in
from .trace import Trace

# The strategy keys that capture the training step in CUDA graphs (Megatron's spelling:
# simulator/strategies/frameworks/megatron.py); an evaluation runs without them.
TRAINING_GRAPH_KEYS = ("cuda_graph_impl", "enable_cuda_graph")
# The distributed optimizer's overlapped parameter all-gather (strategies/parallel/dp.py,
# ``start_params``): phase forward, but the previous optimizer step's work.
_OPTIMIZER_GATHER = re.compile(r".*params\.bucket\d+")


@dataclass(frozen=True)
class EvalPass:
    """One evaluation of the run: ``batches`` forward-only steps of ``batch_s`` each."""

    every_steps: int
    first_step: int
    samples: int
    global_batch: int
    batches: int
    batch_s: float
    time_s: float
    kwh: float | None                # facility energy of one evaluation (PUE included)
    avg_node_w: float | None         # AC power of a server during it
    avg_gpu_w: float | None
    loader_s: float = 0.0            # a rank's DataLoader per batch (0: not modelled)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RunTotals:
    """A run of ``steps`` training steps with its evaluations: time and facility energy."""

    steps: int
    evaluations: int
    train_s: float
    eval_s: float
    train_kwh: float | None
    eval_kwh: float | None

    @property
    def time_s(self) -> float:
        return self.train_s + self.eval_s

    @property
    def kwh(self) -> float | None:
        if self.train_kwh is None or self.eval_kwh is None:
            return None
        return self.train_kwh + self.eval_kwh

    def as_dict(self) -> dict:
        return {**asdict(self), "time_s": self.time_s, "kwh": self.kwh}


def forward_only(trace: Trace) -> Trace:
    """The evaluation's forward step cut from the training step ``trace`` (module doc): the
    forward ops and their host dispatch; a dependency on a dropped op is dropped with it;
    no op allocates memory (nothing is kept for a backward)."""
    classes = []
    for cls in trace.classes:
        kept = [op for op in cls.ops if _evaluates(op)]
        ids = {op.id for op in kept}
        classes.append(replace(cls, ops=[
            replace(op, deps=tuple(d for d in op.deps if d in ids), mem_alloc_bytes=0,
                    mem_free_bytes=0) for op in kept]))
    return replace(trace, classes=classes, meta={**trace.meta, "evaluation": True})


def _evaluates(op) -> bool:
    if op.phase == "host":
        return op.attrs.get("dispatches") == "forward"
    return op.phase == "forward" and not (op.stream == "dp_gather"
                                          and _OPTIMIZER_GATHER.fullmatch(op.name))


def eval_scenario(scn: Scenario) -> Scenario:
    """``scn`` as its evaluation runs: without the training step's CUDA graphs, and in
    batches of ``training.evaluation.global_batch`` where it is given (the micro-batches a
    step follow from it, as from ``training.global_batch``)."""
    strategy = {k: v for k, v in scn.strategy.items() if k not in TRAINING_GRAPH_KEYS}
    t, ev = scn.training, scn.training.evaluation
    data = t.model_dump(exclude_unset=True, exclude={"dense_mask_workers"})
    if ev is not None and ev.dense_mask_workers is not None:
        data["dense_mask_workers"] = ev.dense_mask_workers
    if ev is not None and ev.global_batch is not None:
        data = {k: v for k, v in data.items() if k not in ("grad_accum", "global_batch")}
        data["global_batch"] = ev.global_batch
    return scn.model_copy(update={"strategy": strategy,
                                  "training": type(t).model_validate(data)})


def evaluation_pass(scn: Scenario, source: str = "<scenario>", cluster=None
                    ) -> EvalPass | None:
    """One evaluation of ``scn`` (None without ``training.evaluation``): its forward step
    simulated (:func:`forward_only` of :func:`eval_scenario`'s step) and its energy."""
    ev = scn.training.evaluation
    if ev is None:
        return None
    from .errors import ConfigError
    from .pipeline import build_setup, run_setup, with_trace
    try:
        setup = with_trace(build_setup(eval_scenario(scn), source, cluster), forward_only)
    except ConfigError as exc:
        if exc.field != "training.global_batch" or ev.global_batch is None:
            raise
        raise ConfigError(exc.reason, source=exc.source,
                          field="training.evaluation.global_batch") from None
    if not any(op.kind == "compute" for c in setup.trace.classes for op in c.ops):
        raise ConfigError("the step's trace marks no forward kernels (ops of phase "
                          "forward): no evaluation pass to cut from it",
                          field="training.evaluation")
    result = run_setup(setup)
    gb = int(result.setup.trace.meta.get("global_batch") or 0)
    if gb <= 0:
        raise ConfigError("an evaluation needs the step's global batch (samples per step)",
                          field="training.evaluation")
    batches = math.ceil(ev.samples / gb)
    fed_s = result.metrics.iteration_time_s        # a batch, its loader's wait included
    step_s = fed_s - result.loader_wait_s
    time_s = fed_pass_s(batches, step_s, result.loader_s)
    e = pass_energy_of(result, batches, time_s - batches * fed_s)
    return EvalPass(ev.every_steps, ev.first, ev.samples, gb, batches, step_s, time_s,
                    None if e is None else e.kwh_per_step,
                    None if e is None else e.avg_node_w, None if e is None else e.avg_gpu_w,
                    result.loader_s)


def run_totals(steps: int, step_s: float, step_kwh: float | None,
               ev: EvalPass | None) -> RunTotals:
    """A run of ``steps`` training steps of ``step_s`` (``step_kwh`` each) and the
    evaluations ``ev`` puts in it (at steps first, first + every, ... up to ``steps``)."""
    n = 0 if ev is None else evaluations_in(steps, ev.first_step, ev.every_steps)
    eval_s = n * ev.time_s if n else 0.0
    eval_kwh = (None if ev.kwh is None else n * ev.kwh) if n else 0.0
    return RunTotals(steps, n, steps * step_s, eval_s,
                     None if step_kwh is None else steps * step_kwh, eval_kwh)


def eval_rows(ev: EvalPass | None, step_s: float, energy=None) -> list[tuple[str, str]]:
    """The lines ``run`` prints for the scenario's evaluation pass (none without one): one
    evaluation's time and energy, and its share of a run's time and energy over a period
    of ``every_steps`` training steps of ``step_s`` (``energy``: the step's)."""
    if ev is None:
        return []
    period_s = ev.every_steps * step_s + ev.time_s
    loader = f", loader {ev.loader_s:.4g} s a batch" if ev.loader_s > 0 else ""
    rows = [("eval_pass_s", f"{ev.time_s:.4g} s ({ev.batches} forward-only batches of "
                            f"{ev.global_batch}, {ev.batch_s:.4g} s each{loader}; every "
                            f"{ev.every_steps} steps)"),
            ("eval_time_share", f"{ev.time_s / period_s:.1%} of a run's time")]
    if ev.kwh is not None and energy is not None:
        period_kwh = ev.every_steps * energy.kwh_per_step + ev.kwh
        rows += [("eval_energy_kwh", f"{ev.kwh:.4g} kWh (facility; node "
                                     f"{ev.avg_node_w:,.0f} W)"),
                 ("eval_energy_share", f"{ev.kwh / period_kwh:.1%} of a run's energy")]
    return rows
