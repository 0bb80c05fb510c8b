"""The contention capture (``validation/cluster/``) as the fleet's co-simulation sees it.

Two real gloo jobs ran on this kind of machine through the fabric of
``validation/cluster/contention_fabric.yaml``: hosts in network namespaces, each on one of
two leaf bridges, the bridges joined by one veth "spine", every link shaped by ``tc tbf``.
Here the same file becomes a graph (each host a one-"GPU" server whose NIC reaches its leaf
over a link of its tbf rate; the spine one link between the leaves) and each job a trace of
one all_reduce of its size, its step. :class:`~simulator.fleet.contention.StepTimes` (what
``clustersim cluster`` runs) gives each job's step alone and beside the other.

Collectives are gloo's ring over the cluster's routes (:class:`RoutedGloo`): each rank
sends ``2 (n-1)/n x size`` bytes to the next rank along its route, one flow on every link
crossed, at the link's rate times the efficiency gloo reached alone in the capture machine's
own microbenchmark (``validation/traces/capture_machine.yaml`` at 200 Mbit/s, 2 ranks: TCP,
IP and Ethernet headers counted by tbf and gloo's own framing), after its fitted latency
``alpha``. Nothing is fitted to the contention capture; flows that share a link share it
max-min (the flow fabric).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np

from simulator.cluster import Cluster
from simulator.collectives.plan import Plan
from simulator.engine import Placement
from simulator.errors import ConfigError
from simulator.fleet.contention import Counts, StepTimes, Work
from simulator.fleet.placement import Layout
from simulator.trace.schema import Communicator, Op, RankClass, Trace
from simulator.units import UnitError, parse_bandwidth, parse_size, parse_time
from simulator.validation.captured.calibration import wire_factor
from simulator.validation.captured.machine import (MEMORY_BYTES_PER_S, RecordedCompute,
                                                   description)
from simulator.validation.paths import data_dir
from simulator.yamlio import read_yaml

CONSTANTS_AT = "200mbit"      # the microbenchmark whose 2-rank all_reduce prices the flows


def cluster_dir() -> Path:
    """``validation/cluster`` of the repository (or the wheel's copy)."""
    return data_dir("cluster")


def load_fabric(path: Path | None = None) -> dict:
    """The capture's fabric file (``contention_fabric.yaml``), checked.

    :raises ConfigError: naming the file and the field of a missing or unknown key, a value
        without its unit, a leaf other than 0 or 1, or a job rank that is not a host.
    """
    path = path or cluster_dir() / "contention_fabric.yaml"
    data = read_yaml(path, "contention fabric")
    try:
        check_fabric(data)
    except ConfigError as e:
        raise e.located(str(path)) from None
    return data


def _keys(d, keys: set, where: str) -> None:
    if not isinstance(d, dict) or set(d) != keys:
        got = sorted(d) if isinstance(d, dict) else type(d).__name__
        raise ConfigError(f"expected the keys {sorted(keys)}, got {got}", field=where)


def _unit(parse, text, where: str):
    try:
        return parse(text)
    except UnitError as e:
        raise ConfigError(str(e), field=where) from None


def check_fabric(data) -> None:
    """Every field of a fabric file (see :func:`load_fabric`)."""
    _keys(data, {"date", "tbf", "run", "setups"}, "(top level)")
    _keys(data["tbf"], {"burst", "latency"}, "tbf")
    _unit(parse_size, data["tbf"]["burst"], "tbf.burst")
    _unit(parse_time, data["tbf"]["latency"], "tbf.latency")
    _keys(data["run"], {"warm_s", "window_s", "tail_s"}, "run")
    for name, setup in data["setups"].items():
        where = f"setups.{name}"
        _keys(setup, {"description", "spine", "hosts", "jobs"}, where)
        _unit(parse_bandwidth, setup["spine"], f"{where}.spine")
        for host, spec in setup["hosts"].items():
            _keys(spec, {"leaf", "rate"}, f"{where}.hosts.{host}")
            _unit(parse_bandwidth, spec["rate"], f"{where}.hosts.{host}.rate")
            if spec["leaf"] not in (0, 1):
                raise ConfigError(f"leaf(={spec['leaf']!r}) must be 0 or 1",
                                  field=f"{where}.hosts.{host}.leaf")
        for job, spec in setup["jobs"].items():
            _keys(spec, {"ranks", "size"}, f"{where}.jobs.{job}")
            ranks = spec["ranks"]
            if len(set(ranks)) != len(ranks) or not set(ranks) <= set(setup["hosts"]):
                raise ConfigError(f"ranks(={ranks}) must be distinct hosts of the setup",
                                  field=f"{where}.jobs.{job}.ranks")
            if not isinstance(spec["size"], int) or spec["size"] <= 0 or spec["size"] % 4:
                raise ConfigError(f"size(={spec['size']!r}) must be bytes of fp32: a positive "
                                  "multiple of 4", field=f"{where}.jobs.{job}.size")


def fabric_graph(setup: dict) -> nx.Graph:
    """One setup of the fabric file as a graph: host ``i`` (file order) is server ``i``,
    GPU ``n{i}.gpu0``, NIC ``n{i}.nic0`` on ``leaf.{leaf}`` at its rate; the spine is one
    link ``leaf.0`` - ``leaf.1``. Rates are per direction (tbf shapes each direction)."""
    hosts = setup["hosts"]
    G = nx.Graph(name="contention-capture", gpu="capture-cpu", gpus_per_node=1,
                 nodes=len(hosts))
    for leaf in (0, 1):
        G.add_node(f"leaf.{leaf}", kind="switch", tier="leaf")
    G.add_edge("leaf.0", "leaf.1", bw_bytes_per_s=parse_bandwidth(setup["spine"]),
               latency_s=0.0, link_type="veth-tbf", link_class="net")
    for i, (host, spec) in enumerate(hosts.items()):
        gpu, nic = f"n{i}.gpu0", f"n{i}.nic0"
        G.add_node(gpu, kind="gpu", server=i, local="gpu0", index=0, rank=i,
                   template="capture-cpu", host=host)
        G.add_node(nic, kind="nic", server=i, local="nic0", index=0, template="capture-cpu")
        G.add_edge(gpu, nic, bw_bytes_per_s=MEMORY_BYTES_PER_S, latency_s=0.0,
                   link_type="host-memory", link_class="cpu")
        G.add_edge(nic, f"leaf.{int(spec['leaf'])}", bw_bytes_per_s=parse_bandwidth(spec["rate"]),
                   latency_s=0.0, link_type="veth-tbf", link_class="net")
    return G


class RoutedGloo:
    """gloo's ring all_reduce on any graph: one flow over every ring edge's route, each
    link crossed taking ``1 / efficiency`` bytes of its capacity per payload byte."""

    def __init__(self, cluster: Cluster, alpha_s: float, efficiency: float):
        if not 0 < efficiency <= 1:
            raise ConfigError(f"efficiency(={efficiency}) must be in (0, 1]",
                              field="efficiency")
        self.cluster, self.alpha_s, self.efficiency = cluster, alpha_s, efficiency

    def plan(self, op: str, size_bytes: int, ranks, algo: str = "auto", proto: str = "auto",
             root: int = 0) -> Plan:
        if op != "all_reduce":
            raise ConfigError(f"gloo {op} is not modelled here (all_reduce only)",
                              field="collective")
        n, gpus = len(ranks), self.cluster.gpus
        if n == 1:
            empty = np.zeros(0, np.int64)
            return Plan(op, "local", "gloo", 1, 1, size_bytes, 0.0, 0.0, empty, np.zeros(0),
                        math.inf, 0.0)
        routes = [self.cluster.routes.route(gpus[ranks[i]], gpus[ranks[(i + 1) % n]])
                  for i in range(n)]
        links, where = np.unique(np.concatenate([r.links for r in routes]),
                                 return_inverse=True)
        wire = np.bincount(where, weights=np.concatenate([r.coef for r in routes]))
        coef = wire / self.efficiency
        payload = wire_factor(op, n) * size_bytes
        rate = float(np.min(self.cluster.nominal_bytes_per_s[links] / coef))
        return Plan(op, "ring", "gloo", n, n, size_bytes, self.alpha_s, payload, links, coef,
                    math.inf, self.alpha_s + payload / rate, wire_coef=wire)


def all_reduce_step(size_bytes: int, ranks: int) -> Trace:
    """A job's step: one all_reduce of ``size_bytes`` on all of its ranks."""
    op = Op(id=0, stream="comm", kind="collective", name="all_reduce",
            collective="all_reduce", size_bytes=size_bytes, comm="world")
    world = tuple(range(ranks))
    return Trace(ranks, [RankClass("all", world, [op])],
                 {"world": Communicator("world", (world,))})


@dataclass(frozen=True)
class Predicted:
    """A job's simulated step alone and beside the other job of its setup."""

    setup: str
    job: str
    alone_s: float
    together_s: float

    @property
    def slowdown(self) -> float:
        return self.together_s / self.alone_s


def predict(name: str, fabric: dict | None = None) -> tuple[dict[str, Predicted], Counts]:
    """Each job of setup ``name`` alone and together, through the fleet's step times.

    :raises ConfigError: naming ``setup`` when the fabric file has no such setup.
    """
    fabric = fabric if fabric is not None else load_fabric()
    setup = fabric["setups"].get(name)
    if setup is None:
        raise ConfigError(f"no setup {name!r} (have: {', '.join(fabric['setups'])})",
                          field="setup")
    cluster = Cluster(fabric_graph(setup))
    k = description(CONSTANTS_AT).constants[2]["all_reduce"]
    planner = RoutedGloo(cluster, float(k["alpha_s"]), float(k["efficiency"]))
    hosts = list(setup["hosts"])
    running = {}
    for job, spec in setup["jobs"].items():
        ranks = spec["ranks"]
        work = Work(f"{name}.{job}",    # a kind per job: the setups are not regular fabrics
                    all_reduce_step(int(spec["size"]), len(ranks)), planner, RecordedCompute())
        running[job] = (work, Placement(tuple(hosts.index(h) for h in ranks)))
    times = StepTimes(Layout.of(cluster))
    together = times.steps(running)
    alone = {job: times.alone(*running[job]) for job in running}
    return ({job: Predicted(name, job, alone[job], together[job]) for job in running},
            times.counts)


def measured(path: Path | None = None) -> dict[tuple[str, str, str], dict]:
    """(setup, job, run) -> the capture's summary row (``contention_capture.csv``)."""
    with open(path or cluster_dir() / "contention_capture.csv", newline="") as fh:
        return {(r["setup"], r["job"], r["run"]): r for r in csv.DictReader(fh)}


def compare(fabric: dict | None = None, path: Path | None = None) -> list[dict]:
    """One row per setup and job: measured and simulated step alone, together, slowdown."""
    fabric = fabric if fabric is not None else load_fabric()
    rows, got = [], measured(path)
    for name in fabric["setups"]:
        sims, _ = predict(name, fabric)
        for job, sim in sims.items():
            alone, together = got[(name, job, "alone")], got[(name, job, "together")]
            m_alone, m_together = float(alone["median_s"]), float(together["median_s"])
            rows.append({
                "setup": name, "job": job,
                "alone_s": m_alone, "sim_alone_s": sim.alone_s,
                "together_s": m_together, "sim_together_s": sim.together_s,
                "together_p10_s": float(together["p10_s"]),
                "together_p90_s": float(together["p90_s"]),
                "steps_together": int(together["steps"]),
                "slowdown": m_together / m_alone, "sim_slowdown": sim.slowdown})
    return rows


def main() -> int:
    print(f"{'setup':<11}{'job':<4}{'alone s':>9}{'sim':>8}{'together s':>12}{'sim':>8}"
          f"{'slowdown':>10}{'sim':>7}{'error':>8}")
    for r in compare():
        err = r["sim_slowdown"] / r["slowdown"] - 1
        print(f"{r['setup']:<11}{r['job']:<4}{r['alone_s']:>9.3f}{r['sim_alone_s']:>8.3f}"
              f"{r['together_s']:>12.3f}{r['sim_together_s']:>8.3f}{r['slowdown']:>10.2f}"
              f"{r['sim_slowdown']:>7.2f}{err:>+8.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
