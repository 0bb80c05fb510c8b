"""Where a parallel plan's groups land on the topology.

Ranks are numbered by the plan's ``order`` (:mod:`.plan`) and rank ``r`` runs on server
``r // gpus_per_node`` (:class:`~simulator.strategies.base.World`), one NVLink domain per
server (8 GPUs in a DGX, 72 in a GB200 NVL72 rack). With the default order TP is innermost,
so a TP group of ``tp <= gpus_per_node`` (dividing it) stays inside one NVLink domain; an
``order`` that puts another dimension inside TP, or a ``tp`` larger than the domain, spreads
TP over the scale-out network: legal, simulated, and slow (the plan search shows it).
"""

from __future__ import annotations

from ..base import World
from .plan import DIMS, ParallelPlan


def domains_per_group(group: tuple[int, ...], gpus_per_node: int) -> int:
    """How many NVLink domains (servers) the ranks of ``group`` span."""
    return len({r // gpus_per_node for r in group})


def placement(plan: ParallelPlan, world: World) -> dict[str, str]:
    """Per mesh dimension of size > 1: ``"nvlink"`` when each of its groups sits inside one
    NVLink domain, else ``"network (N domains per group)"`` with the widest span."""
    out = {}
    for dim in DIMS:
        if getattr(plan, dim) == 1:
            continue
        span = max(domains_per_group(g, world.gpus_per_node) for g in plan.groups(dim))
        out[dim] = "nvlink" if span == 1 else f"network ({span} domains per group)"
    return out


def tp_crosses_domain(plan: ParallelPlan, world: World) -> bool:
    """True when some TP group spans more than one NVLink domain."""
    return plan.tp > 1 and placement(plan, world)["tp"] != "nvlink"
