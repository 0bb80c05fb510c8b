"""Per-server columns of a cluster: one entry per server (or rank), worked out once.

The layouts by table (:mod:`.crossings`, :mod:`.groups`) read a shape's link ids off every
server at once: the global id of a design's local link on each server of that design, a
NIC's uplink, downlink and switch on each, each rank's design and local name. Each column
is built once per cluster, by name (the links of ``prefix + local`` nodes), and kept on it.
"""

from __future__ import annotations

import itertools
from itertools import repeat

import numpy as np


def rank_places(cluster) -> tuple:
    """Per rank the code of its server's design and of its local name; the designs and
    local names by code (worked out once per cluster)."""
    found = cluster.__dict__.get("_rank_places")
    if found is None:
        places = gpu_places(cluster)
        designs: dict = {}
        names: dict = {}
        design, local = [], []
        for g in cluster.gpus:
            _, d, name, _ = places[g]
            design.append(designs.setdefault(d, len(designs)))
            local.append(names.setdefault(name, len(names)))
        found = cluster.__dict__["_rank_places"] = (
            np.array(design, np.int64), np.array(local, np.int64), list(designs), list(names))
    return found


def gpu_places(cluster) -> dict:
    """GPU node id -> (prefix of its server's node ids, the server's design, its local
    name, its server), for every GPU (worked out once per cluster)."""
    found = cluster.__dict__.get("_gpu_places")
    if found is None:
        data = cluster.G._node
        found = cluster.__dict__["_gpu_places"] = {}
        for g in cluster.gpus:
            d = data[g]
            local = d["local"]
            found[g] = (g[: len(g) - len(local)], d.get("template", d["server"]), local,
                        d["server"])
    return found


def switches(cluster) -> tuple[dict, list]:
    """(switch name -> code, names by code), grown as NICs' switches are met."""
    return cluster.__dict__.setdefault("_switch_codes", ({}, []))


def server_prefixes(cluster) -> dict:
    """Server id -> the prefix of its node ids (from its first GPU)."""
    found = cluster.__dict__.get("_server_prefixes")
    if found is None:
        nodes = cluster.G.nodes
        found = cluster.__dict__["_server_prefixes"] = {}
        for server, gpus in cluster._gpus_by_server.items():
            g = gpus[0]
            found[server] = g[: len(g) - len(nodes[g]["local"])]
    return found


def _servers_of(cluster, design) -> tuple[np.ndarray, list[str], int]:
    """(server ids of ``design``, their prefixes, one past the largest server id)."""
    cache = cluster.__dict__.setdefault("_design_servers", {})
    found = cache.get(design)
    if found is None:
        nodes = cluster.G.nodes
        servers, prefixes = [], []
        for server, prefix in server_prefixes(cluster).items():
            d = nodes[cluster._gpus_by_server[server][0]]
            if d.get("template", server) == design:
                servers.append(server)
                prefixes.append(prefix)
        top = max(server_prefixes(cluster)) + 1
        found = cache[design] = (np.array(servers, np.int64), prefixes, top)
    return found


def link_column(cluster, design, position: int) -> np.ndarray:
    """:func:`pair_column` of the design's ``position``-th local link pair (what
    ``Cluster.server_link_ids`` holds at that position)."""
    a, b = next(itertools.islice(cluster._template_pairs[design], position, None))
    return pair_column(cluster, design, a, b)


def pair_column(cluster, design, a: str, b: str) -> np.ndarray:
    """Per server id, the global id of the link from local node ``a`` to ``b`` on that
    server; -1 where the server is not of the design or lacks the link."""
    cache = cluster.__dict__.setdefault("_link_columns", {})
    found = cache.get((design, a, b))
    if found is None:
        servers, _, top = _servers_of(cluster, design)
        found = cache[(design, a, b)] = np.full(top, -1, np.int64)
        pairs = zip(node_column(cluster, design, a), node_column(cluster, design, b))
        found[servers] = list(map(cluster.link_id.get, pairs, repeat(-1)))
    return found


def node_column(cluster, design, local: str) -> list[str]:
    """The node id ``prefix + local`` on each server of ``design`` (:func:`_servers_of`'s
    order), named once per local name: a local node is an end of several link pairs, and
    the same strings keep their hash from one look-up of ``link_id`` to the next."""
    cache = cluster.__dict__.setdefault("_node_columns", {})
    found = cache.get((design, local))
    if found is None:
        found = cache[(design, local)] = [p + local for p in _servers_of(cluster, design)[1]]
    return found


def plain_servers(cluster) -> bool:
    """Whether server ids are non-negative integers (they index the columns)."""
    server = cluster.server_of_rank
    return server.dtype.kind in "iu" and (not len(server) or int(server.min()) >= 0)


def nic_column(cluster, design, nic: str, outward: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per server id, the link id NIC ``nic`` -> its switch (``outward``) or back, and the
    switch's code; -1 where the server is not of the design or the NIC has no switch."""
    cache = cluster.__dict__.setdefault("_nic_columns", {})
    found = cache.get((design, nic))
    if found is None:
        found = cache[(design, nic)] = _nic_links(cluster, design, nic)
    return found[0 if outward else 1], found[2]


def _nic_links(cluster, design, nic: str) -> tuple:
    """(uplink ids, downlink ids, switch codes) of ``nic`` per server id of ``design``: its
    switch is its first neighbour of kind ``switch``, as ``Cluster._attached_switch``
    finds it."""
    servers, _, top = _servers_of(cluster, design)
    codes, names = switches(cluster)
    link_id, adj, data = cluster.link_id, cluster.G._adj, cluster.G._node
    up, down, on = (np.full(top, -1, np.int64) for _ in range(3))
    for server, node in zip(servers.tolist(), node_column(cluster, design, nic)):
        sw = next((v for v in adj.get(node, ()) if data[v].get("kind") == "switch"), None)
        if sw is None:
            continue
        code = codes.get(sw)
        if code is None:
            code = codes[sw] = len(names)
            names.append(sw)
        up[server], down[server] = link_id[(node, sw)], link_id[(sw, node)]
        on[server] = code
    return up, down, on
