"""From a mix to a fleet: the one cluster, each job kind's setup, the work bound.

Jobs of the same scenario, GPU count and ``set`` keys are one *kind*: their trace and models
are built once (:func:`~simulator.pipeline.build_setup` on the mix's cluster, as ``clustersim
run`` builds them with ``--set cluster.gpus=N``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..constants import load_constants
from ..errors import ConfigError
from ..reliability.inventory import degraded_graph
from ..reliability.quantities import parse_duration
from ..scenario import load_scenario, resolve_scenario, scenario_from_dict
from ..topology.build import scenario_cluster
from .contention import StepTimes, Work
from .failures import failing, scheduled
from .generate import generate_jobs
from .mix import JobEntry, Mix, arrival_s, job_name
from .placement import Layout
from .simulate import Fleet, FleetPower, JobSpec

SHAPES_PER_KIND = 3     # placements of different shapes a kind is simulated alone on
CO_SIMULATIONS = 2      # of a multi-server job: at its start and at a neighbour's change


def mix_cluster(mix: Mix, source: str, graph=None):
    """The cluster of the mix's ``cluster`` section (ECMP salted with seed 0, as a scenario
    that sets none); on ``graph`` (a degraded fabric of it) where given."""
    base = scenario_from_dict({"name": mix.name, "model": "llama-2-7b",
                               "cluster": mix.cluster.model_dump(exclude_unset=True)}, source)
    try:
        return scenario_cluster(base, load_constants(), graph)
    except ConfigError as exc:
        raise exc.located(source) from None


def build_fleet(mix: Mix, source: str) -> Fleet:
    """The fleet of ``mix`` (read from ``source``): cluster, jobs and their kinds.

    :raises ConfigError: naming ``source`` and the job's field where a job cannot run on
        the cluster, or the work past ``limits.max_work``.
    """
    cluster = mix_cluster(mix, source)
    layout = Layout.of(cluster)
    per = layout.per_server
    if mix.jobs is not None:
        entries = mix.jobs
    else:
        try:
            entries = generate_jobs(mix.generate, cluster.n_gpus, per, mix.seed)
        except ConfigError as exc:
            raise exc.located(source) from None
    kinds: dict = {}
    specs = []
    for i, entry in enumerate(entries):
        _check_size(entry, i, cluster.n_gpus, per, source)
        work = _kind(kinds, entry, i, mix, cluster, source)
        ck = entry.checkpoint
        specs.append(JobSpec(
            job_name(entry, i), arrival_s(entry), work, entry.gpus, entry.steps,
            parse_duration(entry.duration) if entry.duration is not None else None,
            entry.priority, parse_duration(ck.interval) if ck else None,
            parse_duration(ck.save) if ck else 0.0, parse_duration(ck.restore) if ck else 0.0))
    _check_work(specs, per, mix, source)
    components, classes = failing(cluster, layout, mix, source)
    _check_failures(components, classes, mix, source)
    step_times = StepTimes(layout)
    step_times.rebuild = _rebuild(mix, cluster, source)
    return Fleet(layout, specs, mix.scheduler, mix.placement, components, mix.seed,
                 parse_duration(mix.limits.horizon),
                 scheduled(mix, components, len(layout.gpus), source),
                 str(cluster.G.graph.get("gpu", "")), fleet_power(cluster.G), step_times,
                 classes, max_work=mix.limits.max_work, source=source)


def _rebuild(mix: Mix, cluster, source: str):
    """``rebuild(work, degraded)``: a job kind built again on the mix's cluster without the
    fabric elements ``degraded`` (a spine, a link), as the reliability model builds a
    degraded fabric (:func:`~simulator.reliability.inventory.degraded_graph`)."""
    from ..pipeline import build_setup
    built: dict = {}

    def rebuild(work: Work, degraded: tuple) -> Work:
        if degraded not in built:
            G = cluster.G
            for element in degraded:
                G = degraded_graph(G, element)
            built.clear()                  # one degraded fabric held at a time
            built[degraded] = mix_cluster(mix, source, G)
        setup = build_setup(work.setup.scenario, source, cluster=built[degraded])
        label = ", ".join("~".join(e[1:]) for e in degraded)
        return dataclasses.replace(
            _work(f"{work.name} without {label}", setup), degraded=degraded)
    return rebuild


def fleet_power(G) -> FleetPower | None:
    """The machine's power from power.yaml at its site's PUE; None for a GPU without
    power data (the fleet then reports no power)."""
    from ..energy.power import load_power
    from ..energy.timeline import server_power
    found = server_power(G)
    if found is None:
        return None
    gpu, host_w, nics_w, switches_w, psu = found
    return FleetPower(gpu, host_w, nics_w, switches_w, psu, load_power().site.pue)


def _check_size(entry: JobEntry, i: int, n_gpus: int, per: int, source: str) -> None:
    field = f"jobs[{i}].gpus"
    if entry.gpus > n_gpus:
        raise ConfigError(f"{entry.gpus} GPUs; the cluster has {n_gpus}", source=source,
                          field=field)
    if entry.gpus > per and entry.gpus % per:
        raise ConfigError(f"{entry.gpus} GPUs: a job of more than one server takes whole "
                          f"servers of {per} GPUs", source=source, field=field)


def _scenario_path(name: str, source: str) -> Path:
    beside = Path(source).parent / name
    return beside if beside.is_file() else resolve_scenario(name)


def _kind(kinds: dict, entry: JobEntry, i: int, mix: Mix, cluster, source: str) -> Work:
    """The kind of job ``entry`` (the ``i``-th), built the first time it is met."""
    from ..pipeline import build_setup
    where = f"jobs[{i}]"
    try:
        path = _scenario_path(entry.scenario, source)
    except ConfigError as exc:
        raise ConfigError(exc.reason, source=source, field=f"{where}.scenario") from None
    for key in entry.set:
        if key.split(".")[0] == "cluster":       # replaced below by the mix's cluster
            raise ConfigError("the mix's cluster section and the job's gpus set its cluster; "
                              "a job's set takes no cluster key", source=source,
                              field=f"{where}.set.{key}")
    sets = [f"{k}={json.dumps(v)}" for k, v in sorted(entry.set.items())]
    key = (str(path.resolve()), entry.gpus, tuple(sets))
    if key in kinds:
        return kinds[key]
    try:
        scn = load_scenario(path, sets)
        scn = scn.model_copy(update={"cluster": mix.cluster.model_copy(
            update={"gpus": entry.gpus})})
        setup = build_setup(scn, str(path), cluster=cluster)
    except ConfigError as exc:
        raise ConfigError(str(exc), source=source, field=where) from None
    if scn.training.dense_mask_workers is not None:   # co-simulated steps replay the trace
        raise ConfigError("jobs sharing the cluster are replayed without their training "
                          "data loader (run prices it)", source=source,
                          field=f"{where}.training.dense_mask_workers")
    work = _work(f"{scn.name}@{entry.gpus}" + (f"[{','.join(sets)}]" if sets else ""), setup)
    first = next(iter(kinds.values()), None)
    if first is not None and first.machine != work.machine:
        raise ConfigError(f"simulation.fidelity {work.machine.fidelity} differs from the "
                          f"first job's {first.machine.fidelity}: jobs on one cluster share "
                          f"one fabric model", source=source, field=f"{where}.scenario")
    kinds[key] = work
    return work


def _work(name: str, setup) -> Work:
    return Work(name, setup.trace, setup.collectives, setup.compute, setup.job, setup.machine,
                setup.capacity_bytes, setup)


def work_estimate(specs: list[JobSpec], per_server: int) -> float:
    """Op replays the fleet may cost: each kind alone on :data:`SHAPES_PER_KIND` shapes,
    and each job of more than one server co-simulated :data:`CO_SIMULATIONS` times (a job
    on one server shares no link; steps are never replayed one by one)."""
    kinds = {id(s.work): s.work for s in specs}
    alone = SHAPES_PER_KIND * sum(w.step_ops for w in kinds.values())
    return float(alone + CO_SIMULATIONS * sum(s.work.trace_ops for s in specs
                                              if s.gpus > per_server))


def _check_failures(components, classes, mix: Mix, source: str) -> None:
    """Refuse rates that would draw more than ``limits.max_failures`` failures before the
    horizon (every component's rate and every class's summed rate, over the whole horizon:
    a mix whose jobs cannot finish runs to it)."""
    horizon = parse_duration(mix.limits.horizon)
    rate = sum(c.rate_per_s for c in components) + sum(k.rate_per_s for k in classes)
    expected = rate * horizon
    if expected > mix.limits.max_failures:
        raise ConfigError(f"about {expected:.3g} failures expected in the horizon of "
                          f"{mix.limits.horizon}, past the limit of "
                          f"{mix.limits.max_failures:.3g}: lower failure rates, a shorter "
                          f"limits.horizon or a higher limit", source=source,
                          field="limits.max_failures")


def _check_work(specs: list[JobSpec], per_server: int, mix: Mix, source: str) -> None:
    estimate = work_estimate(specs, per_server)
    if estimate > mix.limits.max_work:
        raise ConfigError(f"about {estimate:.3g} op replays for {len(specs)} jobs, past the "
                          f"limit of {mix.limits.max_work:.3g}: fewer or smaller jobs, or a "
                          f"higher limit", source=source, field="limits.max_work")
