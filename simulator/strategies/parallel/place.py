"""Where a parallel plan's groups land on the topology.

Ranks are numbered by the plan's ``order`` (:mod:`.plan`) and rank ``r`` runs on server
``r // gpus_per_node`` (:class:`~simulator.strategies.base.World`), one NVLink domain per
server (8 GPUs in a DGX, 72 in a GB200 NVL72 rack). With the default order TP is innermost,
so a TP group of ``tp <= gpus_per_node`` (dividing it) stays inside one NVLink domain; an
``order`` that puts another dimension inside TP, or a ``tp`` larger than the domain, spreads
TP over the scale-out network: legal, simulated, and slow (the plan search shows it).
"""

from __future__ import annotations

from typing import NamedTuple

from simulator.errors import ConfigError

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


class DomainGroups(NamedTuple):
    """EP groups cut along the NVLink domains (:func:`domain_groups`)."""

    inside: list[tuple[int, ...]]    # each group's ranks in one domain
    rails: list[tuple[int, ...]]     # each group's ranks with the same local index
    domains: int                     # the domains one group spans


def domain_groups(groups: list[tuple[int, ...]], gpus_per_node: int) -> DomainGroups:
    """``groups`` (the EP groups) cut along the NVLink domains: the ranks of each group in
    one domain, the ranks of each group with the same local index (position among its
    group's ranks in their domain) across domains (the rails), and the domains a group
    spans (the flex dispatcher's two all-to-alls, :func:`.moe.flex_sizes`).

    Raises
    ------
    ConfigError
        A group with a different number of ranks in two of its domains.
    """
    inside, rails, spans = [], [], set()
    for group in groups:
        by_domain: dict[int, list[int]] = {}
        for r in group:
            by_domain.setdefault(r // gpus_per_node, []).append(r)
        parts = [tuple(sorted(ranks)) for ranks in by_domain.values()]
        if len({len(p) for p in parts}) != 1:
            raise ConfigError(f"the flex dispatcher's EP group {group[0]}.. holds "
                              f"{sorted(len(p) for p in parts)} ranks in its NVLink domains: "
                              f"uneven domains are not modelled",
                              field="strategy.moe_token_dispatcher_type")
        inside += parts
        rails += [tuple(sorted(col)) for col in zip(*parts)]
        spans.add(len(parts))
    if len(spans) > 1:
        raise ConfigError(f"the flex dispatcher's EP groups span {sorted(spans)} NVLink "
                          f"domains: groups of different spans are not modelled",
                          field="strategy.moe_token_dispatcher_type")
    return DomainGroups(sorted(inside), sorted(rails), spans.pop() if spans else 1)
