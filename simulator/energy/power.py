"""The power data file (``simulator/data/power.yaml``): per GPU model the board power by
phase, per server the host, NIC and switch power, the clock curve under a power cap, and
the site defaults. Read once, checked where read: a bad value names ``entry.key``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..hardware import GpuSpec, watts
from ..units import UnitError
from ..yamlio import read_yaml

DATA = Path(__file__).resolve().parent.parent / "data" / "power.yaml"
_PHASES = ("idle", "gemm", "memory_bound", "communication")


@dataclass(frozen=True)
class GpuPower:
    """Board power of one GPU (watts) in each phase of the timeline."""

    idle_w: float
    gemm_w: float
    memory_w: float
    comm_w: float

    def capped(self, cap_w: float | None) -> "GpuPower":
        """Every phase clipped at a board limit of ``cap_w`` watts (None: unchanged)."""
        if cap_w is None:
            return self
        return GpuPower(*(min(w, cap_w) for w in dataclasses.astuple(self)))

    @property
    def peak_w(self) -> float:
        return max(dataclasses.astuple(self))


@dataclass(frozen=True)
class HostPower:
    """One server's non-GPU power (DC, watts) for ``gpus`` GPUs, and its supplies' DC/AC."""

    host_w: float
    gpus: int
    psu_efficiency: float


@dataclass(frozen=True)
class Site:
    """Where the machine runs: PUE, electricity price (USD/kWh), grid carbon (kg CO2/kWh)."""

    pue: float
    usd_per_kwh: float
    carbon_kg_per_kwh: float


@dataclass(frozen=True)
class PowerTable:
    gpus: dict[str, GpuPower]
    hosts: dict[str, HostPower]
    nic_w: float
    switch_w: float
    caps: dict[str, tuple[tuple[float, float], ...]]     # gpu -> ((cap_w, rate), ...)
    site: Site                                           # the file's defaults
    source: str

    def gpu(self, name: str) -> GpuPower | None:
        return self.gpus.get(name)

    def host(self, name: str) -> HostPower | None:
        return self.hosts.get(name)

    def capped_rate(self, gpu: str, cap_w: float, field: str = "cluster.power_cap_w") -> float:
        """Fraction of the datasheet tensor-core rate ``gpu`` sustains under ``cap_w``.

        :raises ConfigError: (``field``) for a GPU without a sourced curve or a cap outside
            its points.
        """
        points = self.caps.get(gpu)
        if not points:
            raise ConfigError(f"no sourced clock curve under a power cap for {gpu} "
                              f"(power.yaml power_caps has {', '.join(sorted(self.caps))})",
                              field=field)
        lo, hi = points[0][0], points[-1][0]
        if not lo <= cap_w <= hi:
            raise ConfigError(f"{cap_w:g} W is outside {gpu}'s sourced curve ({lo:g}-{hi:g} W)",
                              field=field)
        for (w0, r0), (w1, r1) in zip(points, points[1:]):
            if w0 <= cap_w <= w1:
                return r0 + (r1 - r0) * (cap_w - w0) / (w1 - w0)
        return points[-1][1]            # (a single point: lo == hi == cap_w)


def capped_gpu(gpu: GpuSpec, cap_w: float | None, table: PowerTable | None = None) -> GpuSpec:
    """``gpu`` under a board power limit of ``cap_w`` watts (``cluster.power_cap_w``; None:
    its own board limit, the catalog's ``tdp``): its tensor-core rate from the sourced
    curve, its limit recorded. A GPU already capped in the catalog (H100-SXM-96GB-500W)
    takes only its own limit. One path for both: a GPU whose board limit is below the draw
    at which its die holds full clocks (the curve's last point) runs at the clock the limit
    allows, whether the limit is a what-if (an H100 at 500 W) or the board's (MI300X).

    :raises ConfigError: (``cluster.power_cap_w``) where the cap cannot be honoured.
    """
    if gpu.power_cap_w is not None:
        if cap_w is None or cap_w == gpu.power_cap_w:
            return gpu
        raise ConfigError(f"{gpu.name} runs at its own {gpu.power_cap_w:g} W limit; no sourced "
                          f"clock curve for another", field="cluster.power_cap_w")
    if cap_w is not None and gpu.tdp_w is not None and cap_w > gpu.tdp_w:
        raise ConfigError(f"{cap_w:g} W is above {gpu.name}'s {gpu.tdp_w:g} W board limit "
                          f"(gpus.yaml tdp)", field="cluster.power_cap_w")
    table = table or load_power()
    if cap_w is None:
        points = table.caps.get(gpu.name)
        if gpu.tdp_w is None or not points or gpu.tdp_w >= points[-1][0]:
            return gpu                  # full clocks at its own limit
        cap_w = gpu.tdp_w
    rate = table.capped_rate(gpu.name, cap_w)
    return dataclasses.replace(gpu, power_cap_w=float(cap_w), power_capped_rate=rate)


@lru_cache(maxsize=4)
def load_power(path: str | Path | None = None) -> PowerTable:
    """Read and check ``power.yaml`` (or ``path``).

    :raises ConfigError: with ``source`` the file and ``field`` the entry for a missing or bad
        value.
    """
    src = str(path or DATA)
    r = _Reader(src)
    data = read_yaml(path or DATA, "power data")
    site = r.mapping(data, "site")
    gpus = {name: GpuPower(*(r.watts(r.key(e, k, f"gpus.{name}"), f"gpus.{name}.{k}")
                             for k in _PHASES))
            for name, e in r.mapping(data, "gpus").items()}
    hosts = {}
    for name, e in r.mapping(data, "hosts").items():
        where = f"hosts.{name}"
        hosts[name] = HostPower(r.watts(r.key(e, "host", where), f"{where}.host"),
                                r.positive_int(r.key(e, "gpus", where), f"{where}.gpus"),
                                r.fraction(r.key(e, "psu_efficiency", where),
                                           f"{where}.psu_efficiency"))
    caps = {name: r.curve(r.key(e, "points", f"power_caps.{name}"), f"power_caps.{name}.points")
            for name, e in r.mapping(data, "power_caps").items()}

    def value(entry: Any, where: str) -> Any:
        return r.key(r.key(entry, where.split(".")[1], where.split(".")[0]), "value", where)

    return PowerTable(
        gpus, hosts, r.watts(value(r.mapping(data, "nic"), "nic.port"), "nic.port.value"),
        r.watts(value(r.mapping(data, "switch"), "switch.power"), "switch.power.value"), caps,
        Site(r.number(value(site, "site.pue"), "site.pue.value", low=1.0),
             r.number(value(site, "site.electricity_usd_per_kwh"),
                      "site.electricity_usd_per_kwh.value", low=0.0),
             r.number(value(site, "site.carbon_kg_per_kwh"), "site.carbon_kg_per_kwh.value",
                      low=0.0)), src)


class _Reader:
    """Checks of the file's values, each failure named by its dotted path."""

    def __init__(self, src: str):
        self.src = src

    def fail(self, field: str, why: str):
        raise ConfigError(why, source=self.src, field=field)

    def key(self, entry: Any, key: str, where: str) -> Any:
        if not isinstance(entry, dict) or key not in entry:
            self.fail(f"{where}.{key}", "missing")
        return entry[key]

    def mapping(self, data: Any, field: str) -> dict:
        value = data.get(field) if isinstance(data, dict) else None
        if not isinstance(value, dict) or not value:
            self.fail(field, "must be a non-empty mapping")
        return value

    def watts(self, value: Any, field: str) -> float:
        try:
            w = watts(value)
        except UnitError as exc:
            self.fail(field, str(exc))
        if not w > 0:
            self.fail(field, f"must be > 0 W, got {value!r}")
        return w

    def number(self, value: Any, field: str, low: float) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= low:
            self.fail(field, f"must be a number >= {low:g}, got {value!r}")
        return float(value)

    def positive_int(self, value: Any, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.fail(field, f"must be a whole number >= 1, got {value!r}")
        return value

    def fraction(self, value: Any, field: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            self.fail(field, f"must be in (0, 1], got {value!r}")
        return float(value)

    def curve(self, points: Any, field: str) -> tuple[tuple[float, float], ...]:
        if not isinstance(points, list) or not points:
            self.fail(field, "must be a list of [cap, rate] pairs")
        out = []
        for i, p in enumerate(points):
            if not isinstance(p, list) or len(p) != 2:
                self.fail(f"{field}[{i}]", "must be a [cap, rate] pair")
            out.append((self.watts(p[0], f"{field}[{i}]"), self.fraction(p[1], f"{field}[{i}]")))
        caps = [w for w, _ in out]
        if caps != sorted(set(caps)):
            self.fail(field, "caps must increase")
        return tuple(out)
