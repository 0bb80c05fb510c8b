"""``clustersim plan``: enumerate, prune by memory and by the analytical estimate, replay the
best survivors with the real simulator, rank them.

1. every candidate of :mod:`.space` that this build can replay (:mod:`.strategy`);
2. each one's analytical step time and peak memory (:mod:`.estimate`); those over the GPU's
   memory are pruned;
3. the ``replay`` fastest estimates that fit, one per kind of plan (:func:`pick`), are
   simulated as ``clustersim run`` would
   (:func:`~simulator.pipeline.build_setup` / :func:`~simulator.pipeline.run_setup` on the
   same cluster), one at a time;
4. the replayed rows are ranked by simulated step time (out-of-memory ones last), priced
   (:func:`~simulator.compare.cost.training_cost`), marked on the Pareto front of (step
   time, cost per token, memory per GPU) and explained (:mod:`.explain`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import networkx as nx

from ..choices import TE_RECIPES
from ..constants import load_constants
from ..collectives.model import CollectiveModel
from ..compare.cost import Cost, Price, training_cost
from ..compute import ComputeModel
from ..energy import Energy
from ..engine.variability import resolve_sigmas
from ..energy.power import capped_gpu
from ..energy.timeline import energy_of
from ..errors import ConfigError
from ..forkpool import fork_pool
from ..hardware import check_gpu_training, gpu_spec
from ..metrics import Metrics
from ..models import load_model, tokens_per_sample
from ..pipeline import (Setup, build_setup, job_world, portable_finetune, replayed_ops,
                        run_setup, with_finetune, with_fp8_stores, with_gpu_fp8)
from ..precision import FP8, PRECISIONS
from ..scenario import Scenario, fp8_attention_refusal
from ..strategies.base import CommonConfig
from ..strategies.ddp import DDPConfig
from ..strategies.fsdp_config import FSDPConfig
from ..strategies.frameworks.megatron import MegatronConfig
from ..strategies.frameworks.torchtitan import TorchtitanConfig
from ..strategies.parallel.ep_cp import Routing, is_flex
from ..topology.build import scenario_cluster, scenario_gpus, scenario_graph
from . import work
from .estimate import Estimate, Estimator, optimizer_step
from .space import Candidate, Limits, candidates
from .strategy import SPELLINGS, Carried, carried, strategy_of, taken_by

Progress = Callable[[str], None]


@dataclass
class Row:
    """One candidate: its estimate, and its replay when it was one of the survivors."""

    candidate: Candidate
    estimate: Estimate
    strategy: dict
    metrics: Metrics | None = None
    error: str = ""                      # why its replay failed
    cost: Cost | None = None
    energy: Energy | None = None         # its replay's energy and power (simulator.energy)
    pareto: bool = False
    why: str = ""

    @property
    def step_s(self) -> float:
        return self.metrics.iteration_time_s if self.metrics else self.estimate.step_s


@dataclass
class Search:
    """The outcome of one search."""

    model: str
    gpus: int
    gpu: str
    capacity_bytes: int
    global_batch: int
    seq_len: int
    tokens_per_step: float
    counts: dict[str, int] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)       # replayed, ranked
    carried: Carried = Carried()      # the scenario's strategy settings the candidates take
    # {framework: why its candidates are left out}: it cannot run the scenario's FP8 recipe
    refused: dict[str, str] = field(default_factory=dict)
    # why some candidates' layouts are not modelled (the first reason; counted as "not
    # modelled"): the flex dispatcher over EP groups that span their NVLink domains unevenly
    unmodelled: str = ""
    events: int = 0                                     # engine events of the replays


def search(scn: Scenario, global_batch: int, *, replay: int = 3, limits: Limits = Limits(),
           price: Price | None = None, source: str = "<scenario>",
           progress: Progress | None = None, model_parallel: bool | None = None,
           max_work: int | None = None, graph: nx.Graph | None = None,
           workers: int = 1) -> Search:
    """Search the plans of ``scn``'s model on ``scn``'s cluster (``graph`` when built
    already) for ``global_batch`` samples of ``training.seq_len`` tokens per step; the
    replays run in ``workers`` forked processes (:mod:`simulator.forkpool`: the same
    numbers as one after the other here).

    :raises ConfigError: past ``max_work`` units (:mod:`.work`): the estimates' before any
        is done, the replays' (counted in their traces) before any runs.
    """
    say = progress or (lambda _msg: None)
    if scn.training.fp8_activation_input:
        raise ConfigError("is Megatron-Core's alone, and plan replays its FSDP candidates "
                          "under torchtitan: price it with run or compare",
                          source=source, field="training.fp8_activation_input")
    try:
        model = with_fp8_stores(with_finetune(load_model(scn.model), scn), scn)
    except ConfigError as exc:
        raise exc.located(source) from None
    if model.finetune is not None and model.finetune.freeze_layers:
        raise ConfigError("plan's estimate prices one block for every block; frozen first "
                          "blocks make them differ: price freeze_layers with run, compare or "
                          "capacity (docs/finetuning.md)", source=source,
                          field="training.finetune.freeze_layers")
    scn = portable_finetune(scn)
    if scn.training.packed_sequences is not None:
        raise ConfigError("plan's analytical estimate prices unpacked rows: price packed "
                          "sequences with run, compare or capacity (docs/finetuning.md)",
                          source=source, field="training.packed_sequences")
    if not model.is_transformer:
        raise ConfigError(f"{model.name} is not a transformer: plan searches model "
                          f"parallelism", source=source, field="model")
    if scn.training.precision not in (*PRECISIONS, FP8):
        raise ConfigError(f"plan's analytical estimate prices {', '.join(PRECISIONS)} and "
                          f"{FP8} steps, not {scn.training.precision} yet: price it with run "
                          f"or compare (docs/plan.md)", source=source,
                          field="training.precision")
    G = scenario_graph(scn) if graph is None else graph
    gpus = scenario_gpus(scn, G)
    t = scn.training
    cands = list(candidates(model, gpus, global_batch, t.seq_len, limits, model_parallel))
    counted = work.count(cands, replay, gpus)
    work.check(counted, max_work)
    k = load_constants()
    cluster = scenario_cluster(scn, k, G)
    try:
        gpu = capped_gpu(gpu_spec(cluster.G.graph["gpu"]), scn.cluster.power_cap_w)
        check_gpu_training(gpu, t.precision, scn.fp8_recipe)
        stacks = {name: ComputeModel(gpu, attention=t.attention_impl, strategy=name,
                                     fp8_attention=t.fp8_attention, model_family=model.family)
                  for name in SPELLINGS}
    except ConfigError as exc:
        raise exc.located(source) from None
    # kernels priced as each candidate's replay runs them: torchtitan's eager PyTorch stack,
    # Megatron's for a distributed-optimizer candidate (strategy_of), whose weight
    # gradients accumulate into Megatron's main_grad (its DDP's defaults, as _megatron sets)
    model = with_gpu_fp8(model, gpu)        # FP8 casts as the replay's (build_setup) make them
    carry = replace(carried(scn.strategy), te_fp8=t.precision == FP8
                    and t.recipe_for("torchtitan") in TE_RECIPES)
    # each framework's candidates at the scenario's FP8 recipe, else at that framework's own
    recipes = {name: t.recipe_for(name) for name in stacks} if t.precision == FP8 else {}
    megatron = _candidate_config(MegatronConfig, "megatron", carry, source,
                                 use_distributed_optimizer=True)
    torchtitan = _candidate_config(TorchtitanConfig, "torchtitan", carry, source)
    est = Estimator(model, t.seq_len, t.precision, t.flash_attention,
                    CollectiveModel(cluster, k, scn.nccl), stacks["torchtitan"],
                    fp8_recipes=recipes, stacks=stacks,
                    stack_of=lambda c: (strategy_of(c, model.layers) or {}).get("name", ""),
                    main_grads={"megatron": megatron.main_grad()},
                    fp8_params=frozenset({"megatron"} if megatron.fp8_weight_gathers(
                        recipes.get("megatron")) else ()),
                    host_modes={cfg.name: cfg.host_dispatch for cfg in (megatron, torchtitan)},
                    graphs={"megatron": megatron.cuda_graph_scope} if megatron.cuda_graphs
                    else {},
                    sigmas=resolve_sigmas(scn.simulation.variability),
                    compile=t.compile, elementwise=t.elementwise,
                    optimizer_steps={cfg.name: optimizer_step(cfg, recipes.get(cfg.name))
                                     for cfg in (megatron, torchtitan, *_pytorch_configs())},
                    routings={cfg.name: Routing.of(cfg) for cfg in (megatron, torchtitan)},
                    flex=frozenset(cfg.name for cfg in (megatron, torchtitan) if is_flex(cfg)),
                    gpus_per_node=job_world(cluster, gpus).gpus_per_node)
    out = Search(model.name, gpus, str(cluster.G.graph["gpu"]), gpu.memory_capacity_bytes,
                 global_batch, t.seq_len, global_batch * tokens_per_sample(model, t.seq_len),
                 carried=carry, refused=_refused({"megatron": megatron, "torchtitan": torchtitan},
                                                 recipes, t.fp8_attention))
    fits = _estimated(out, cands, est, model.layers, say)
    survivors = pick(fits, replay)
    setups = _counted_setups(survivors, scn, cluster, source, counted, max_work)
    _replays(survivors, setups, out, workers, say)
    out.counts["replayed"] = len(survivors)
    out.rows = rank(survivors)
    price_rows(out, price)
    return out


def _estimated(out: Search, cands: list[Candidate], est: Estimator, layers: int,
               say: Progress) -> list[Row]:
    """Rows of every replayable candidate whose estimated memory fits."""
    counted = {"candidates": 0, "not replayable here": 0, "refused by their framework": 0,
               "over memory": 0}
    fits: list[Row] = []
    for c in cands:
        counted["candidates"] += 1
        strategy = strategy_of(c, layers, out.carried)
        if strategy is None:
            counted["not replayable here"] += 1
            continue
        if strategy["name"] in out.refused:
            counted["refused by their framework"] += 1
            continue
        try:
            e = est.estimate(c)
        except ConfigError as exc:       # a layout the simulator does not model
            counted["not modelled"] = counted.get("not modelled", 0) + 1
            out.unmodelled = out.unmodelled or exc.reason
            continue
        if e.memory_bytes > out.capacity_bytes:
            counted["over memory"] += 1
            continue
        fits.append(Row(c, e, strategy))
    counted["fit"] = len(fits)
    say(f"{counted['candidates']} candidates, {counted['over memory']} over memory, "
        f"{len(fits)} fit")
    out.counts.update(counted)
    return fits


def family(c: Candidate) -> tuple:
    """What makes plans different in kind: the model-parallel degrees (expert parallelism
    among them), the schedule and the data-parallel mode (HSDP apart from FSDP);
    micro-batch and checkpointing are not."""
    p = c.plan
    return (p.tp, p.pp, p.vp, p.cp, p.ep, p.dp_mode, p.dp_replicate > 1 and p.dp_shard > 1)


def pick(fits: list[Row], replay: int) -> list[Row]:
    """The ``replay`` fastest estimates, one per :func:`family` (the best micro-batch and
    checkpointing of each), so the table compares different plans, not variants of one."""
    out, seen = [], set()
    for row in sorted(fits, key=lambda r: (r.estimate.step_s, r.candidate.label())):
        key = family(row.candidate)
        if key not in seen:
            seen.add(key)
            out.append(row)
        if len(out) == replay:
            break
    return out


def _refused(configs: dict[str, CommonConfig], recipes: dict[str, str],
             fp8_attention: bool = False) -> dict[str, str]:
    """{framework: the reason} for each of ``configs`` (the candidates' framework configs)
    that refuses its FP8 recipe in ``recipes`` (an explicit ``training.fp8_recipe`` of
    another framework: torchao's under Megatron, Transformer Engine's under torchtitan) or
    ``training.fp8_attention`` (Transformer Engine's, which torchao has not)."""
    out = {}
    for name, cfg in configs.items():
        try:
            cfg.check_fp8(recipes.get(name))
        except ConfigError as exc:
            out[name] = f"{exc.field}: {exc.reason}"
            continue
        why = fp8_attention and fp8_attention_refusal(recipes.get(name, ""), name)
        if why:
            out[name] = f"training.fp8_attention: {why}"
    return out


def _pytorch_configs() -> tuple[CommonConfig, ...]:
    """The ``fsdp`` and ``ddp`` configs of the candidates :func:`.strategy.strategy_of`
    spells as PyTorch's own (their defaults: nothing of the scenario is carried)."""
    return (FSDPConfig(name="fsdp"), DDPConfig(name="ddp"))


def _candidate_config(config, name: str, carry: Carried, source: str, **fixed):
    """The ``config`` class's strategy config of framework ``name``'s candidates, with the
    scenario's carried settings where the scenario is of that framework and ``fixed`` (for
    the estimate and the refusals: Megatron's gradient buffer and FP8 parameters, each
    framework's FP8 recipe).

    :raises ConfigError: a carried setting the framework refuses (located at ``source``).
    """
    own = taken_by(carry, name)
    try:
        return config(**{**own, "name": name, **fixed})
    except ConfigError as exc:
        raise exc.located(source) from None


def _counted_setups(rows: list[Row], scn: Scenario, cluster, source: str, estimates: work.Work,
                    max_work: int | None) -> list[Setup | None]:
    """The setups of ``rows``' replays, each one's ops counted as it is built and the
    search refused past ``max_work`` (:func:`.work.check_replays`) before any replay runs."""
    setups, ops = [], []
    for row in rows:
        setups.append(_prepared(row, scn, cluster, source))
        if setups[-1] is not None:
            ops.append(replayed_ops(setups[-1]))
            work.check_replays(work.Replays(estimates, tuple(ops), len(rows)), max_work)
    return setups


def _prepared(row: Row, scn: Scenario, cluster, source: str) -> Setup | None:
    """The setup of ``row``'s replay; None (the reason in ``row.error``) if it cannot be."""
    c = row.candidate
    training = scn.training.model_copy(update={"micro_batch": c.micro_batch,
                                               "grad_accum": c.micro_batches})
    trial = scn.model_copy(update={"strategy": row.strategy, "training": training}, deep=True)
    try:
        return build_setup(trial, source, cluster=cluster)
    except ConfigError as exc:
        row.error = exc.reason
        return None


@dataclass(frozen=True)
class Replayed:
    """What a row keeps of its replay (small: a forked process sends it back)."""

    metrics: Metrics | None
    energy: Energy | None
    error: str | None = None


_SETUPS: list | None = None      # the setups the forked replays of _replays read


def _replays(rows: list[Row], setups: list[Setup | None], out: Search, workers: int,
             say: Progress) -> None:
    """Replay each row's setup (None: it could not be built, its reason in the row): here
    one after the other, or in ``workers`` forked processes that inherit the setups."""
    global _SETUPS
    live = [i for i, setup in enumerate(setups) if setup is not None]
    processes = min(workers, len(live))
    pool = fork_pool(processes)
    if pool is None:
        for i, row in enumerate(rows):
            say(f"replaying {i + 1}/{len(rows)}: {row.candidate.label()}")
            setup, setups[i] = setups[i], None        # freed once replayed
            if setup is not None:
                _keep(row, _replay(setup), out)
        return
    say(f"replaying {len(live)} plans in {processes} processes")
    _SETUPS = setups
    try:
        with pool:
            done = list(pool.map(_replay_at, live))
    finally:
        _SETUPS = None
    for i, replayed in zip(live, done):
        _keep(rows[i], replayed, out)


def _replay_at(i: int) -> Replayed:
    """In a forked process: the replay of ``_SETUPS[i]``."""
    return _replay(_SETUPS[i])


def _replay(setup: Setup) -> Replayed:
    try:
        res = run_setup(setup)
    except ConfigError as exc:
        return Replayed(None, None, exc.reason)
    return Replayed(res.metrics, energy_of(res))


def _keep(row: Row, replayed: Replayed, out: Search) -> None:
    if replayed.error is not None:
        row.error = replayed.error
        return
    row.metrics, row.energy = replayed.metrics, replayed.energy
    out.events += int(replayed.metrics.events)


def rank(rows: list[Row]) -> list[Row]:
    """Replayed rows that fit first, fastest first; then OOM ones; then failed replays."""
    def key(r: Row):
        state = 2 if r.metrics is None else 1 if r.metrics.oom else 0
        return (state, r.step_s, r.candidate.label())
    return sorted(rows, key=key)


def energy_optimal(rows: list[Row]) -> Row | None:
    """The replayed row that fits in memory with the least energy per token (the first in
    rank order among equals); None without power data."""
    live = [r for r in rows if r.metrics is not None and not r.metrics.oom
            and r.energy is not None and r.energy.kwh_per_million_tokens is not None]
    return min(live, key=lambda r: r.energy.kwh_per_million_tokens, default=None)


def price_rows(out: Search, price: Price | None) -> None:
    """Cost of each replayed row, then the Pareto flags and the reasons."""
    from .explain import explain, mark_pareto
    for r in out.rows:
        if r.metrics is not None and price is not None:
            r.cost = training_cost(price, out.gpus, r.metrics.iteration_time_s,
                                   r.metrics.exposed_comm_s, out.global_batch,
                                   out.tokens_per_step)
    mark_pareto(out.rows)
    explain(out)
