"""Collective plans for the many groups of one communicator: one group inside a server
planned per shape, the others read off.

A tensor-parallel communicator on 16,384 GPUs is 2,048 groups of 8 GPUs, one per server,
and each was planned on its own by ``CollectiveModel.plan``: the layouts of every
algorithm, NCCL's tuner over algorithms and protocols, the bottleneck rates. For a group
inside one server all of that depends only on the server's design (routes inside a server
are worked out once per design, ``Cluster._local``), the group's GPUs (their local names, in
rank order), the operation and the capacities of the server's links. So one group of each
shape is planned in full, and every other group of that shape takes its plan with each link
id read off its own server (the link between the same two local nodes) -- where that
server's internal links have the same capacities, latencies and classes as the planned
one's, element for element; else (a degraded link inside one server) the group is planned
on its own. Groups across servers, and clusters where server blocks are not exact
(:func:`.layouts.blocks_exact`: ``hash`` ECMP, a link latency what-if, an NCCL without PXN
staging through the host), are planned group by group. A test compares every field of
every plan with the group's own ``plan``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .layouts import blocks_exact


@dataclass(frozen=True)
class _Planned:
    """A group's full plan, the ids of its server's internal links (``pairs`` order) and
    the position of each of the plan's links among them (None: a link outside the server,
    so nothing can be read off)."""

    plan: object
    server_ids: np.ndarray
    positions: np.ndarray | None
    capacity: np.ndarray | None = None      # the cluster's capacities it was planned on


def group_plans(model, op: str, size_bytes: int, groups, algo: str = "auto",
                proto: str = "auto", root: int = 0, cache: dict | None = None) -> list:
    """``model.plan(op, size_bytes, list(g), algo, proto, root)`` of each group ``g`` of
    ``groups`` (global ranks); ``cache`` keeps the planned groups from one call to the next
    (one per model: its keys hold the shape, operation, size and choices)."""
    cluster = model.cluster
    if not blocks_exact(cluster, model.host_path):
        return [model.plan(op, size_bytes, list(g), algo, proto, root) for g in groups]
    cache = {} if cache is None else cache
    out = []
    for group in groups:
        shape = _one_server(cluster, group)
        if shape is None:
            out.append(model.plan(op, size_bytes, list(group), algo, proto, root))
            continue
        key = (shape, op, size_bytes, algo, proto, root)
        known = cache.get(key)
        gpu = cluster.gpus[group[0]]
        if known is None:
            plan = model.plan(op, size_bytes, list(group), algo, proto, root)
            cache[key] = _planned(cluster, plan, _server_ids(cluster, shape[0], gpu, cache))
            out.append(plan)
            continue
        read = _read_off(cluster, known, _server_ids(cluster, shape[0], gpu, cache))
        out.append(read if read is not None else
                   model.plan(op, size_bytes, list(group), algo, proto, root))
    return out


def _one_server(cluster, group) -> tuple | None:
    """(server design, local GPU names in rank order) of a group inside one server; None
    for a group across servers (or an empty one)."""
    if not group:
        return None
    server = cluster.server_of_rank
    first = group[0]
    if any(server[r] != server[first] for r in group):
        return None
    nodes, gpus = cluster.G.nodes, cluster.gpus
    d = nodes[gpus[first]]
    return d.get("template", d["server"]), tuple(nodes[gpus[r]]["local"] for r in group)


def _server_ids(cluster, template, gpu: str, cache: dict) -> np.ndarray | None:
    """Ids of the directed internal links of ``gpu``'s server, in the order of its design's
    local node pairs (read off the first server of the design met); None where the server
    lacks one of them."""
    G = cluster.G
    d = G.nodes[gpu]
    server = d["server"]
    ids = cache.get(("ids", server))
    if ids is not None:
        return ids
    prefix = gpu[: len(gpu) - len(d["local"])]
    pairs = cache.get(("pairs", template))
    if pairs is None:
        members = cluster._server_members(server)
        inside, cut = set(members), len(prefix)
        pairs = cache[("pairs", template)] = [(u[cut:], v[cut:]) for u in members
                                             for v in G.adj[u] if v in inside]
    link_id = cluster.link_id
    try:
        ids = np.array([link_id[(prefix + u, prefix + v)] for u, v in pairs], np.int64)
    except KeyError:
        return None
    cache[("ids", server)] = ids
    return ids


def _planned(cluster, plan, ids: np.ndarray | None) -> _Planned:
    """``plan`` with where its links sit among its server's internal links ``ids``."""
    if ids is None:
        return _Planned(plan, np.zeros(0, np.int64), None)
    capacity = cluster.capacity_bytes_per_s
    where = {int(link): i for i, link in enumerate(ids.tolist())}
    try:
        positions = np.array([where[link] for link in plan.links.tolist()], np.int64)
    except KeyError:
        positions = None
    return _Planned(plan, ids, positions, capacity)


def _read_off(cluster, known: _Planned, ids: np.ndarray | None):
    """``known.plan`` on the server whose internal links are ``ids``, or None where it
    cannot be read off: a link of the plan outside its server, a server lacking a link of
    the design, links whose capacity, latency or class differ from the planned one's, or
    capacities set anew on the cluster since (a calibration's)."""
    if (known.positions is None or ids is None or len(ids) != len(known.server_ids)
            or known.capacity is not cluster.capacity_bytes_per_s):
        return None
    here, there = ids, known.server_ids
    for values in (cluster.capacity_bytes_per_s, cluster.latency_s, cluster.link_class):
        if not np.array_equal(values[here], values[there]):
            return None
    plan = known.plan
    return replace(plan, links=ids[known.positions])
