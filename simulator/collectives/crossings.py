"""Many edges between servers laid out at once, by table instead of edge by edge.

:class:`~.blocks.ServerBlocks` adds an edge between servers as three parts: its entries
inside the source server (a *shape*: positions in the server design's link ids), the
NIC-to-NIC route, and its entries inside the destination server: a call per edge, and a
pipeline's send/recv pairs and the FSDP rings across every server are many edges. Here a
batch of edges, given as arrays (server, shape and NIC of either end), is laid out with
numpy: the link ids of a shape on each server are read off one column per position of the
design's link ids (one entry per server), the NIC uplinks and their switches off one
column per NIC of a design, the switch paths between two switches are looked up once per
switch pair and stacked per path shape (rows x hops), and the edges alike in all of that
(a *class*) fill one table. The entries are the ones ``ServerBlocks`` gives, in the same
order (a test compares them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..uniques import distinct, distinct_where
from .blocks import ServerBlocks
from .columns import link_column, nic_column, plain_servers, server_prefixes, switches


@dataclass(frozen=True)
class Ends:
    """One end of each edge: its server id, its shape (an index into the caller's list of
    ``(design, shape)``, shapes as :meth:`ServerBlocks.local_shape` gives them) and its NIC
    (an index into the caller's list of ``(design, local NIC name)``; -1 for an edge inside
    one server, which has no fabric part and whose ``dst`` is not read)."""

    server: np.ndarray
    shape: np.ndarray
    nic: np.ndarray


@dataclass(frozen=True)
class EdgeClass:
    """Edges laid out alike: their positions in the batch (ascending), one row of link ids
    each, and the coefficients and wire bytes every row shares."""

    edges: np.ndarray
    links: np.ndarray        # (edges, entries) int64
    coef: np.ndarray
    wire: np.ndarray


def lay_out(blocks: ServerBlocks, shapes: list, nics: list, src: Ends,
            dst: Ends) -> list[EdgeClass] | None:
    """The entries of each edge src -> dst, by class (in the order of their first edges);
    None where a table lacks an entry (a server without a link of its design, a NIC without
    a switch), which the edge-by-edge layout reports or handles itself."""
    cluster = blocks.cluster
    if not plain_servers(cluster):
        return None
    crossing = src.nic >= 0
    up = np.full(len(src.server), -1, np.int64)
    down, sw_a, sw_b = up.copy(), up.copy(), up.copy()
    for ends, link, switch, outward in ((src, up, sw_a, True), (dst, down, sw_b, False)):
        for k in distinct(ends.nic[crossing]).tolist():
            at = crossing & (ends.nic == k)
            ids, switches = nic_column(cluster, *nics[k], outward)
            link[at], switch[at] = ids[ends.server[at]], switches[ends.server[at]]
    if (up[crossing] < 0).any() or (down[crossing] < 0).any():
        return None
    core_kind, core_row, cores = _cores(cluster, sw_a, sw_b, crossing)
    key = (src.shape * (len(shapes) + 1) + np.where(crossing, dst.shape, -1) + 1) \
        * (len(cores) + 2) + core_kind + 2
    routed = np.flatnonzero(core_kind == -2)      # an edge each: its own route
    key[routed] = key.max() + 1 + np.arange(len(routed))
    out = []
    for edges in _classes(key):
        e = int(edges[0])
        a, b = shapes[src.shape[e]], (shapes[dst.shape[e]] if crossing[e] else None)
        parts = [_local(cluster, a, src.server[edges])]
        coefs, wires = [a[1][1]], [a[1][2]]
        if b is not None:
            if core_kind[e] == -2:        # switch paths of unequal lengths: its route
                route = _routed(blocks, nics, src, dst, e)
                parts.append(route.links[None, :])
                coefs.append(route.coef * blocks.weight)
                wires.append(route.coef * blocks.weight)
            else:
                stack = cores[core_kind[e]]
                parts.append(_fabric(stack[core_row[edges]], up[edges], down[edges]))
                rows, width = stack.shape[1:]
                share = np.full(rows * (width + 2), 1.0 / rows) * blocks.weight
                coefs.append(share)
                wires.append(share)
            parts.append(_local(cluster, b, dst.server[edges]))
            coefs.append(b[1][1])
            wires.append(b[1][2])
        links = np.concatenate(parts, axis=1)
        if (links < 0).any():
            return None
        out.append(EdgeClass(edges, links, np.concatenate(coefs), np.concatenate(wires)))
    return out


def joined(classes: list[EdgeClass], count: int, starts: bool = False) -> tuple:
    """(link ids, coefficients, wire bytes) of ``count`` edges laid out in ``classes``,
    edge after edge, as one array each; with ``starts``, a fourth: where each edge's
    entries start (``count + 1`` offsets)."""
    length = np.zeros(count, np.int64)
    for c in classes:
        length[c.edges] = c.links.shape[1]
    start = np.concatenate([[0], np.cumsum(length)])
    total = int(start[-1])
    links, coef, wire = np.empty(total, np.int64), np.empty(total), np.empty(total)
    for c in classes:
        at = start[c.edges][:, None] + np.arange(c.links.shape[1])
        links[at] = c.links
        coef[at] = c.coef
        wire[at] = c.wire
    return (links, coef, wire, start) if starts else (links, coef, wire)


def _classes(key: np.ndarray) -> list[np.ndarray]:
    """Positions of each distinct ``key``, ascending, the groups by their first position."""
    order = np.argsort(key, kind="stable")
    cuts = np.flatnonzero(np.diff(key[order])) + 1
    groups = np.split(order, cuts)
    return sorted(groups, key=lambda g: int(g[0]))


def _local(cluster, design_shape: tuple, servers: np.ndarray) -> np.ndarray:
    """Link ids of a shape (``(design, (positions, coef, wire, need))``) on ``servers``
    (each column's entries of ``servers`` taken before the columns are stacked: a column
    has an entry per server of the cluster, 16,384 at 131,072 GPUs, and a batch may be the
    two servers of one small group)."""
    design, (pos, _, _, _) = design_shape
    return np.stack([link_column(cluster, design, j)[servers] for j in pos.tolist()],
                    axis=1) if len(pos) else np.zeros((len(servers), 0), np.int64)


def _fabric(core: np.ndarray, up: np.ndarray, down: np.ndarray) -> np.ndarray:
    """``ServerBlocks._fill``'s ids: per edge, per switch path its NIC uplink, the path's
    links and the downlink to the other NIC, rows after rows."""
    edges, rows, width = core.shape
    ids = np.empty((edges, rows, width + 2), np.int64)
    ids[:, :, 0] = up[:, None]
    ids[:, :, 1:width + 1] = core
    ids[:, :, width + 1] = down[:, None]
    return ids.reshape(edges, -1)


def _routed(blocks: ServerBlocks, nics: list, src: Ends, dst: Ends, e: int):
    """The NIC-to-NIC route of edge ``e``, whose switch paths differ in length (as
    ``ServerBlocks.entries`` takes it)."""
    prefix = server_prefixes(blocks.cluster)
    return blocks.cluster.route(prefix[int(src.server[e])] + nics[src.nic[e]][1],
                                prefix[int(dst.server[e])] + nics[dst.nic[e]][1])


def _cores(cluster, sw_a: np.ndarray, sw_b: np.ndarray, crossing: np.ndarray) -> tuple:
    """Per edge, the kind of its switch paths (an index into the stacks; -1 for an edge
    inside a server, -2 where the paths differ in length) and its row in that stack; the
    stacks, (switch pairs, rows, hops) each, one per shape of the paths."""
    names = switches(cluster)[1]
    kind = np.full(len(sw_a), -1, np.int64)
    row = np.zeros(len(sw_a), np.int64)
    found, inverse = distinct_where((sw_a * len(names) + sw_b)[crossing], inverse=True)
    stacks: list[list] = []
    by_shape: dict = {}
    pair_kind, pair_row = np.full(len(found), -2, np.int64), np.zeros(len(found), np.int64)
    for i, code in enumerate(found.tolist()):
        a, b = names[code // len(names)], names[code % len(names)]
        ids = cluster.routes.core_link_ids(a, b)
        if ids is None:               # switch paths of unequal lengths: each its route
            continue
        k = by_shape.setdefault(ids.shape, len(stacks))
        if k == len(stacks):
            stacks.append([])
        pair_kind[i], pair_row[i] = k, len(stacks[k])
        stacks[k].append(ids)
    kind[crossing], row[crossing] = pair_kind[inverse.ravel()], pair_row[inverse.ravel()]
    return kind, row, [np.stack(s) for s in stacks]
