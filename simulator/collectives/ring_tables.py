"""A ring across many servers laid out by table (:mod:`.crossings`), not server by server.

:func:`.blocks.ring_blocks` adds, per channel and server, the way through the server to
the channel's NIC, the NIC-to-NIC part and the way into the next server: at 131,072 GPUs
the 64 FSDP rings across 2,048 servers are 131,072 such edges. Here the ways are worked
out once per server design, member GPUs and NIC (as there), and the edges of every channel
are handed to :func:`.crossings.lay_out` as arrays: the same entries in the same order
(a test compares them with ``ring_blocks``).
"""

from __future__ import annotations

import numpy as np

from ..cluster import Cluster
from .blocks import ServerBlocks, _ring_way, ring_blocks
from .columns import gpu_places
from .crossings import Ends, joined, lay_out


def ring_entries(cluster: Cluster, per_server: list[tuple], eff: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(link ids, rate coefficients, wire bytes) of ``ring_blocks(cluster, per_server,
    eff).entries()``: whole rings over more than one server, from
    ``layouts.server_orders``."""
    channels = max(len(nics) for _, _, (nics, _) in per_server)
    blocks = ServerBlocks(cluster, 1.0 / channels, eff)
    keys: dict = {}                          # (design, members) -> its index
    first: list = []                         # per key: (prefix, key, shape) of a server
    of_server = []
    for item in per_server:
        k = keys.setdefault(item[1], len(keys))
        if k == len(first):
            first.append(item)
        of_server.append(k)
    of_server = np.array(of_server, np.int64)
    places = gpu_places(cluster)
    server = np.array([places[prefix + orders[0][0]][3]
                       for prefix, _, (_, orders) in per_server], np.int64)
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
