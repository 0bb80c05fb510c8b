"""Rings and trees across many servers laid out by table (:mod:`.crossings`), not server by
server.

:func:`.blocks.ring_blocks` adds, per channel and server, the way through the server to
the channel's NIC, the NIC-to-NIC part and the way into the next server: at 131,072 GPUs
the 64 FSDP rings across 2,048 servers are 131,072 such edges. Here the ways are worked
out once per server design, member GPUs and NIC (as there), and the edges of every channel
are handed to :func:`.crossings.lay_out` as arrays: the same entries in the same order
(a test compares them with ``ring_blocks``).

:func:`tree_entries` does the same for :func:`.blocks.tree_blocks` (NCCL's double binary
tree: per channel a chain inside each server, then two edges per child server), one channel
at a time: a 131,072-GPU tree is 16,384 chains and 32,766 edges between servers per
channel, which server by server were about a million small arrays held at once.
"""

from __future__ import annotations

import numpy as np

from ..cluster import Cluster
from .blocks import ServerBlocks, _ring_way, named_orders, ring_blocks, tree_blocks
from .columns import gpu_places
from .crossings import Ends, joined, lay_out


def ring_entries(cluster: Cluster, per_server: list[tuple], eff: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(link ids, rate coefficients, wire bytes) of ``ring_blocks(cluster, per_server,
    eff).entries()``: whole rings over more than one server, from
    ``layouts.server_orders``."""
    channels = max(len(nics) for _, _, (nics, _) in per_server)
    blocks = ServerBlocks(cluster, 1.0 / channels, eff)
    first, of_server, server = _by_key(cluster, per_server)
    shapes, nics, ways = [], [], {}
    leave, enter, nic = (np.empty((channels, len(first)), np.int64) for _ in range(3))
    for c in range(channels):
        for k, (prefix, key, shape) in enumerate(first):
            out_shape, in_shape, name = _ring_way(blocks, ways, prefix, key, shape,
                                                  c % len(shape[0]))
            shapes += [(key[0], out_shape), (key[0], in_shape)]
            nics.append((key[0], name[len(prefix):]))
            leave[c, k], enter[c, k], nic[c, k] = len(shapes) - 2, len(shapes) - 1, len(nics) - 1
    nxt = np.roll(np.arange(len(per_server)), -1)
    src = Ends(np.tile(server, channels), leave[:, of_server].ravel(),
               nic[:, of_server].ravel())
    dst = Ends(np.tile(server[nxt], channels), enter[:, of_server[nxt]].ravel(),
               nic[:, of_server[nxt]].ravel())
    classes = lay_out(blocks, shapes, nics, src, dst)
    if classes is None:                 # a table lacks an entry: server by server
        return ring_blocks(cluster, per_server, eff).entries()
    return joined(classes, len(src.server))


_RINGS_PER_TABLE = 256      # rings laid out by one table (bounds the table's memory)


def rings_entries(cluster: Cluster, rings: list[list[tuple]], eff: float) -> list[tuple]:
    """:func:`ring_entries` of each ring of ``rings`` (``layouts.server_orders`` of each),
    rings of one channel count laid out together, up to :data:`_RINGS_PER_TABLE` by one
    table: the 65,536 context-parallel rings of two servers of the 405B plan at 131,072
    GPUs were as many calls of :func:`.crossings.lay_out`. Each ring's entries are its
    edges' (as laid out alone), in the same order (a test compares them)."""
    out: list = [None] * len(rings)
    by_channels: dict = {}
    for i, per_server in enumerate(rings):
        channels = max(len(nics) for _, _, (nics, _) in per_server)
        by_channels.setdefault(channels, []).append(i)
    for channels, members in by_channels.items():
        for at in range(0, len(members), _RINGS_PER_TABLE):
            chunk = members[at: at + _RINGS_PER_TABLE]
            laid = _rings_together(cluster, [rings[i] for i in chunk], channels, eff)
            for i, entries in zip(chunk, laid):
                out[i] = entries if entries is not None else ring_entries(cluster, rings[i], eff)
    return out


def _rings_together(cluster: Cluster, rings: list[list[tuple]], channels: int,
                    eff: float) -> list:
    """The entries of each of ``rings`` (of ``channels`` channels each), their edges in one
    :func:`.crossings.lay_out` (each ring's edges after the previous ring's, in
    :func:`ring_entries`' order), a ring's shapes and NICs listed once for all; all None
    where a table lacks an entry."""
    blocks = ServerBlocks(cluster, 1.0 / channels, eff)
    shapes, nics, ways = [], [], {}
    slots: dict = {}        # (design and members, NIC) -> its ways' and NIC's indices
    nic_codes: dict = {}    # (design, local NIC name) -> its index in nics
    srcs, dsts, counts = [], [], []
    for per_server in rings:
        first, of_server, server = _by_key(cluster, per_server)
        leave, enter, nic = (np.empty((channels, len(first)), np.int64) for _ in range(3))
        for c in range(channels):
            for k, (prefix, key, shape) in enumerate(first):
                j = c % len(shape[0])
                slot = slots.get((key, j))
                if slot is None:        # the ways depend on the design and members alone
                    out_shape, in_shape, name = _ring_way(blocks, ways, prefix, key, shape, j)
                    named = (key[0], name[len(prefix):])
                    code = nic_codes.setdefault(named, len(nics))
                    if code == len(nics):
                        nics.append(named)
                    shapes += [(key[0], out_shape), (key[0], in_shape)]
                    slot = slots[(key, j)] = (len(shapes) - 2, len(shapes) - 1, code)
                leave[c, k], enter[c, k], nic[c, k] = slot
        nxt = np.roll(np.arange(len(per_server)), -1)
        srcs.append((np.tile(server, channels), leave[:, of_server].ravel(),
                     nic[:, of_server].ravel()))
        dsts.append((np.tile(server[nxt], channels), enter[:, of_server[nxt]].ravel(),
                     nic[:, of_server[nxt]].ravel()))
        counts.append(channels * len(per_server))
    src, dst = (Ends(*(np.concatenate(part) for part in zip(*ends))) for ends in (srcs, dsts))
    classes = lay_out(blocks, shapes, nics, src, dst)
    if classes is None:                 # a table lacks an entry: each ring on its own
        return [None] * len(rings)
    links, coef, wire, start = joined(classes, len(src.server), starts=True)
    edge = np.concatenate([[0], np.cumsum(counts)])
    return [(links[a:b].copy(), coef[a:b].copy(), wire[a:b].copy())
            for a, b in zip(start[edge[:-1]].tolist(), start[edge[1:]].tolist())]


def _by_key(cluster: Cluster, per_server: list[tuple]) -> tuple[list, np.ndarray, np.ndarray]:
    """(one server's item per key (design, members), each server's key index, each
    server's id) of ``per_server`` (``layouts.server_orders``)."""
    keys: dict = {}                          # (design, members) -> its index
    first: list = []                         # per key: (prefix, key, shape) of a server
    of_server = []
    for item in per_server:
        k = keys.setdefault(item[1], len(keys))
        if k == len(first):
            first.append(item)
        of_server.append(k)
    places = gpu_places(cluster)
    server = np.array([places[prefix + orders[0][0]][3]
                       for prefix, _, (_, orders) in per_server], np.int64)
    return first, np.array(of_server, np.int64), server


def tree_entries(cluster: Cluster, per_server: list[tuple], eff: float, parent
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(link ids, rate coefficients, wire bytes) of ``tree_blocks(cluster,
    channel_orders(...), eff, parent).entries()`` (``parent(k, n, tree)``: the double
    binary tree), from ``layouts.server_orders``: per channel, each server's chain, then
    per child server the edge up to its parent and the edge back down."""
    channels = max(len(nics) for _, _, (nics, _) in per_server)
    blocks = ServerBlocks(cluster, 1.0 / channels, eff)
    first, of_server, server = _by_key(cluster, per_server)
    n = len(per_server)
    parents = [np.array([parent(k, n, tree) for k in range(n)], np.int64) for tree in (0, 1)]
    out: list[tuple] = []
    for c in range(channels):
        shapes, nics = [], []
        chain, leave, enter, nic = (np.full(len(first), -1, np.int64) for _ in range(4))
        for k, (prefix, key, (names, orders)) in enumerate(first):
            j = c % len(names)
            order, at = [prefix + g for g in orders[j]], prefix + names[j]
            if len(order) > 1:
                hops = [h for a, b in zip(order, order[1:]) for h in ((a, b), (b, a))]
                shapes.append((key[0], blocks.local_shape(hops, [True] * len(hops))[1]))
                chain[k] = len(shapes) - 1
            shapes += [(key[0], blocks.local_shape([(order[0], at)], [False])[1]),
                       (key[0], blocks.local_shape([(at, order[0])], [False])[1])]
            leave[k], enter[k] = len(shapes) - 2, len(shapes) - 1
            nics.append((key[0], names[j]))
            nic[k] = len(nics) - 1
        chained = np.flatnonzero(chain[of_server] >= 0)
        child = np.flatnonzero(parents[c % 2] >= 0)
        up = parents[c % 2][child]
        a = np.stack([child, up], axis=1).ravel()     # child -> parent, parent -> child
        b = np.stack([up, child], axis=1).ravel()
        ka, kb = of_server[a], of_server[b]
        none = np.full(len(chained), -1, np.int64)
        src = Ends(np.concatenate([server[chained], server[a]]),
                   np.concatenate([chain[of_server[chained]], leave[ka]]),
                   np.concatenate([none, nic[ka]]))
        dst = Ends(np.concatenate([server[chained], server[b]]),
                   np.concatenate([none, enter[kb]]), np.concatenate([none, nic[kb]]))
        classes = lay_out(blocks, shapes, nics, src, dst)
        if classes is None:             # a table lacks an entry: server by server
            return tree_blocks(cluster, named_orders(per_server, channels), eff,
                               parent).entries()
        out.append(joined(classes, len(src.server)))
    return tuple(np.concatenate(parts) for parts in zip(*out))
