"""All-to-all without one route per GPU pair: the link coefficients of every ordered pair,
summed per server design, per NIC and per switch pair.

An all_to_all on ``n`` GPUs is one coupled flow over the ``n (n - 1)`` direct routes, each
carrying ``1`` per payload byte (``layouts.direct_edges``). A flow only needs, per link, the
sum of those coefficients, and that sum factors along the parts of a route:

* inside a server (GPU to GPU, GPU to its home NIC, home NIC to GPU) the routes depend only
  on the server's design and on which of its GPUs take part, so one server of each shape is
  routed and the sums mapped onto every other server of the same shape; a GPU sends to (and
  receives from) the ``n - g`` GPUs off its server (``g`` its server's members);
* a NIC's link to its switch (both directions) carries ``c (n - g)``, ``c`` the GPUs whose
  home NIC it is;
* between switches, the ECMP paths from switch ``a`` to switch ``b`` carry
  ``W(a, b) = A(a) A(b) - sum over servers s of A_s(a) A_s(b)`` (``A(x)`` the GPUs whose
  home NIC hangs off switch ``x``, ``A_s`` those of server ``s``: same-server pairs never
  leave the server). Where the cheapest paths are two hops (every leaf pair of a two-tier
  Clos, :mod:`simulator.routing`), one numpy pass per source switch spreads a whole row of
  ``W`` over the common neighbours; any other pair takes the switch paths of the router.

Same links and, up to the order of floating-point additions, the same coefficients as the
per-pair layout (a test compares the two on small clusters). Only for ``spread`` ECMP
without a link latency what-if: ``hash`` pins each pair to its own path, and a what-if
needs each route's latency, so those keep the per-pair layout.
"""

from __future__ import annotations

import math

import numpy as np

from ..cluster import Cluster
from ..hardware import is_scale_up
from ..routes import MAX_ECMP_PATHS
from .nics import home_nic


def aggregable(cluster: Cluster) -> bool:
    """Whether :func:`all_to_all_coefficients` equals the per-pair layout on ``cluster``."""
    return cluster.ecmp == "spread" and not cluster.has_extra_latency


def all_to_all_coefficients(cluster: Cluster, groups, pcie_p2p_efficiency: float = 1.0
                            ) -> tuple[np.ndarray, np.ndarray]:
    """Per directed link, (rate coefficient, wire bytes) per payload byte of an all_to_all
    among ``groups`` (GPU node ids per server), summed over every ordered GPU pair."""
    coef = np.zeros(cluster.n_links)
    wire = np.zeros(cluster.n_links)
    n = sum(len(g) for g in groups)
    shapes: dict = {}
    nic_count: dict[str, float] = {}
    for grp in groups:
        off_server = n - len(grp)
        local = _server_sums(cluster, grp, off_server, pcie_p2p_efficiency, shapes)
        ids, c_local, w_local = _on_server(cluster, grp[0], local)
        np.add.at(coef, ids, c_local)
        np.add.at(wire, ids, w_local)
        if off_server:
            for g in grp:
                nic = home_nic(cluster, g)
                nic_count[nic] = nic_count.get(nic, 0.0) + 1.0
    if nic_count:
        fabric = _fabric_sums(cluster, nic_count, n)
        coef += fabric
        wire += fabric
    return coef, wire


def _server_sums(cluster: Cluster, grp, off_server: int, eff: float, shapes: dict) -> dict:
    """{(local u, local v): (coef, wire)} of one server's GPU pairs and its GPUs' routes to
    and from their home NICs, once per (design, members) shape."""
    nodes = cluster.G.nodes
    first = nodes[grp[0]]
    key = (first.get("template", first["server"]), tuple(nodes[g]["local"] for g in grp),
           off_server)
    found = shapes.get(key)
    if found is None:
        found = shapes[key] = _route_server(cluster, grp, off_server, eff)
    return found


def _route_server(cluster: Cluster, grp, off_server: int, eff: float) -> dict:
    nodes = cluster.G.nodes
    ends = cluster.link_ends
    out: dict = {}

    def add(route, c_scale: float, w_scale: float) -> None:
        for link, c in zip(route.links.tolist(), route.coef.tolist()):
            u, v = ends[link]
            key = (nodes[u]["local"], nodes[v]["local"])
            old = out.get(key, (0.0, 0.0))
            out[key] = (old[0] + c * c_scale, old[1] + c * w_scale)

    for a in grp:
        for b in grp:
            if a != b:
                route = cluster.route(a, b)
                slow = eff != 1.0 and not is_scale_up(set(cluster.link_class[route.links]))
                add(route, 1.0 / eff if slow else 1.0, 1.0)
        if off_server:
            nic = home_nic(cluster, a)
            add(cluster.route(a, nic), off_server, off_server)
            add(cluster.route(nic, a), off_server, off_server)
    return out


def _on_server(cluster: Cluster, node: str, local: dict):
    """The link ids of ``local``'s (local u, local v) pairs on ``node``'s server."""
    local_name = cluster.G.nodes[node]["local"]
    prefix = node[: len(node) - len(local_name)]
    ids = np.array([cluster.link_id[(prefix + u, prefix + v)] for u, v in local], np.int64)
    values = np.array(list(local.values())).reshape(-1, 2)
    return ids, values[:, 0], values[:, 1]


def _fabric_sums(cluster: Cluster, nic_count: dict[str, float], n: int) -> np.ndarray:
    """Per link, the all-to-all coefficients from NIC to NIC: the NIC-switch links and the
    switch paths between the NICs' switches."""
    nodes = cluster.G.nodes
    out = np.zeros(cluster.n_links)
    on_server: dict = {}
    for nic, count in nic_count.items():
        server = nodes[nic]["server"]
        on_server[server] = on_server.get(server, 0.0) + count
    per_switch: dict[str, float] = {}
    per_server: dict = {}
    attached_switch = cluster.routes.attached_switch
    for nic, count in nic_count.items():
        sw = attached_switch(nic)
        server = nodes[nic]["server"]
        off = n - on_server[server]
        out[cluster.link_id[(nic, sw)]] += count * off
        out[cluster.link_id[(sw, nic)]] += count * off
        per_switch[sw] = per_switch.get(sw, 0.0) + count
        mine = per_server.setdefault(server, {})
        mine[sw] = mine.get(sw, 0.0) + count
    _switch_sums(cluster, per_switch, per_server, out)
    return out


def _switch_sums(cluster: Cluster, per_switch: dict[str, float], per_server: dict,
                 out: np.ndarray) -> None:
    """Add ``W(a, b)`` times the coefficients of the switch paths a -> b to ``out``."""
    ends = list(per_switch)
    e_index = {sw: i for i, sw in enumerate(ends)}
    A = np.array([per_switch[sw] for sw in ends])
    servers_of: dict[int, list[dict]] = {}
    for counts in per_server.values():
        for sw in counts:
            servers_of.setdefault(e_index[sw], []).append(counts)
    mids = _TwoHop(cluster, ends)
    for a, sw_a in enumerate(ends):
        demand = A[a] * A
        for counts in servers_of[a]:
            for sw_b, c in counts.items():
                demand[e_index[sw_b]] -= counts[sw_a] * c
        demand[a] = 0.0
        rest = mids.add_row(a, demand, out)
        for b in np.flatnonzero(rest).tolist():
            paths = cluster.routes.switch_paths(sw_a, ends[b])
            share = demand[b] / len(paths)
            for p in paths:
                for u, v in zip(p, p[1:]):
                    out[cluster.link_id[(u, v)]] += share


class _TwoHop:
    """The two-hop rule of :class:`~simulator.routing.SwitchRouter`, a whole row at once:
    the cheapest paths a -> b are the common neighbours ``x`` with cost(a, x) + cost(x, b)
    equal to twice the cheapest link, when a and b are not adjacent."""

    def __init__(self, cluster: Cluster, ends: list[str]):
        router = cluster.routes.switch_router
        idx = [router.index[sw] for sw in ends]
        cols = sorted({x for i in idx for x, _ in router.adj[i]})
        col_of = {x: j for j, x in enumerate(cols)}
        self.cost = np.full((len(ends), len(cols)), math.inf)
        self.up = np.full((len(ends), len(cols)), -1, np.int64)     # a -> x link ids
        self.down = np.full((len(ends), len(cols)), -1, np.int64)   # x -> b link ids
        names = router.names
        for r, i in enumerate(idx):
            for x, c in router.adj[i]:
                j = col_of[x]
                self.cost[r, j] = c
                self.up[r, j] = cluster.link_id[(names[i], names[x])]
                self.down[r, j] = cluster.link_id[(names[x], names[i])]
        ends_set = set(idx)
        # a row pair is adjacent when b is among a's neighbours
        self.adjacent = [np.array([router.index[sw] in router.nbr[i] for sw in ends])
                         if any(x in ends_set for x, _ in router.adj[i]) else None
                         for i in idx]
        self.two_min = 2 * router.min_cost

    def add_row(self, a: int, demand: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Add row ``a``'s two-hop demand to ``out``; return the demand left for the
        router (pairs the rule does not decide)."""
        want = demand > 0
        if not want.any():
            return demand * 0.0
        total = self.cost[a][None, :] + self.cost
        best = total.min(axis=1)
        ties = total == best[:, None]
        count = ties.sum(axis=1)
        # more equal paths than the router keeps: its subset, left to it
        ok = want & (best == self.two_min) & (count <= MAX_ECMP_PATHS)
        if self.adjacent[a] is not None:
            ok &= ~self.adjacent[a]
        share = np.where(ok, demand / np.maximum(count, 1), 0.0)
        load = ties * share[:, None]                     # (b, x): a -> x -> b
        has = self.up[a] >= 0
        np.add.at(out, self.up[a][has], load.sum(axis=0)[has])
        mask = ties & ok[:, None]
        np.add.at(out, self.down[mask], load[mask])
        return np.where(want & ~ok, demand, 0.0)
