"""From a scenario to a :class:`JobPlan`: plain numbers the trial loop runs on.

Everything that needs the cluster is resolved here, once: the component inventory and
blast radii, rates turned into events per second for the whole job, the scheduled failures
mapped onto components (a name that is not in the cluster is an error), the iteration times
of every configuration (simulated once each), checkpoint and restart costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from simulator.cluster import Cluster
from simulator.errors import ConfigError
from simulator.models import load_model, params_total
from simulator.pipeline import job_world, strategy_dict
from simulator.progress import stage
from simulator.scenario import Scenario
from simulator.strategies import parse_strategy
from simulator.topology.build import scenario_cluster
from simulator.units import parse_bandwidth, parse_size

from .config import CLASSES, ReliabilityCfg
from .costs import (Bandwidths, CkptCosts, checkpoint_costs, gathers_full_state,
                    state_bytes_per_param)
from .inventory import ComponentSet, inventory
from .quantities import parse_duration, parse_rate
from .schedule import map_schedule
from .steps import StepTable, scenario_step_table, step_table, straggler_key

_NOUN = {"node": "node", "gpu": "gpu", "nic": "nic", "link": "link", "leaf_switch": "switch",
         "spine_switch": "switch", "software": "job"}
FIELD = "reliability"


@dataclass(frozen=True)
class ClassPlan:
    """One failure class as the loop sees it (per-component tuples share one order)."""

    name: str
    rate_per_s: float                 # the whole job's rate for this class
    shape: float | None               # Weibull shape; None: exponential
    lost: tuple[tuple[int, ...], ...]
    interrupts: tuple[bool, ...]
    slow: tuple[int, ...]             # index into JobPlan.slow_times, -1: none
    repair_s: float
    repair_exponential: bool
    detect: tuple[str, ...]


@dataclass(frozen=True)
class JobPlan:
    t_base: float
    slow_times: tuple[float, ...]     # index 0: healthy
    iterations: float | None
    duration_s: float | None
    interval_s: float | None
    every_iterations: int | None
    keras_epoch: int                  # 0: not Keras; else restore to the epoch start
    async_mode: bool
    costs: CkptCosts
    persist_slowdown: float
    target: str
    replicas: int
    copy_every: int                   # 0: no copy to the shared FS
    detection: tuple[float, float, float, float, float]  # timeout, hb int, hb timeout, hc, mon
    restart_s: tuple[float, float, float, float, float, float]
    # teardown, spare swap, requeue, diagnostics, process start, comm init
    spares: int
    job_nodes: int
    classes: tuple[ClassPlan, ...]
    stragglers: tuple[float, int, float] | None   # rate, slow index, duration
    schedule: tuple[tuple, ...]       # (t, class index or -1, component, slow index, duration)


@dataclass(frozen=True)
class PlanInfo:
    """What the report shows about the inputs (not sent to worker processes)."""

    steps: StepTable
    slow_names: tuple[str, ...]
    world_size: int
    components: dict[str, int]
    mtti_s: float
    params: int
    spares: int


def build_plan(scn: Scenario, source: str, cfg: ReliabilityCfg | None = None,
               remember_steps: bool = False, workers: int = 1,
               before_steps: Callable[[float], None] | None = None
               ) -> tuple[JobPlan, PlanInfo]:
    """Resolve ``scn`` (its ``reliability`` section, or ``cfg``) into a plan; ``workers``:
    processes for the step simulations of the degraded fabrics and stragglers.

    ``before_steps(arrivals)``: called with the failures and stragglers one trial expects
    before the step simulations, when the job's length is known without them (a duration,
    or a given iteration time): a work bound can refuse before the long part.

    ``remember_steps``: take the step simulations from (and leave them in) the process's
    memo of :func:`~simulator.reliability.steps.scenario_step_table` (a study's points).

    :raises ConfigError: naming ``reliability.<field>`` for anything the cluster contradicts.
    """
    cfg = cfg or scn.reliability or ReliabilityCfg()
    cluster = scenario_cluster(scn)
    G = cluster.G
    world = scn.cluster.gpus or cluster.n_gpus
    effects = {c: getattr(cfg.failures, c).effect for c in CLASSES}
    inv = inventory(G, world, effects)
    J = len(inv["node"])
    spares = _spares(cfg, J, source)
    events = map_schedule(cfg.failures.schedule, inv, world, source)
    slow_names = _slow_names(cfg, inv, events)
    given = parse_duration(cfg.job.iteration_time) if cfg.job.iteration_time else None
    reroutes = {k: rep for c in inv.values() for k, rep in c.representatives.items()
                if k in slow_names}
    factors = [float(n.split("x", 1)[1]) for n in slow_names if n.startswith("straggler")]
    slow_index = {name: i for i, name in enumerate(slow_names)}
    classes = tuple(_class_plan(c, getattr(cfg.failures, c), inv[c], J, world, slow_index,
                                source) for c in CLASSES)
    strategy = parse_strategy(strategy_dict(scn), source=source)
    params = params_total(load_model(scn.model))
    costs = _costs(cfg, strategy, params, world, J, cluster, source)
    stragglers = _stragglers(cfg, world, J, slow_index)
    wall = parse_duration(cfg.job.duration) if cfg.job.duration else \
        (cfg.job.iterations * given if given is not None else None)
    if before_steps is not None and wall is not None:
        rate = sum(c.rate_per_s for c in classes) + (stragglers[0] if stragglers else 0.0)
        before_steps(rate * wall + len(events))
    if given is None:                  # every check above: the long part starts here
        stage(f"reliability: simulating the training step on {world:,} GPUs, healthy and "
              f"degraded ({len(slow_names)} fabric state(s))")
    steps = (scenario_step_table if remember_steps else step_table)(
        scn, source, cluster, reroutes, factors, given, workers)
    _interval_fits(cfg, steps.base_s, source)
    _job_fits(cfg, steps.base_s, source)
    plan = JobPlan(
        t_base=steps.base_s, slow_times=tuple(steps.times_s[n] for n in slow_names),
        iterations=float(cfg.job.iterations) if cfg.job.iterations else None,
        duration_s=parse_duration(cfg.job.duration) if cfg.job.duration else None,
        **_interval(cfg), async_mode=cfg.checkpoint.mode == "async" and not cfg.checkpoint.keras,
        costs=costs, persist_slowdown=cfg.checkpoint.persist_slowdown,
        target=cfg.checkpoint.target, replicas=cfg.checkpoint.replicas,
        copy_every=cfg.checkpoint.copy_to_shared_every or 0,
        detection=tuple(parse_duration(getattr(cfg.detection, k)) for k in (
            "collective_timeout", "heartbeat_interval", "heartbeat_timeout",
            "health_check_interval", "monitor_interval")),
        restart_s=_restart(cfg, world), spares=spares, job_nodes=J, classes=classes,
        stragglers=stragglers,
        schedule=tuple((t, ci, comp, slow_index.get(key, -1), dur)
                       for t, ci, comp, key, dur in events))
    rate = sum(c.rate_per_s * sum(c.interrupts) / max(len(c.interrupts), 1) for c in classes)
    info = PlanInfo(steps, tuple(slow_names), world, {c: len(inv[c]) for c in CLASSES},
                    1.0 / rate if rate > 0 else math.inf, params, spares)
    return plan, info


def _spares(cfg: ReliabilityCfg, J: int, source: str) -> int:
    r = cfg.restart
    spares = r.spare_nodes if r.spare_nodes is not None else math.ceil(r.spare_fraction * J)
    if spares > J:
        raise ConfigError(f"a spare pool of {spares} nodes is larger than the cluster it "
                          f"backs ({J} nodes)", source=source,
                          field=f"{FIELD}.restart.spare_nodes")
    return spares


def _slow_names(cfg, inv: dict[str, ComponentSet], events) -> list[str]:
    """``healthy``, then every degraded fabric and straggler factor the job can meet."""
    names = ["healthy"]
    for c in CLASSES:
        if parse_rate(getattr(cfg.failures, c).rate).per_s > 0:
            names += sorted({b.reroute for b in inv[c].blasts if b.reroute} - set(names))
    for _, ci, comp, key, _ in events:
        if ci >= 0 and inv[CLASSES[ci]].blasts[comp].reroute not in names + [None]:
            names.append(inv[CLASSES[ci]].blasts[comp].reroute)
        if key and key not in names:
            names.append(key)
    st = cfg.failures.stragglers
    if parse_rate(st.rate).per_s > 0 and straggler_key(st.factor) not in names:
        names.append(straggler_key(st.factor))
    return names


def _class_plan(name, fc, comps: ComponentSet, J, world, slow_index, source) -> ClassPlan:
    rate = parse_rate(fc.rate)
    counts = {"job": 1, "node": J, "gpu": world, _NOUN[name]: len(comps)}
    if rate.basis not in counts:
        raise ConfigError(f"a {name} rate cannot be counted per {rate.basis}; use per "
                          f"{_NOUN[name]}, node, gpu or the job", source=source,
                          field=f"{FIELD}.failures.{name}.rate")
    total = rate.per_s * counts[rate.basis] if len(comps) else 0.0
    return ClassPlan(
        name, total, fc.shape if fc.distribution == "weibull" else None,
        tuple(b.lost for b in comps.blasts), tuple(b.interrupts for b in comps.blasts),
        tuple(slow_index.get(b.reroute, -1) if b.reroute else -1 for b in comps.blasts),
        parse_duration(fc.repair), fc.repair_distribution == "exponential",
        tuple(fc.detected_by))


def _interval(cfg: ReliabilityCfg) -> dict:
    c = cfg.checkpoint
    if c.keras:
        every = c.keras.iterations_per_epoch if c.keras.save_freq == "epoch" else c.keras.save_freq
        return dict(interval_s=None, every_iterations=every,
                    keras_epoch=c.keras.iterations_per_epoch)
    return dict(interval_s=parse_duration(c.interval) if c.interval else None,
                every_iterations=c.every_iterations, keras_epoch=0)


def _interval_fits(cfg: ReliabilityCfg, step_s: float, source: str) -> None:
    """A time interval is at least one training step: checkpoints are taken between
    steps, so a shorter one (``1 ns``) would silently become a checkpoint every step."""
    c = cfg.checkpoint
    if c.interval and parse_duration(c.interval) < step_s:
        raise ConfigError(f"{c.interval} is shorter than one training step ({step_s:.3g} s): "
                          f"checkpoints are taken between steps; give an interval of at "
                          f"least one step, or every_iterations: 1", source=source,
                          field=f"{FIELD}.checkpoint.interval")


def _job_fits(cfg: ReliabilityCfg, step_s: float, source: str) -> None:
    """A job's duration is at least one training step: a shorter one (``1e-30 s``) has no
    step to lose to a failure, and would report a goodput of 1 for a job that never ran."""
    if cfg.job.duration and parse_duration(cfg.job.duration) < step_s:
        raise ConfigError(f"{cfg.job.duration} is shorter than one training step "
                          f"({step_s:.3g} s): give a job of at least one step",
                          source=source, field=f"{FIELD}.job.duration")


def _restart(cfg: ReliabilityCfg, world: int) -> tuple:
    r = cfg.restart
    comm = parse_duration(r.comm_init.time) * (world / r.comm_init.at_gpus) ** r.comm_init.exponent
    return tuple(parse_duration(x) for x in (r.teardown, r.spare_swap, r.requeue_wait,
                                             r.diagnostics, r.process_start)) + (comm,)


def _stragglers(cfg: ReliabilityCfg, world: int, J: int, slow_index) -> tuple | None:
    st = cfg.failures.stragglers
    rate = parse_rate(st.rate)
    if rate.per_s <= 0:
        return None
    if rate.basis not in ("job", "gpu", "node"):
        raise ConfigError(f"a straggler rate cannot be counted per {rate.basis}; use per gpu, "
                          f"node or the job", field=f"{FIELD}.failures.stragglers.rate")
    per = {"job": 1, "gpu": world, "node": J}[rate.basis]
    return (rate.per_s * per, slow_index[straggler_key(st.factor)], parse_duration(st.duration))


def _costs(cfg, strategy, params: int, N: int, J: int, cluster: Cluster, source) -> CkptCosts:
    c, s = cfg.checkpoint, cfg.storage
    if c.target != "shared_fs" and (c.state_dict == "full" or c.keras):
        raise ConfigError("local_nvme and peer_memory hold per-server shards; use "
                          "state_dict: sharded", source=source, field=f"{FIELD}.checkpoint.target")
    if c.target == "peer_memory" and J < 2:
        raise ConfigError("peer_memory needs at least 2 servers", source=source,
                          field=f"{FIELD}.checkpoint.target")
    size = parse_size(c.size) if c.size is not None else params * state_bytes_per_param(strategy)
    nic_node, nic_gpu, pcie = _fabric_rates(cluster)
    bw = Bandwidths(
        shared_write=parse_bandwidth(s.shared_fs_bandwidth),
        shared_read=parse_bandwidth(s.shared_fs_read_bandwidth or s.shared_fs_bandwidth),
        per_node=parse_bandwidth(s.per_node_bandwidth),
        nvme_write=parse_bandwidth(s.nvme_write_bandwidth),
        nvme_read=parse_bandwidth(s.nvme_read_bandwidth),
        host_copy=parse_bandwidth(s.host_copy_bandwidth) if s.host_copy_bandwidth else pcie,
        nic_gpu=nic_gpu, nic_node=nic_node)
    state = "full" if c.keras else c.state_dict or ("sharded" if strategy.name == "fsdp"
                                                    else "full")
    return checkpoint_costs(float(size), N, J, bw, mode="sync" if c.keras else c.mode,
                            state_dict=state, target=c.target, replicas=c.replicas,
                            overhead_s=parse_duration(c.overhead),
                            persist_overhead_s=parse_duration(c.persist_overhead), load=c.load,
                            gather=gathers_full_state(strategy, job_world(cluster, N)),
                            keras=bool(c.keras))


def _fabric_rates(cluster: Cluster) -> tuple[float, float, float]:
    """Server 0's NIC bandwidth, its per-GPU share and one GPU's PCIe rate (bytes/s),
    at the cluster's (calibrated) link capacities."""
    G, cap = cluster.G, cluster.capacity_bytes_per_s
    gpn = int(G.graph["gpus_per_node"])
    nic = sum(float(cap[cluster.link_id[(u, v)]])
              for u, v, d in G.edges(("n0.nic%d" % j for j in range(64)), data=True)
              if d.get("link_class") == "net")
    gpu_edges = [(float(cap[cluster.link_id[(u, v)]]), d.get("link_class"))
                 for u, v, d in G.edges("n0.gpu0", data=True)]
    pcie = max((b for b, k in gpu_edges if k == "pcie"), default=max(b for b, _ in gpu_edges))
    nic_gpu = nic / gpn if nic else max(b for b, _ in gpu_edges)
    return nic or nic_gpu * gpn, nic_gpu, pcie
