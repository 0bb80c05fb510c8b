"""Energy of one step as the integral of power over the simulated timeline.

A GPU draws its board power by phase (:class:`~.power.GpuPower`) for the seconds it spends
in each (:class:`Phases`), so exposed communication, pipeline bubbles and host waits are
low-power time; the servers' hosts and NICs draw a constant power while the job runs, the
fabric's switches their share; DC becomes AC through the power supplies and the site's PUE
multiplies the IT energy. Pure arithmetic: no SimPy, no file reads (tested against the
integral written out in ``tests/test_energy.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .power import GpuPower, HostPower, Site

J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class Phases:
    """Seconds one GPU spends in each phase of a step (their sum is the step time)."""

    gemm_s: float = 0.0
    memory_s: float = 0.0
    comm_s: float = 0.0
    idle_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.memory_s + self.comm_s + self.idle_s

    def scaled(self, factor: float) -> "Phases":
        return Phases(self.gemm_s * factor, self.memory_s * factor, self.comm_s * factor,
                      self.idle_s * factor)


@dataclass(frozen=True)
class Machine:
    """What the job powers besides its GPUs: ``servers`` whole servers (host and ``nics``
    NIC ports each) and ``switches`` fabric switches' worth (its share of the fabric)."""

    host: HostPower
    servers: int
    nics_per_server: int
    nic_w: float
    switches: float
    switch_w: float


@dataclass(frozen=True)
class Energy:
    """One step's energy and power (SI units; kWh where named). GPU power is board (DC)
    power; node power is a server's AC power (GPUs, host, NICs through its supplies);
    energy per step, per 1M tokens, carbon and cost include the switches and the PUE."""

    step_time_s: float
    gpu_j: float
    host_j: float
    nic_j: float
    switch_j: float
    it_ac_j: float
    facility_j: float
    avg_gpu_w: float
    peak_gpu_w: float
    avg_node_w: float
    peak_node_w: float
    nodes: int
    kwh_per_step: float
    kwh_per_million_tokens: float | None
    co2_kg_per_million_tokens: float | None
    usd_per_million_tokens: float | None
    pue: float
    usd_per_kwh: float
    carbon_kg_per_kwh: float
    power_cap_w: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def gpu_energy_j(phases: Phases, power: GpuPower) -> float:
    """Board energy (J) of one GPU: the sum over phases of power x time."""
    return (phases.gemm_s * power.gemm_w + phases.memory_s * power.memory_w
            + phases.comm_s * power.comm_w + phases.idle_s * power.idle_w)


def gpu_peak_w(phases: Phases, power: GpuPower) -> float:
    """The highest board power of the phases the GPU spends time in."""
    spent = ((phases.gemm_s, power.gemm_w), (phases.memory_s, power.memory_w),
             (phases.comm_s, power.comm_w), (phases.idle_s, power.idle_w))
    return max((w for s, w in spent if s > 0), default=power.idle_w)


def step_energy(gpus: list[tuple[int, Phases]], power: GpuPower, machine: Machine,
                site: Site, step_s: float, tokens_per_step: float,
                power_cap_w: float | None = None) -> Energy:
    """Energy of one step of ``step_s`` seconds.

    ``gpus``: (server, phases) of every GPU of the job. A server's peak is every GPU of it
    at its own peak at once (in a synchronous step they run the same GEMMs together): an
    upper bound on the instant's sum.
    """
    by_server: dict[int, list[Phases]] = {}
    for server, ph in gpus:
        by_server.setdefault(server, []).append(ph)
    psu = machine.host.psu_efficiency
    gpu_j = sum(gpu_energy_j(ph, power) for _, ph in gpus)
    host_j = machine.host.host_w * machine.servers * step_s
    nic_w = machine.nic_w * machine.nics_per_server
    nic_j = nic_w * machine.servers * step_s
    switch_j = machine.switch_w * machine.switches * step_s
    it_ac_j = (gpu_j + host_j + nic_j) / psu + switch_j
    facility_j = it_ac_j * site.pue
    peak_node = max((sum(gpu_peak_w(ph, power) for ph in phs) + machine.host.host_w + nic_w)
                    / psu for phs in by_server.values()) if by_server else 0.0
    kwh = facility_j / J_PER_KWH
    per_m = kwh / tokens_per_step * 1e6 if tokens_per_step > 0 else None
    return Energy(
        step_time_s=step_s, gpu_j=gpu_j, host_j=host_j, nic_j=nic_j, switch_j=switch_j,
        it_ac_j=it_ac_j, facility_j=facility_j,
        avg_gpu_w=gpu_j / len(gpus) / step_s if gpus and step_s > 0 else 0.0,
        peak_gpu_w=max((gpu_peak_w(ph, power) for _, ph in gpus), default=0.0),
        avg_node_w=(gpu_j + host_j + nic_j) / psu / machine.servers / step_s
        if machine.servers and step_s > 0 else 0.0,
        peak_node_w=peak_node, nodes=machine.servers, kwh_per_step=kwh,
        kwh_per_million_tokens=per_m,
        co2_kg_per_million_tokens=None if per_m is None else per_m * site.carbon_kg_per_kwh,
        usd_per_million_tokens=None if per_m is None else per_m * site.usd_per_kwh,
        pue=site.pue, usd_per_kwh=site.usd_per_kwh, carbon_kg_per_kwh=site.carbon_kg_per_kwh,
        power_cap_w=power_cap_w)


@dataclass(frozen=True)
class JobPower:
    """Facility power (W, PUE included) of a job's machine: ``busy_w`` while it trains (the
    simulated step's average: its energy / its time), ``idle_w`` while it is down or waits
    (every GPU at its idle power; hosts, NICs and switches on). What energy lost to failures
    and restarts is priced at (``clustersim reliability``)."""

    busy_w: float
    idle_w: float
    usd_per_kwh: float
    carbon_kg_per_kwh: float


def idle_facility_w(n_gpus: int, power: GpuPower, machine: Machine, site: Site) -> float:
    """Facility power of ``machine`` with its ``n_gpus`` GPUs all idle:
    ((GPUs x idle + servers x (host + NIC ports x port)) / PSU + switches x switch) x PUE."""
    dc = (n_gpus * power.idle_w
          + machine.servers * (machine.host.host_w + machine.nics_per_server * machine.nic_w))
    return (dc / machine.host.psu_efficiency + machine.switches * machine.switch_w) * site.pue
