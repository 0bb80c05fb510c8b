"""Collective plans for the many groups of one communicator: one group inside a server
planned per shape, the others read off.

A tensor-parallel communicator is a group of GPUs on every server, and each group was
planned on its own by ``CollectiveModel.plan``: the layouts of every algorithm, NCCL's
tuner over algorithms and protocols, the bottleneck rates. For a group inside one server
all of that depends only on the server's design (routes inside a server are worked out
once per design, ``Routes.local_paths``), the group's GPUs (their local names, in
rank order), the operation and the capacities of the server's links. So one group of each
shape is planned in full, and every other group of that shape takes its plan with each link
id read off its own server (the link between the same two local nodes) -- where that
server's internal links have the same capacities, latencies and classes as the planned
one's, element for element; else (a degraded link inside one server) the group is planned
on its own. The groups' shapes are found at once (each rank's design and local name,
:func:`.columns.rank_places`), and a shape's read-offs are checked together: each server's
internal link ids in one table (a column per local link of the design), compared with the
planned server's in one numpy comparison. Groups across servers have their rings laid
out together (:meth:`CollectiveModel.lay_out_rings`); where the ring is the only
algorithm their plan compares, one group of each ring shape
(:meth:`CollectiveModel.laid_ring`: everything the plan reads of the ring but its link
ids, the capacities included) is planned in full and the others take its plan on their
own ring's links; other groups across servers (an all_reduce, with the tree to compare),
and every group on clusters where server blocks are not exact
(:func:`.layouts.blocks_exact`: ``hash`` ECMP, a link latency what-if, an NCCL without PXN
staging through the host), are planned group by group. A test compares every field of
every plan with the group's own ``plan``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..uniques import distinct_where
from .columns import pair_column, plain_servers, rank_places
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

    def own(group):
        return model.plan(op, size_bytes, list(group), algo, proto, root)

    if not blocks_exact(cluster, model.host_path):
        return [own(g) for g in groups]
    cache = {} if cache is None else cache
    out: list = [None] * len(groups)
    later: dict = {}                 # key -> positions of the groups to read its plan off
    shapes = _shapes(cluster, groups)
    model.lay_out_rings(op, [g for g, s in zip(groups, shapes) if s is None], algo, root)
    for i, (group, shape) in enumerate(zip(groups, shapes)):
        if shape is None:
            out[i] = _across_servers(model, op, size_bytes, group, algo, proto, root, cache)
            continue
        key = (shape, op, size_bytes, algo, proto, root)
        if key not in cache:
            out[i] = own(group)
            ids = _server_ids(cluster, shape[0], cluster.gpus[group[0]], cache)
            cache[key] = _planned(cluster, out[i], ids)
            continue
        later.setdefault(key, []).append(i)
    for key, slots in later.items():
        for i, plan in zip(slots, _read_offs(cluster, cache[key], key[0][0],
                                             [groups[i][0] for i in slots], cache)):
            out[i] = plan if plan is not None else own(groups[i])
    return out


def _across_servers(model, op: str, size_bytes: int, group, algo: str, proto: str,
                    root: int, cache: dict):
    """``model.plan(op, size_bytes, list(group), algo, proto, root)`` of a group across
    servers: the plan of the first group met of its ring's shape
    (:meth:`~simulator.collectives.model.CollectiveModel.laid_ring`), on the group's own
    links; planned in full for the first of a shape and where the ring is not all the
    plan depends on (another algorithm to compare, a ring not laid out ahead)."""
    ring = model.laid_ring(op, group, algo, root)
    if ring is None:
        return model.plan(op, size_bytes, list(group), algo, proto, root)
    key = ("across servers", ring.shape, op, size_bytes, algo, proto, root)
    known = cache.get(key)
    if known is None:
        known = cache[key] = model.plan(op, size_bytes, list(group), algo, proto, root)
        return known
    return known.placed(ring.links, known.predicted_s, ring.wire_coef)


def _shapes(cluster, groups) -> list:
    """Each group's :func:`_one_server`, at once for groups of one size on plain servers."""
    sizes = {len(g) for g in groups}
    if len(sizes) != 1 or 0 in sizes or not plain_servers(cluster):
        return [_one_server(cluster, g) for g in groups]
    ranks = np.asarray(groups, np.int64)
    server = cluster.server_of_rank[ranks]
    inside = (server == server[:, :1]).all(axis=1)
    design, local, designs, names = rank_places(cluster)
    rows = np.concatenate([design[ranks[:, :1]], local[ranks]], axis=1)
    found, inverse = _unique_rows(rows, max(len(designs), len(names)))
    shapes = [(designs[row[0]], tuple(names[x] for x in row[1:])) for row in found.tolist()]
    return [shapes[k] if ok else None for k, ok in zip(inverse.ravel().tolist(),
                                                     inside.tolist())]


def _unique_rows(rows: np.ndarray, radix: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(rows, axis=0, return_inverse=True)`` of rows of codes ``0..radix-1``:
    each row read as one number in base ``radix`` where that fits an int64 (a sort of
    numbers, not of rows)."""
    if radix ** rows.shape[1] > 1 << 62:
        return np.unique(rows, axis=0, return_inverse=True)
    number = rows @ radix ** np.arange(rows.shape[1] - 1, -1, -1, dtype=np.int64)
    _, first, inverse = distinct_where(number, first=True, inverse=True)
    return rows[first], inverse


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
        members = cluster.server_members(server)
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


def _read_offs(cluster, known: _Planned, design, firsts: list[int], cache: dict) -> list:
    """``known.plan`` on the server of each rank of ``firsts`` (a group's first), or None
    where it cannot be read off: a link of the plan outside its server, a server lacking a
    link of the design, links whose capacity, latency or class differ from the planned
    one's, or capacities set anew on the cluster since (a calibration's)."""
    if known.positions is None or known.capacity is not cluster.capacity_bytes_per_s:
        return [None] * len(firsts)
    table = _id_table(cluster, design, cache)
    if table is None or table.shape[1] != len(known.server_ids):
        return [None] * len(firsts)
    ids = table[cluster.server_of_rank[np.asarray(firsts, np.int64)]]
    alike = (ids >= 0).all(axis=1)
    there = known.server_ids
    for values in (cluster.capacity_bytes_per_s, cluster.latency_s, cluster.link_class):
        alike &= (values[np.where(ids >= 0, ids, 0)] == values[there]).all(axis=1)
    links = ids[:, known.positions]
    plan = known.plan
    return [plan.placed(row, plan.predicted_s, plan.wire_coef) if ok else None
            for row, ok in zip(links, alike.tolist())]


def _id_table(cluster, design, cache: dict) -> np.ndarray | None:
    """(server id, position) -> the id of the design's ``position``-th internal link pair
    (``cache[("pairs", design)]``) on that server, -1 where it lacks it; None before the
    design's pairs are known."""
    pairs = cache.get(("pairs", design))
    if pairs is None:
        return None
    table = cache.get(("table", design))
    if table is None:
        columns = [pair_column(cluster, design, u, v) for u, v in pairs]
        top = int(cluster.server_of_rank.max()) + 1
        table = cache[("table", design)] = (np.stack(columns, axis=1) if columns else
                                            np.zeros((top, 0), np.int64))
    return table
