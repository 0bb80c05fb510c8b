"""Placement policies: which free GPUs a job gets, each a small function in a registry.

A policy is ``policy(layout, free, gpus) -> tuple of GPU indices | None``: ``free[s]`` is the
free GPUs of server ``s`` (local positions, sorted), ``gpus`` the job's GPU count; None where
the job does not fit now (gang scheduling: all of its GPUs at once or none). A job of up to
one server's GPUs goes on one server; a larger one takes whole free servers (so every rank
of a multi-server job uses the NIC of its own rail: rail-aligned on a rail-optimized
fabric). The GPUs are given server by server, so a job's ranks are laid out as the
strategies lay them out on the cluster's first GPUs.

Servers belong to *groups*: servers whose NICs reach the same leaf switches (one leaf of a
leaf-spine, one scalable unit of a rail-optimized fabric). Traffic between two groups crosses
the spine; traffic inside one does not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..cluster import Cluster


@dataclass(frozen=True)
class Layout:
    """Servers and their groups. ``gpus[s]``: the GPU indices (in ``Cluster.gpus``) of
    server ``s`` by local position; ``group[s]``: its group; ``leaves[s]``: the switches its
    NICs reach; ``links[s]``: the kind of its links (servers whose own links and whose
    leaves' uplinks have the same types, bandwidths and latencies share a number; all 0
    where not given)."""

    gpus: tuple[tuple[int, ...], ...]
    group: tuple[int, ...]
    leaves: tuple[frozenset, ...]
    links: tuple[int, ...] = ()

    @property
    def per_server(self) -> int:
        return max(len(g) for g in self.gpus)

    @property
    def n_gpus(self) -> int:
        return sum(len(g) for g in self.gpus)

    @classmethod
    def of(cls, cluster: Cluster) -> Layout:
        """The layout of ``cluster``: servers in the order of their first GPU."""
        index = {g: i for i, g in enumerate(cluster.gpus)}
        servers = list(cluster.gpus_by_server)
        G = cluster.G
        leaves = []
        for s in servers:
            reach = {m for nic in cluster.nics_of_server(s) for m in G.neighbors(nic)
                     if G.nodes[m].get("kind") == "switch"}
            leaves.append(frozenset(reach))
        ids: dict[frozenset, int] = {}
        group = tuple(ids.setdefault(k, len(ids)) for k in leaves)
        return cls(tuple(tuple(index[g] for g in cluster.gpus_of_server(s)) for s in servers),
                   group, tuple(leaves), _link_kinds(cluster, servers, leaves))

    def take(self, free: list[list[int]], picks: list[tuple[int, int]]) -> tuple[int, ...]:
        """The GPU indices of ``picks``: (server, how many of its free GPUs, lowest first)."""
        return tuple(self.gpus[s][p] for s, n in picks for p in free[s][:n])


def _link_kinds(cluster: Cluster, servers: list[int], leaves: list[frozenset]
                ) -> tuple[int, ...]:
    """Each server's kind of links: the (type, bandwidth, latency) of every link of its own
    nodes (GPUs, NICs, NVSwitches) and of the uplinks of each leaf its NICs reach, numbered
    in the order first met (what a job's step time depends on beyond the shape of its
    placement: on a fabric of hosts with different links, one shape on two kinds of host
    takes two times)."""
    G = cluster.G
    uplinks: dict[str, tuple] = {}

    def links(node, keep=lambda m: True) -> list[tuple]:
        return [(d.get("link_type", ""), d["bw_bytes_per_s"], d["latency_s"])
                for m, d in G[node].items() if keep(m)]

    def uplink(leaf: str) -> tuple:
        if leaf not in uplinks:
            uplinks[leaf] = tuple(sorted(links(leaf, lambda m: G.nodes[m].get("kind") ==
                                               "switch")))
        return uplinks[leaf]
    ids: dict[tuple, int] = {}
    return tuple(ids.setdefault(
        (tuple(sorted(x for n in cluster.server_members(s) for x in links(n))),
         tuple(sorted(uplink(leaf) for leaf in reach))), len(ids))
        for s, reach in zip(servers, leaves))


Policy = Callable[[Layout, list[list[int]], int], "tuple[int, ...] | None"]


def _whole_servers(layout: Layout, free: list[list[int]]) -> list[int]:
    per = layout.per_server
    return [s for s, f in enumerate(free) if len(f) == per]


def _one_server(layout: Layout, free, gpus: int, key) -> tuple[int, ...] | None:
    fits = [s for s, f in enumerate(free) if len(f) >= gpus]
    return layout.take(free, [(min(fits, key=key), gpus)]) if fits else None


def packed(layout: Layout, free: list[list[int]], gpus: int) -> tuple[int, ...] | None:
    """The lowest-numbered servers: one with the fewest free GPUs that holds a small job
    (best fit), else the first whole free servers."""
    per = layout.per_server
    if gpus <= per:
        return _one_server(layout, free, gpus, lambda s: (len(free[s]), s))
    whole = _whole_servers(layout, free)
    need = gpus // per
    return layout.take(free, [(s, per) for s in whole[:need]]) if len(whole) >= need else None


def spread(layout: Layout, free: list[list[int]], gpus: int) -> tuple[int, ...] | None:
    """As far apart as can be: a small job on the server with the most free GPUs, a large
    one on whole servers taken from each group in turn."""
    per = layout.per_server
    if gpus <= per:
        return _one_server(layout, free, gpus, lambda s: (-len(free[s]), s))
    by_group: dict[int, list[int]] = {}
    for s in _whole_servers(layout, free):
        by_group.setdefault(layout.group[s], []).append(s)
    need, order = gpus // per, []
    queues = [by_group[g] for g in sorted(by_group)]
    while len(order) < need and any(queues):
        for q in queues:
            if q and len(order) < need:
                order.append(q.pop(0))
    return layout.take(free, [(s, per) for s in sorted(order)]) if len(order) == need else None


def topology(layout: Layout, free: list[list[int]], gpus: int) -> tuple[int, ...] | None:
    """The fewest groups crossed: a small job as ``packed``; a large one in the one group
    with the fewest whole free servers that holds it (best fit), else in the groups with
    the most whole free servers first."""
    per = layout.per_server
    if gpus <= per:
        return packed(layout, free, gpus)
    by_group: dict[int, list[int]] = {}
    for s in _whole_servers(layout, free):
        by_group.setdefault(layout.group[s], []).append(s)
    need = gpus // per
    holding = [g for g, ss in by_group.items() if len(ss) >= need]
    if holding:
        g = min(holding, key=lambda g: (len(by_group[g]), g))
        return layout.take(free, [(s, per) for s in by_group[g][:need]])
    order: list[int] = []
    for g in sorted(by_group, key=lambda g: (-len(by_group[g]), g)):
        order.extend(by_group[g][:need - len(order)])
    return layout.take(free, [(s, per) for s in sorted(order)]) if len(order) == need else None


PLACEMENTS: dict[str, tuple[Policy, str]] = {
    "packed": (packed, "lowest-numbered servers, small jobs best fit"),
    "spread": (spread, "whole servers from each group in turn, small jobs on the emptiest"),
    "topology": (topology, "fewest groups (leaf switches) crossed, rail-aligned"),
}
