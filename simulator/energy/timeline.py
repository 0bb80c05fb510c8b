"""From a replayed step (:class:`~simulator.pipeline.RunResult`) to its :class:`Energy`:
each rank class's seconds in GEMMs, memory-bound kernels, communication alone and idle,
read off its op records, and the servers, NICs and switches the job powers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..engine.records import COMM_KINDS, Timeline
from ..engine.variability import Variability
from ..metrics.summary import COMPUTE_KINDS, union_length
from .model import (Energy, JobPower, Machine, Phases, gpu_energy_j, idle_facility_w,
                    step_energy)
from .power import PowerTable, Site, load_power

TENSOR_CORE_CLASSES = ("matmul", "attention", "conv")   # compute.yaml: tensor_cores: true


def class_phases(tl: Timeline, stretch: Mapping[str, tuple[float, float]] | None = None
                 ) -> dict[str, Phases]:
    """Per rank class, its step's seconds by phase. An instant is a GEMM's if a tensor-core
    kernel runs, else memory-bound if another kernel or copy runs, else communication if a
    collective or transfer runs, else idle (host work, waits, bubbles).

    ``stretch``: class -> the rank-to-rank variability's time factors of its tensor-core and
    other kernels (:func:`variability_stretch`). A class's kernels run at the pace of its
    slowest rank, and the other ranks wait for it: a GPU computes for the typical rank's
    time (its kernels' seconds over the factor) and waits the rest, so that rest is idle
    power, not kernel power (for all but the slowest of the class's ranks)."""
    spans: dict[str, tuple[list, list, list]] = {}
    for r in tl.records:
        gemm, other, comm = spans.setdefault(r.cls, ([], [], []))
        if r.kind in COMPUTE_KINDS:
            (gemm if r.op_class in TENSOR_CORE_CLASSES else other).append((r.start_s, r.end_s))
        elif r.kind in COMM_KINDS:
            comm.append((r.start_s, r.end_s))
    out = {}
    for cls, (gemm, other, comm) in sorted(spans.items()):
        g = union_length(gemm)
        kernels = union_length(gemm + other)
        busy = union_length(gemm + other + comm)
        idle = max(tl.iteration_time_s - busy, 0.0)
        m = kernels - g
        f_gemm, f_other = (stretch or {}).get(cls, (1.0, 1.0))
        waited = g - g / f_gemm + m - m / f_other
        out[cls] = Phases(g / f_gemm, m / f_other, busy - kernels, idle + waited)
    return out


def variability_stretch(trace, job) -> dict[str, tuple[float, float]] | None:
    """Per rank class of ``trace``, the time factors its replay under ``job`` (a
    :class:`~simulator.engine.JobConfig`) put on its GEMMs and on its other kernels
    (rank-to-rank variability, :mod:`simulator.engine.variability`, drawn as the replay
    draws them); None for the ideal machine."""
    if job.variability is None:
        return None
    vary = Variability.for_trace(trace, job.variability, job.seed)
    return {c.id: (vary.compute_factor(c.id, "matmul"), vary.compute_factor(c.id, "elementwise"))
            for c in trace.classes}


def energy_of(result, site: Site | None = None, table: PowerTable | None = None
              ) -> Energy | None:
    """The energy of ``result``'s step (None for a GPU without power data). An extrapolated
    step keeps the replayed step's shares of each phase over its own step time."""
    job = _job(result, table)
    return None if job is None else _step_energy(result, job, site or default_site(table))


def pass_energy_of(result, steps: int, wait_s: float, site: Site | None = None,
                   table: PowerTable | None = None) -> Energy | None:
    """The energy of ``steps`` of ``result``'s step back to back and ``wait_s`` seconds more
    with every GPU idle (hosts, NICs and switches on): one :class:`Energy` over the whole
    span (its ``kwh_per_step`` is the span's); None for a GPU without power data."""
    job = _job(result, table)
    if job is None:
        return None
    power, machine, gpus = job
    step_s = result.metrics.iteration_time_s
    spans = [(server, replace(ph.scaled(steps), idle_s=ph.idle_s * steps + wait_s))
             for server, ph in gpus]
    return step_energy(spans, power, machine, site or default_site(table),
                       steps * step_s + wait_s, result.metrics.tokens_per_s * step_s * steps,
                       result.setup.compute.gpu.power_cap_w)


def _step_energy(result, job: tuple, site: Site) -> Energy:
    """:func:`energy_of` with ``result``'s :func:`_job` at hand."""
    power, machine, gpus = job
    step_s = result.metrics.iteration_time_s
    tokens = result.metrics.tokens_per_s * step_s
    return step_energy(gpus, power, machine, site, step_s, tokens,
                       result.setup.compute.gpu.power_cap_w)


def job_power(result, site: Site | None = None, table: PowerTable | None = None
              ) -> JobPower | None:
    """Facility power of ``result``'s job busy (its step's average) and idle (every GPU
    idle), at ``site``'s (default: the data file's) PUE, price and carbon; None for a GPU
    without power data."""
    job = _job(result, table)
    if job is None:
        return None
    power, machine, gpus = job
    site = site or default_site(table)
    e = _step_energy(result, job, site)
    return JobPower(e.facility_j / e.step_time_s if e.step_time_s > 0 else 0.0,
                    idle_facility_w(len(gpus), power, machine, site),
                    site.usd_per_kwh, site.carbon_kg_per_kwh)


def _job(result, table: PowerTable | None):
    """(the GPU's power under its cap, the job's machine, (server, phases) of every GPU)."""
    table = table or load_power()
    setup = result.setup
    G = setup.cluster.G
    power, host = table.gpu(_catalog_name(G)), table.host(_catalog_name(G))
    if power is None or host is None:
        return None
    power = power.capped(setup.compute.gpu.power_cap_w)
    tl = result.timeline
    wait_s = getattr(result, "loader_wait_s", 0.0)     # every GPU idle: its input is late
    step_s = result.metrics.iteration_time_s - wait_s
    phases = class_phases(tl, variability_stretch(setup.trace, setup.job))
    scale = step_s / tl.iteration_time_s if tl.iteration_time_s > 0 else 0.0
    per_node = int(G.graph.get("gpus_per_node") or host.gpus)
    gpus = [(rank // per_node, _waited(phases.get(c.id, Phases(idle_s=tl.iteration_time_s))
                                       .scaled(scale), wait_s))
            for c in setup.trace.classes for rank in c.ranks]
    servers = len({s for s, _ in gpus})
    machine = Machine(_host_share(host, per_node), servers, _nics_per_server(G),
                      table.nic_w, _switches(G) * servers / max(int(G.graph.get("nodes")
                                                                      or servers), 1),
                      table.switch_w)
    return power, machine, gpus


def _waited(ph: Phases, wait_s: float) -> Phases:
    return replace(ph, idle_s=ph.idle_s + wait_s) if wait_s > 0 else ph


def default_site(table: PowerTable | None = None) -> Site:
    return (table or load_power()).site


def _catalog_name(G) -> str:
    return str(G.graph.get("gpu"))


def _host_share(host, per_node: int):
    """A server of ``per_node`` GPUs: the host entry scaled to it (an NVL72 rack's entry is
    for 72 GPUs; a smaller server of that GPU takes its share)."""
    return replace(host, host_w=host.host_w * per_node / host.gpus, gpus=per_node)


def _nics_per_server(G) -> int:
    """NIC ports of server 0 (servers of one template are alike)."""
    return sum(1 for _, d in G.nodes(data=True)
               if d.get("kind") == "nic" and d.get("server") == 0)


def _switches(G) -> int:
    return sum(1 for _, d in G.nodes(data=True) if d.get("kind") == "switch")


def board_w(tl: Timeline, power, ranks: dict[str, int],
            stretch: Mapping[str, tuple[float, float]] | None = None) -> float:
    """The average board power (W) of one GPU of ``tl``'s step at ``power``: each rank
    class's phases (with the variability ``stretch`` of :func:`class_phases`) weighted by
    its ``ranks`` (class id -> rank count; a class without records idles); the shares are
    the replayed step's whatever its extrapolated length."""
    phases = class_phases(tl, stretch)
    n = sum(ranks.values())
    if tl.iteration_time_s <= 0 or n == 0:
        return power.idle_w
    idle = Phases(idle_s=tl.iteration_time_s)
    return sum(k * gpu_energy_j(phases.get(c, idle), power) for c, k in ranks.items()) \
        / n / tl.iteration_time_s


def server_power(G, table: PowerTable | None = None):
    """(the GPU's phase powers, one server's host, its NIC ports' power in W, the fabric's
    switches' power in W, PSU efficiency) of cluster graph ``G``; None for a GPU without
    power data (``clustersim cluster``'s fleet power)."""
    table = table or load_power()
    power, host = table.gpu(_catalog_name(G)), table.host(_catalog_name(G))
    if power is None or host is None:
        return None
    per_node = int(G.graph.get("gpus_per_node") or host.gpus)
    return (power, _host_share(host, per_node).host_w, _nics_per_server(G) * table.nic_w,
            _switches(G) * table.switch_w, host.psu_efficiency)
