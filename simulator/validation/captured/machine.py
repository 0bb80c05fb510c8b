"""The capture machine as a cluster: N CPU ranks on one bridge, gloo collectives on it.

What ``validation/capture/`` ran on: each rank a process in its own network namespace, joined
by a veth pair to one Linux bridge, both directions of every veth shaped by ``tc tbf`` to the
chosen rate (no added delay), 1 compute thread per rank, pinned (rank r on core r mod 2 of
the 2-core machine). Here: rank ``i`` is node ``n{i}.gpu0`` (kind ``gpu``: the simulator's
name for a rank; here a CPU process), wired through ``n{i}.nic0`` to the switch ``bridge``
by a link of the shaped bandwidth (bytes/s per direction), zero latency.

Collectives are planned by :class:`GlooModel` from the microbenchmark constants
(:mod:`.calibration`, ``validation/traces/capture_description.yaml``): one flow per
collective on every rank's uplink and downlink, latency ``alpha``, payload ``w x size`` (the
ring's bytes per rank) at ``1/beta`` bytes/s when alone; collectives that overlap (gloo runs
two at a time, FSDP prefetches) share the links max-min. What gloo does, as assumed here:
all_reduce is a ring (gloo's default for the sizes here; bcube and halving-doubling are
not selected by PyTorch's ProcessGroupGloo), all_gather a ring, reduce_scatter an
all_reduce of the whole input (the trace names it ``gloo:all_reduce``). broadcast and
reduce (not benchmarked) cost like an all_reduce of the same size with ``w = 1``. TensorFlow's
RING collectives (gRPC, not gloo) are costed with the same constants: an assumption, they
were not benchmarked. Only the link bandwidth and the constants measured at it change
between bandwidths; compute and host time come from the trace being replayed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx
import numpy as np

from simulator.cluster import Cluster
from simulator.collectives.plan import Plan
from simulator.engine import Timeline, replay
from simulator.errors import ConfigError
from simulator.trace.schema import Trace

from simulator.validation.captured.calibration import load_description, wire_factor

BRIDGE = "bridge"
MEMORY_BYTES_PER_S = 1e12          # rank <-> its veth: never the bottleneck
PROXY = {"broadcast": "all_reduce", "reduce": "all_reduce"}
# Payloads that take less than this alone are not put on the fabric: their sharing of the
# link is immaterial, and a flow of a few bytes only adds the fabric's events. (The fold was
# first made for a residue the flow fabric of then could leave within one ulp of the clock;
# flows now end at their end exactly, and the fold stays, so the captured comparisons do not
# move.)
FOLD_S = 10e-6


def capture_graph(ranks: int, link_bit_per_s: float) -> nx.Graph:
    """``ranks`` CPU ranks, each on its own shaped link to one bridge."""
    G = nx.Graph(name=f"capture-machine-{ranks}x{link_bit_per_s / 1e9:g}gbit",
                 gpu="capture-cpu", gpus_per_node=1, nodes=ranks)
    G.add_node(BRIDGE, kind="switch", tier="single")
    for i in range(ranks):
        rank, nic = f"n{i}.gpu0", f"n{i}.nic0"
        G.add_node(rank, kind="gpu", server=i, local="gpu0", index=0, rank=i,
                   template="capture-cpu")
        G.add_node(nic, kind="nic", server=i, local="nic0", index=0, template="capture-cpu")
        G.add_edge(rank, nic, bw_bytes_per_s=MEMORY_BYTES_PER_S, latency_s=0.0,
                   link_type="host-memory", link_class="cpu")
        G.add_edge(nic, BRIDGE, bw_bytes_per_s=link_bit_per_s / 8, latency_s=0.0,
                   link_type="veth-tbf", link_class="net")
    return G


@dataclass(frozen=True)
class Description:
    """The capture machine at one link bandwidth: constants per (ranks, op)."""

    label: str
    link_bit_per_s: float
    constants: dict          # {ranks: {op: {"alpha_s", "beta_s_per_byte", ...}}}

    @property
    def link_bytes_per_s(self) -> float:
        return self.link_bit_per_s / 8


def description(bandwidth: str, data: dict | None = None) -> Description:
    """The description at a measured bandwidth (label such as ``1gbit``).

    :raises ConfigError: a bandwidth the microbenchmarks did not measure.
    """
    data = data if data is not None else load_description()
    entry = data["collectives"].get(bandwidth)
    if entry is None:
        raise ConfigError(f"no microbenchmarks at {bandwidth!r}; measured: "
                          f"{', '.join(data['collectives'])}", field="bandwidth")
    return Description(bandwidth, float(entry["link_bit_per_s"]),
                       {int(n): ops for n, ops in entry["ranks"].items()})


def bandwidths(data: dict | None = None) -> list[str]:
    """Measured bandwidth labels, fastest first."""
    data = data if data is not None else load_description()
    return sorted(data["collectives"], key=lambda b: -data["collectives"][b]["link_bit_per_s"])


class GlooModel:
    """Plans collectives on the capture machine (the engine's collective-model interface)."""

    def __init__(self, cluster: Cluster, desc: Description):
        self.cluster, self.desc = cluster, desc
        self._links = {}
        for i, node in enumerate(cluster.gpus):
            nic = f"n{cluster.G.nodes[node]['server']}.nic0"
            self._links[i] = (cluster.link_id[(nic, BRIDGE)], cluster.link_id[(BRIDGE, nic)])

    def constants(self, op: str, n: int) -> tuple[dict, float]:
        """(alpha/beta of the benchmarked op that stands for ``op``, wire factor)."""
        table = self.desc.constants.get(n)
        if table is None:
            raise ConfigError(f"no microbenchmarks with {n} ranks at {self.desc.label} "
                              f"(measured: {sorted(self.desc.constants)})", field="ranks")
        bench = PROXY.get(op, op)
        if bench not in table:
            raise ConfigError(f"gloo {op} is not modelled (benchmarked: {sorted(table)})",
                              field="collective")
        w = 1.0 if op in ("broadcast", "reduce") else wire_factor(op, n)
        return table[bench], w

    def plan(self, op: str, size_bytes: int, ranks, algo: str = "auto", proto: str = "auto",
             root: int = 0) -> Plan:
        n = len(ranks)
        if n == 1:
            empty = np.zeros(0, np.int64)
            return Plan(op, "local", "gloo", 1, 1, size_bytes, 0.0, 0.0, empty, np.zeros(0),
                        math.inf, 0.0)
        k, w = self.constants(op, n)
        beta, alpha = float(k["beta_s_per_byte"]), float(k["alpha_s"])
        links = np.array([lid for r in ranks for lid in self._links[r]], np.int64)
        coef = np.full(len(links), beta * self.desc.link_bytes_per_s)
        payload = w * size_bytes
        if payload * beta < FOLD_S:        # a few bytes: their transfer time goes in alpha
            alpha, payload = alpha + payload * beta, 0.0
        return Plan(op, "ring", "gloo", n, n, size_bytes, alpha, payload, links, coef,
                    math.inf, alpha + payload * beta)


class RecordedCompute:
    """Compute of an imported trace is its recorded duration; nothing else is modelled."""

    def op_time_s(self, op_class, flops, bytes_accessed, precision) -> float:
        raise ConfigError("an op without a recorded duration cannot run on the capture "
                          "machine description (replay imported traces)")


def build(ranks: int, desc: Description) -> GlooModel:
    """The collective model of ``ranks`` CPU ranks at ``desc``'s bandwidth."""
    return GlooModel(Cluster(capture_graph(ranks, desc.link_bit_per_s)), desc)


def replay_on(trace: Trace, desc: Description) -> Timeline:
    """Replay ``trace`` (compute and host time as recorded) on the capture machine."""
    return replay(trace, build(trace.world_size, desc), RecordedCompute())


__all__ = ["BRIDGE", "Description", "GlooModel", "bandwidths", "build", "capture_graph",
           "description", "replay_on"]
