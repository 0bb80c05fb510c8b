"""Strategies side by side on one model and cluster (``clustersim compare``).

Each strategy is named as :mod:`simulator.choices` names it (``fsdp-full``, ``ddp``,
``tf-mirrored``...): a strategy of the registry
(:data:`simulator.strategies.STRATEGIES`) and, for FSDP, a sharding mode. The scenario's
strategy is switched to it the way ``clustersim capacity`` does
(:func:`simulator.capacity.probe.strategy_dict`: common keys such as
``activation_checkpointing`` always carry over, strategy-specific ones only to the same
strategy), and one iteration is replayed exactly as ``clustersim run`` would. Per strategy:

* peak memory per GPU and the out-of-memory verdict (with the op where memory ran out);
* iteration time, samples/s and tokens/s, communication time and the exposed part;
* the forward pass's GPU time per sample (:func:`forward_gpu_s_per_sample`), with the kernel
  stack that prices it: the same kernels cost the same under every strategy, so this column
  differs between strategies only by the named mechanisms printed beside it;
* scaling efficiency when the GPU count doubles (:func:`doubled`): weak scaling, the same
  micro-batch per GPU on twice the GPUs, ``throughput(2N) / (2 * throughput(N))``;
* the largest model of the family that fits (:func:`simulator.capacity.search.search`);
* cost (:mod:`simulator.compare.cost`).

A strategy that cannot run here (not registered in this build, or rejected for this
cluster, e.g. a single-host strategy across nodes) becomes a row with status ``n/a`` and
the reason; the others still run. Mistakes that are not about a strategy (an unknown
model, a bad topology) are raised as usual.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from ..accum import brief
from ..capacity.ladder import build_ladder
from ..capacity.probe import Prober, locate_oom, spec_of, strategy_dict
from ..capacity.search import search
from ..choices import FAMILIES, NAMED_STRATEGIES, NamedStrategy
from ..energy import Site
from ..energy.timeline import default_site, energy_of
from ..engine import kernel_time_s
from ..errors import ConfigError
from ..models import ModelSpec, load_model
from ..models.layout import describe as describe_layout
from ..pipeline import (RunResult, autocasts, build_setup, job_world, kernel_stack,
                        memory_format_of, portable_finetune, run_setup, step_fp8_recipe)
from ..pipeline import strategy_dict as pipeline_strategy
from ..scenario import Scenario
from ..strategies import STRATEGIES, parse_strategy
from ..topology.build import graph_gpus
from .cost import Budget, Price, migration_cost, step_cost
from .results import Comparison, Row, Scaling


# Bytes one rank sends per byte of a collective's nccl-tests size on n ranks (the bus
# bandwidth factors of nccl-tests' PERFORMANCE.md: ring algorithms' traffic per rank).
_SEND_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
                "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0}


def comm_bytes_per_gpu(trace) -> float:
    """Bytes a GPU sends per iteration (the busiest rank class): ``size * factor(n)`` per
    collective (:data:`_SEND_FACTOR`), ``size`` per send (pushes to a host or parameter
    server included) and per device-to-host copy; what a GPU receives is not counted."""
    def sent(op) -> float:
        if op.kind == "send" or op.kind == "memcpy" and op.attrs.get("direction") == "d2h":
            return float(op.size_bytes)
        if op.kind != "collective":
            return 0.0
        n = trace.communicators[op.comm].size
        factor = _SEND_FACTOR.get(op.collective, lambda _n: 1.0)
        return op.size_bytes * factor(n) if n > 1 else 0.0
    return max((sum(sent(op) for op in cls.ops) for cls in trace.classes), default=0.0)


# ---------------------------------------------------------------------------- running
Progress = Callable[[str], None]


def with_strategy(scn: Scenario, alias: NamedStrategy) -> Scenario:
    """``scn`` with its strategy switched to ``alias`` (capacity's carry-over rule)."""
    scn = portable_finetune(scn)
    return scn.model_copy(update={"strategy": strategy_dict(scn, spec_of(alias))}, deep=True)


def reference(scn: Scenario) -> Scenario:
    """The ``ddp`` run that checks everything but the strategy (model, topology, training),
    without the training settings one framework alone has (Megatron-Core's
    ``fp8_activation_input``): each strategy's own row takes or refuses those."""
    ref = with_strategy(scn, NAMED_STRATEGIES["ddp"])
    training = ref.training.model_copy(update={"fp8_activation_input": False})
    return ref.model_copy(update={"training": training})


def doubled(scn: Scenario, world: int, G) -> tuple[Scenario, str]:
    """``scn`` on twice its ``world`` GPUs and how: more of the topology's GPUs when the
    cluster graph ``G`` has them (``cluster.gpus``), else twice the servers
    (``cluster.nodes``; ConfigError later if the topology has only one)."""
    c, per_node = scn.cluster, int(G.graph["gpus_per_node"])
    topo_gpus = graph_gpus(G)
    if 2 * world <= topo_gpus:
        new = c.model_copy(update={"gpus": 2 * world})
        how = f"cluster.gpus {world} -> {2 * world} (same topology)"
    else:
        nodes = -(-2 * world // per_node)
        new = c.model_copy(update={"nodes": nodes, "gpus": 2 * world if c.gpus else None})
        how = f"cluster.nodes {G.graph.get('nodes', topo_gpus // per_node)} -> {nodes}"
    return scn.model_copy(update={"cluster": new}, deep=True), how


def with_global_batch(scn: Scenario, samples: int) -> Scenario:
    """``scn`` held at ``samples`` per step whatever the strategy (``training.global_batch``;
    its ``grad_accum`` then follows from each strategy's data-parallel ranks)."""
    data = scn.training.model_dump(exclude_unset=True, exclude={"grad_accum"})
    training = type(scn.training).model_validate({**data, "global_batch": samples})
    return scn.model_copy(update={"training": training})


def own_global_batch(scn: Scenario, ref) -> int:
    """Samples per step of ``scn`` under its own strategy (``ref``: a data-parallel setup of
    ``scn``'s cluster and job size, whose batch counts where the scenario's own strategy
    does not parse: its row will say why)."""
    t = scn.training
    if t.global_batch is not None:
        return t.global_batch
    world = job_world(ref.cluster, ref.trace.world_size)
    try:
        ranks = parse_strategy(pipeline_strategy(scn)).data_parallel_ranks(world)
    except ConfigError:
        return int(ref.trace.meta["global_batch"])
    return t.micro_batch * t.grad_accum * ranks


AUTOCAST = ("autocast (torch.autocast, Keras' mixed policy): fp32 weights cast to 16 bits "
            "at every forward; norms, residual stream and loss in fp32")


def forward_gpu_s_per_sample(res: RunResult) -> float:
    """GPU-seconds of forward kernels per sample: the nominal price of every forward compute
    op of the replayed trace (:func:`~simulator.engine.kernel_time_s`: no variability), once
    per rank of its class, over the samples that trace processes (an extrapolated step's
    trace holds its last replay, ``k`` of ``grad_accum`` micro-steps). Recomputation is not
    forward (its phase is ``recompute``)."""
    setup = res.setup
    gpu_s = sum(kernel_time_s(setup.compute, op, setup.job.precision) * len(cls.ranks)
                for cls in setup.trace.classes for op in cls.ops
                if op.kind == "compute" and op.phase == "forward")
    samples = int(setup.trace.meta["global_batch"])
    if res.extrapolation is not None:
        samples = samples * res.extrapolation.replayed[-1] / res.extrapolation.grad_accum
    return gpu_s / samples


def _replay(scn: Scenario, alias: NamedStrategy, source: str) -> RunResult:
    return run_setup(build_setup(with_strategy(scn, alias), source))


def _run_row(row: Row, scn: Scenario, model: ModelSpec, source: str,
             site: Site | None = None) -> None:
    a = row.alias
    if a.strategy not in STRATEGIES:
        row.status, row.reason = "n/a", (f"strategy {a.strategy!r} is not registered in this "
                                         f"build (registered: {', '.join(STRATEGIES)})")
        return
    try:
        res = _replay(scn, a, source)
        casts = autocasts(parse_strategy(pipeline_strategy(res.setup.scenario)))
    except ConfigError as exc:       # the strategy's own checks too (tf-ps: no accumulation)
        row.status, row.reason, row.reason_field = "n/a", str(exc), exc.field or ""
        return
    row.metrics = m = res.metrics
    row.result = res
    row.extrapolated = res.extrapolation.as_dict() if res.extrapolation else None
    meta = res.setup.trace.meta
    row.global_batch = int(meta.get("global_batch", 0))
    row.tokens_per_sample = meta.get("tokens_per_sample", 0)
    row.comm_bytes_per_gpu = comm_bytes_per_gpu(res.setup.trace)
    row.forward_gpu_s_per_sample = forward_gpu_s_per_sample(res)
    row.kernels = kernel_stack(res.setup)
    row.fp8_recipe = step_fp8_recipe(res.setup)
    row.energy = energy_of(res, site)
    if casts:
        row.kernels += f"; {AUTOCAST}"
    layout = memory_format_of(res.setup.scenario, model, a.strategy)
    if layout is not None:
        row.kernels += f"; {describe_layout(*layout)}"
    if m.oom:
        where = Counter(locate_oom(res.timeline, c, str(v)) for c, v in m.oom_at.items())
        row.oom_at = "; ".join(w + (f" ({n} rank classes)" if n > 1 else "")
                               for w, n in where.items())


def _scale_row(row: Row, scn2: Scenario | None, why: str, source: str) -> None:
    if scn2 is None:
        row.scaling = Scaling(reason=why)
        return
    try:
        res2 = _replay(scn2, row.alias, source)
    except ConfigError as exc:
        row.scaling = Scaling(reason=str(exc))
        return
    m2 = res2.metrics
    if res2.extrapolation:
        row.extrapolated_also += ("its 2x-GPU step",)
    m = row.metrics
    eff = (m2.samples_per_s / m.samples_per_s) * m.world_size / m2.world_size \
        if m.samples_per_s > 0 else None
    row.scaling = Scaling(m2.world_size, m2.iteration_time_s, m2.samples_per_s, eff)


def _capacity_row(row: Row, scn: Scenario, ladder, source: str) -> None:
    """The largest fit of ``row``'s strategy; the row's own step is not replayed again when
    the scenario's model is a rung (the same iteration, :meth:`Prober.adopt`)."""
    try:
        prober = Prober(scn, spec_of(row.alias), source)
        if row.result is not None:
            prober.adopt(load_model(scn.model), row.result)
        res = search(scn, spec_of(row.alias), ladder, source, prober)
    except ConfigError as exc:
        row.capacity_reason = str(exc)
        return
    p = res.largest
    rungs = sum(1 for q in res.probes if q.extrapolated)
    if rungs:
        row.extrapolated_also += (f"{rungs} capacity rung(s)",)
    row.largest_fit = None if p is None else {
        "model": p.rung.model.name, "params": p.rung.params, "peak_memory_gib": p.peak_gib,
        "top_of_ladder": res.first_oom is None}
    if p is None:
        row.capacity_reason = f"not even {ladder[0].model.name} fits"


# why a mixture of experts' forward time per sample also differs by its strategy's layout
MOE_NOTE = ("fwd ms/sample of a mixture of experts also differs by how a strategy spreads "
            "its experts: with expert parallelism each GPU runs its own experts over the "
            "tokens routed to them (the busiest EP rank's, larger GEMMs, its weights read "
            "once), without it every expert over the GPU's own tokens (a grouped GEMM over "
            "all the experts' weights)")


def extrapolation_notes(rows: list[Row]) -> list[str]:
    """A note per row whose step (or 2x-GPU step, or capacity rungs) was extrapolated from a
    few replayed micro-steps (:mod:`simulator.accum`)."""
    notes = []
    for row in rows:
        if row.extrapolated:
            also = f" (so were {' and '.join(row.extrapolated_also)})" \
                if row.extrapolated_also else ""
            notes.append(f"{row.alias.key}: step {brief(row.extrapolated)}{also}")
    return notes


def _cost_row(row: Row, price: Price | None, budget: Budget | None,
              day_rate: float | None, paid_gpus: int) -> None:
    """Cost of ``row`` for ``paid_gpus`` GPUs: the scenario's, even when a strategy leaves
    some without work (parameter-server hosts), since they are rented all the same."""
    row.cost = step_cost(price, paid_gpus, row.metrics, row.global_batch,
                         row.tokens_per_sample, budget,
                         migration_cost(row.migration_days, day_rate) if price else 0.0)


def _scale_rows(live: list[Row], scn: Scenario, world: int, G, source: str,
                say: Progress) -> str:
    """Fill each row's :class:`Scaling` on twice the GPUs; returns how they were doubled."""
    try:
        scn2, how = doubled(scn, world, G)
        build_setup(reference(scn2), source)
    except ConfigError as exc:
        how = f"cannot double the GPUs: {_why_not_doubled(exc, G)}"
        for row in live:                 # nothing is simulated: no progress to report
            _scale_row(row, None, how, source)
        return how
    for i, row in enumerate(live, 1):
        say(f"2x GPUs {i}/{len(live)}: {row.alias.key} on {2 * world} GPUs")
        _scale_row(row, scn2, how, source)
    return how


def _why_not_doubled(exc: ConfigError, G) -> str:
    """Why the cluster cannot double, in the user's words: a single-server topology says
    so and how to get the column (a multi-node topology), not which generator built it."""
    if exc.field == "cluster.nodes":
        name = G.graph.get("name") or "the scenario's topology"
        return (f"{name} is a single server (add servers with a multi-node topology, e.g. "
                f"--set cluster.topology=dgx-a100-superpod or dgx-h100-superpod)")
    return str(exc)


def _capacity_rows(live: list[Row], scn: Scenario, source: str, say: Progress) -> list[str]:
    """Fill each row's largest fit on the family's ladder; returns notes."""
    family = load_model(scn.model).family
    if family not in FAMILIES:
        return [f"largest fit: no size ladder for the {family} family "
                f"(ladders: {', '.join(FAMILIES)})"]
    ladder = build_ladder(family, min_seq_len=scn.training.seq_len)
    for i, row in enumerate(live, 1):
        say(f"largest fit {i}/{len(live)}: {row.alias.key}, {family} ladder")
        _capacity_row(row, scn, ladder, source)
    return []


def compare(scn: Scenario, strategies: list[NamedStrategy], *, source: str = "<scenario>",
            price: Price | None = None, budget: Budget | None = None,
            migration_days: dict[str, float] | None = None, day_rate: float | None = None,
            scaling: bool = True, capacity: bool = True,
            progress: Progress | None = None, site: Site | None = None) -> Comparison:
    """Run every strategy of ``strategies`` on ``scn`` (module doc).

    ``migration_days`` maps a strategy key to person-days charged once to that strategy;
    ``site``: the PUE, electricity price and grid carbon of the energy columns (default:
    power.yaml's).
    :raises ConfigError: for mistakes not about one strategy (model, topology, training).
    """
    say = progress or (lambda _msg: None)
    ref = build_setup(reference(scn), source)                 # validates the rest
    world = ref.trace.world_size
    # every strategy at the scenario's own samples per step (a strategy that cannot reach
    # it says so in its row); the 2x-GPU runs at twice it (weak scaling)
    samples = own_global_batch(scn, ref)
    scn = with_global_batch(scn, samples)
    rows = [Row(a, migration_days=(migration_days or {}).get(a.key, 0.0)) for a in strategies]
    model = load_model(scn.model)
    for i, row in enumerate(rows, 1):
        say(f"iteration {i}/{len(rows)}: {row.alias.key} on {world} GPUs")
        _run_row(row, scn, model, source, site)
    live = [r for r in rows if r.ok]
    how = _scale_rows(live, with_global_batch(scn, 2 * samples), world, ref.cluster.G,
                      source, say) if scaling else "not simulated (--no-scaling)"
    notes = _capacity_rows(live, scn, source, say) if capacity else []
    notes += extrapolation_notes(rows)
    if model.is_moe:
        notes.append(MOE_NOTE)
    for row in rows:
        row.result = None
    for row in rows:
        _cost_row(row, price, budget, day_rate, world)
    t, G = scn.training, ref.cluster.G
    cluster = {"topology": str(G.graph.get("name")), "gpu": str(G.graph.get("gpu")),
               "gpus": world, "gpu_memory_gib": ref.capacity_bytes / float(1 << 30)}
    settings = {"micro_batch": t.micro_batch, "seq_len": t.seq_len,
                "global_batch": samples, "precision": t.precision,
                **({"finetune": t.finetune} if t.finetune is not None else {})}
    return Comparison(str(scn.name), str(ref.trace.meta.get("model")), cluster, settings,
                      how, price, budget, rows, notes, site or default_site())

