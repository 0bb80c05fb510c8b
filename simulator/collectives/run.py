"""Run collectives on a fabric and tabulate them like nccl-tests."""

from __future__ import annotations

from dataclasses import dataclass

from ..cluster import Cluster
from ..network.fabric import make_fabric
from ..sim import Environment
from .model import CollectiveModel, bus_factor
from .plan import Plan


@dataclass(frozen=True)
class CollectiveResult:
    """One simulated collective, in nccl-tests terms (times in seconds, bw in bytes/s)."""

    op: str
    size_bytes: int
    n_ranks: int
    algorithm: str
    protocol: str
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    events: int


def simulate_plans(cluster: Cluster, plans: list[Plan], fidelity: str = "flow"):
    """Start all ``plans`` at t=0 on one fabric; return (end times, events processed).

    The flow fabric solves on every used link here, not on link classes
    (:mod:`simulator.network.orbits`): these flows start together and the set is solved a
    few times, so refining classes by every entry would cost more than the solves
    themselves; the times are the same to the last bit either way."""
    env = Environment()
    fabric = make_fabric(fidelity, env, cluster.capacity_bytes_per_s, link_classes=False)
    done = [fabric.transfer(p.flow()) for p in plans]
    env.run()
    return [d.value.end_s for d in done], env.events_processed


def run_collective(model: CollectiveModel, op: str, size_bytes: int, ranks: list[int],
                   algo: str = "auto", proto: str = "auto", fidelity: str = "flow",
                   root: int = 0) -> CollectiveResult:
    """Simulate one collective alone on the cluster."""
    plan = model.plan(op, size_bytes, ranks, algo, proto, root)
    (end,), events = simulate_plans(model.cluster, [plan], fidelity)
    algbw = size_bytes / end if end > 0 else float("inf")
    return CollectiveResult(op, size_bytes, plan.n_ranks, plan.algo, plan.proto, end, algbw,
                            algbw * bus_factor(op, plan.n_ranks), events)


def size_sweep(min_bytes: int, max_bytes: int, step_factor: float) -> list[int]:
    """nccl-tests sizes: min, min*f, ... up to max (inclusive)."""
    sizes, s = [], float(min_bytes)
    while s <= max_bytes * (1 + 1e-12):
        sizes.append(int(round(s)))
        s *= step_factor
    return sizes
