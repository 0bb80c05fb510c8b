"""Per-server columns of a cluster: one entry per server (or rank), worked out once.

The layouts by table (:mod:`.crossings`, :mod:`.groups`) read a shape's link ids off every
server at once: the global id of a design's local link on each server of that design, a
NIC's uplink, downlink and switch on each, each rank's design and local name. Each column
is built once per cluster, by name (the links of ``prefix + local`` nodes), and kept in the
cluster's memo under a ``("columns", ...)`` key.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np

from ..errors import TopologyError


def _kept(cluster, name: str, make):
    """The column table ``name`` of ``cluster``, made by ``make()`` on the first ask."""
    return cluster.memo.get(("columns", name), make)


def rank_places(cluster) -> tuple:
    """Per rank the code of its server's design and of its local name; the designs and
    local names by code (worked out once per cluster)."""
    return _kept(cluster, "rank places", lambda: _rank_places(cluster))


def _rank_places(cluster) -> tuple:
    places = gpu_places(cluster)
    designs: dict = {}
    names: dict = {}
    design, local = [], []
    for g in cluster.gpus:
        _, d, name, _ = places[g]
        design.append(designs.setdefault(d, len(designs)))
        local.append(names.setdefault(name, len(names)))
    return np.array(design, np.int64), np.array(local, np.int64), list(designs), list(names)


def gpu_places(cluster) -> dict:
    """GPU node id -> (prefix of its server's node ids, the server's design, its local
    name, its server), for every GPU (worked out once per cluster)."""
    return _kept(cluster, "gpu places", lambda: _gpu_places(cluster))


def _gpu_places(cluster) -> dict:
    nodes = cluster.G.nodes
    found = {}
    for g in cluster.gpus:
        d = nodes[g]
        local = d["local"]
        found[g] = (g[: len(g) - len(local)], d.get("template", d["server"]), local,
                    d["server"])
    return found


def switches(cluster) -> tuple[dict, list]:
    """(switch name -> code, names by code), grown as NICs' switches are met."""
    return _kept(cluster, "switch codes", lambda: ({}, []))


def server_prefixes(cluster) -> dict:
    """Server id -> the prefix of its node ids (from its first GPU)."""
    return _kept(cluster, "server prefixes", lambda: _server_prefixes(cluster))


def _server_prefixes(cluster) -> dict:
    nodes = cluster.G.nodes
    found = {}
    for server, gpus in cluster.gpus_by_server.items():
        g = gpus[0]
        found[server] = g[: len(g) - len(nodes[g]["local"])]
    return found


def _servers_of(cluster, design) -> tuple[np.ndarray, list[str], int]:
    """(server ids of ``design``, their prefixes, one past the largest server id)."""
    cache = _kept(cluster, "design servers", dict)
    found = cache.get(design)
    if found is None:
        nodes = cluster.G.nodes
        servers, prefixes = [], []
        for server, prefix in server_prefixes(cluster).items():
            d = nodes[cluster.gpus_of_server(server)[0]]
            if d.get("template", server) == design:
                servers.append(server)
                prefixes.append(prefix)
        top = max(server_prefixes(cluster)) + 1
        found = cache[design] = (np.array(servers, np.int64), prefixes, top)
    return found


def link_column(cluster, design, position: int) -> np.ndarray:
    """:func:`pair_column` of the design's ``position``-th local link pair (what
    ``cluster.routes.server_link_ids`` holds at that position).

    :raises IndexError: if the design's list of links is shorter.
    """
    a, b = cluster.routes.local_link(design, position)
    return pair_column(cluster, design, a, b)


def pair_column(cluster, design, a: str, b: str) -> np.ndarray:
    """Per server id, the global id of the link from local node ``a`` to ``b`` on that
    server; -1 where the server is not of the design or lacks the link."""
    cache = _kept(cluster, "link columns", dict)
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
    cache = _kept(cluster, "node columns", dict)
    found = cache.get((design, local))
    if found is None:
        found = cache[(design, local)] = [p + local for p in _servers_of(cluster, design)[1]]
    return found


def plain_servers(cluster) -> bool:
    """Whether server ids are non-negative integers (they index the columns); worked out
    once per cluster (a pass over every rank, asked by every layout by table)."""
    return _kept(cluster, "plain servers", lambda: _plain_servers(cluster.server_of_rank))


def _plain_servers(server: np.ndarray) -> bool:
    return server.dtype.kind in "iu" and (not len(server) or int(server.min()) >= 0)


def nic_column(cluster, design, nic: str, outward: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per server id, the link id NIC ``nic`` -> its switch (``outward``) or back, and the
    switch's code; -1 where the server is not of the design or the NIC has no switch."""
    cache = _kept(cluster, "nic columns", dict)
    found = cache.get((design, nic))
    if found is None:
        found = cache[(design, nic)] = _nic_links(cluster, design, nic)
    return found[0 if outward else 1], found[2]


def _nic_links(cluster, design, nic: str) -> tuple:
    """(uplink ids, downlink ids, switch codes) of ``nic`` per server id of ``design``: its
    switch as ``cluster.routes.attached_switch`` finds it."""
    servers, _, top = _servers_of(cluster, design)
    codes, names = switches(cluster)
    link_id, attached_switch = cluster.link_id, cluster.routes.attached_switch
    up, down, on = (np.full(top, -1, np.int64) for _ in range(3))
    for server, node in zip(servers.tolist(), node_column(cluster, design, nic)):
        try:
            sw = attached_switch(node)
        except TopologyError:          # no such NIC there, or no switch: no entry
            continue
        code = codes.get(sw)
        if code is None:
            code = codes[sw] = len(names)
            names.append(sw)
        up[server], down[server] = link_id[(node, sw)], link_id[(sw, node)]
        on[server] = code
    return up, down, on
