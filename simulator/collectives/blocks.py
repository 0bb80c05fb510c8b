"""Ring and tree edges laid out server by server instead of edge by edge.

``layouts.ring_edges`` and ``layouts.tree_edges`` add one route per directed edge: a ring
has one edge per GPU and channel, a tree twice as many, each a few dictionary look-ups and
small numpy arrays. Inside a server the routes depend only on the server's design
(``cluster.routes`` keeps them as positions in a per-server array of link ids), so
the edges one channel lays out inside one server are routed once per design and hop
sequence and then, for every other server of that design, read off that server's link ids
with one fancy index. Between servers the NIC-to-NIC routes are the cluster's own (cached).

The entries (link ids, rate coefficients, wire bytes) are the same, in the same order, as
the edge-by-edge layout gives, so every sum over them is bit for bit the same; a test
compares the two. Used only where that holds: ``spread`` ECMP (``hash`` pins each edge to
a path by its label) and no link latency what-if (which needs each edge's route latency).
"""

from __future__ import annotations

import numpy as np

from ..cluster import Cluster
from ..hardware import is_scale_up


class ServerBlocks:
    """Entries of edges, ``weight`` of the payload each, ``eff`` the P2P efficiency over
    PCIe inside a server."""

    def __init__(self, cluster: Cluster, weight: float, eff: float):
        self.cluster = cluster
        self.weight = weight
        self.eff = eff
        # the shapes, worked out once per cluster, weight and efficiency (not per instance:
        # a ring of two servers is an instance, and the 65,536 context-parallel pairs of
        # the 405B plan at 131,072 GPUs routed their two ways anew for each)
        self._shapes: dict = cluster.memo.get(("blocks", "shapes", weight, eff), dict)
        self.links: list[np.ndarray] = []
        self.coefs: list[np.ndarray] = []
        self.wires: list[np.ndarray] = []
        self._pending: list[tuple[int, str, str]] = []   # fabric parts: slot, NIC, NIC
        self._nodes: dict[str, tuple] = cluster.memo.get(("blocks", "nodes"), dict)

    def local(self, hops: list[tuple[str, str]], edge: list[bool]) -> None:
        """Add the routes of ``hops`` (node pairs of one server); ``edge[i]``: hop ``i`` is a
        whole GPU-to-GPU edge (the P2P efficiency applies), else the GPU-NIC part of an
        edge between servers."""
        template, shape, prefix = self.local_shape(hops, edge)
        self.add_shape(prefix, hops[0][0], template, shape)

    def local_shape(self, hops: list[tuple[str, str]], edge: list[bool]) -> tuple:
        """(server design, entries as positions in the design's link ids, prefix of the
        server's node ids) of ``hops``, as :meth:`local` adds them: worked out once per
        design, hop sequence and ``edge``."""
        first = hops[0][0]
        info = self._nodes.get(first)
        if info is None:
            d = self.cluster.G.nodes[first]
            # the server's design, and the length of its prefix of node ids
            info = self._nodes[first] = (d.get("template", d["server"]),
                                         len(first) - len(d["local"]))
        template, cut = info
        key = (template, tuple((a[cut:], b[cut:]) for a, b in hops), tuple(edge))
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = self._shape(hops, edge)
        return template, shape, first[:cut]

    def add_shape(self, prefix: str, node: str, template, shape: tuple) -> None:
        """Add the entries ``shape`` (of :meth:`local_shape`, on a server of design
        ``template``) on ``node``'s server, whose node ids begin with ``prefix``."""
        pos, coef, wire, need = shape
        self.links.append(_link_ids(self.cluster, prefix, node, template, need)[pos])
        self.coefs.append(coef)
        self.wires.append(wire)

    def _shape(self, hops, edge) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Route ``hops`` on this server; return their entries as positions in the
        server's link ids, with coefficients as ``EdgeSet.add`` computes them, and how
        many of the server's link ids they need."""
        cluster = self.cluster
        links, coefs, wires = [], [], []
        for (a, b), whole in zip(hops, edge):
            route = cluster.route(a, b)
            efficiency = 1.0
            if whole and self.eff != 1.0 and \
                    not is_scale_up(set(cluster.link_class[route.links])):
                efficiency = self.eff
            coef = route.coef if efficiency == 1.0 else route.coef / efficiency
            links.append(route.links)
            coefs.append(coef * self.weight)
            wires.append(route.coef * self.weight)
        ids = cluster.routes.server_link_ids(hops[0][0])
        where = {int(link): i for i, link in enumerate(ids.tolist())}
        pos = np.array([where[link] for link in np.concatenate(links).tolist()], np.int64)
        return pos, np.concatenate(coefs), np.concatenate(wires), len(ids)

    def fabric(self, nic_a: str, nic_b: str) -> None:
        """Add the NIC-to-NIC part of an edge between servers (filled in by
        :meth:`entries`, all edges between one switch pair at once)."""
        self._pending.append((len(self.links), nic_a, nic_b))
        for entries in (self.links, self.coefs, self.wires):
            entries.append(None)

    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(link ids, rate coefficients, wire bytes) of every edge added, in order."""
        cluster = self.cluster
        by_switches: dict = {}
        attached_switch = cluster.routes.attached_switch
        for item in self._pending:
            key = (attached_switch(item[1]), attached_switch(item[2]))
            by_switches.setdefault(key, []).append(item)
        for (sw_a, sw_b), items in by_switches.items():
            core = cluster.routes.core_link_ids(sw_a, sw_b)
            if core is None:            # switch paths of unequal lengths: each its route
                for slot, a, b in items:
                    route = cluster.route(a, b)
                    self.links[slot] = route.links
                    self.coefs[slot] = self.wires[slot] = route.coef * self.weight
                continue
            self._fill(core, sw_a, sw_b, items)
        self._pending = []
        if not self.links:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
        return (np.concatenate(self.links), np.concatenate(self.coefs),
                np.concatenate(self.wires))

    def _fill(self, core: np.ndarray, sw_a: str, sw_b: str, items) -> None:
        """The spread routes NIC -> ``sw_a`` -> core paths -> ``sw_b`` -> NIC of ``items``
        (the ids of the cluster's spread route, row by row, and its shares times the
        weight)."""
        link_id = self.cluster.link_id
        rows, width = core.shape
        ids = np.empty((len(items), rows, width + 2), np.int64)
        ids[:, :, 0] = np.array([link_id[(a, sw_a)] for _, a, _ in items])[:, None]
        ids[:, :, 1:width + 1] = core
        ids[:, :, width + 1] = np.array([link_id[(sw_b, b)] for _, _, b in items])[:, None]
        coef = np.full(rows * (width + 2), 1.0 / rows) * self.weight
        links, coefs, wires = self.links, self.coefs, self.wires
        for (slot, _, _), row in zip(items, ids.reshape(len(items), -1)):
            links[slot] = row
            coefs[slot] = wires[slot] = coef

    def between(self, a: str, nic_a: str, nic_b: str, b: str) -> None:
        """Add the edge GPU ``a`` -> GPU ``b`` of another server, through the NICs."""
        self.local([(a, nic_a)], [False])
        self.fabric(nic_a, nic_b)
        self.local([(nic_b, b)], [False])


def _link_ids(cluster: Cluster, prefix: str, node: str, template, need: int) -> np.ndarray:
    """``cluster.routes.server_link_ids(node, template)``, at least its first ``need`` ids,
    kept per server (``prefix`` of its node ids: the routes look up a node's server anew)."""
    cache = cluster.memo.get(("blocks", "server link ids"), dict)
    ids = cache.get(prefix)
    if ids is None or len(ids) < need:
        ids = cache[prefix] = cluster.routes.server_link_ids(node, template)
    return ids


def ring_blocks(cluster: Cluster, per_server: list[tuple], eff: float) -> ServerBlocks:
    """The entries of ``layouts.ring_edges`` (whole rings, more than one server), from
    ``layouts.server_orders``: each server's way in and out worked out once per design,
    member GPUs and channel, then read off per server."""
    channels = max(len(nics) for _, _, (nics, _) in per_server)
    out = ServerBlocks(cluster, 1.0 / channels, eff)
    ways: dict = {}          # (design and members, channel's NIC) -> (out, in) entries
    n = len(per_server)
    firsts = [prefix + orders[0][0] for prefix, _, (_, orders) in per_server]
    for c in range(channels):
        steps = [_ring_way(out, ways, prefix, key, shape, c % len(shape[0]))
                 for prefix, key, shape in per_server]
        for i, (leave, _, nic) in enumerate(steps):
            enter, nxt = steps[(i + 1) % n][1], (i + 1) % n
            out.add_shape(per_server[i][0], firsts[i], per_server[i][1][0], leave)
            out.fabric(nic, steps[nxt][2])
            out.add_shape(per_server[nxt][0], firsts[nxt], per_server[nxt][1][0], enter)
    return out


def _ring_way(out: ServerBlocks, ways: dict, prefix: str, key, shape, j: int) -> tuple:
    """(entries of the hops from the ring's entry GPU through the server to NIC ``j``,
    entries of NIC ``j`` to the entry GPU, the NIC's node id) on the server ``prefix``."""
    nics, orders = shape
    known = ways.get((key, j))
    if known is None:
        order, nic = [prefix + g for g in orders[j]], prefix + nics[j]
        hops = list(zip(order, order[1:])) + [(order[-1], nic)]
        known = ways[(key, j)] = (
            out.local_shape(hops, [True] * (len(hops) - 1) + [False])[1],
            out.local_shape([(nic, order[0])], [False])[1])
    return known[0], known[1], prefix + nics[j]


def named_orders(per_server: list[tuple], channels: int) -> list[list[tuple]]:
    """Per channel, per server: (its GPU order, its NIC) as node ids, from
    ``layouts.server_orders`` (channel ``c`` takes each server's NIC ``c`` modulo its NICs)."""
    out = []
    for c in range(channels):
        servers = []
        for prefix, _, (nics, orders) in per_server:
            j = c % len(nics)
            servers.append(([prefix + g for g in orders[j]], prefix + nics[j]))
        out.append(servers)
    return out


def tree_blocks(cluster: Cluster, orders, eff: float, parent) -> ServerBlocks:
    """The entries of ``layouts.tree_edges``; ``parent(k, n, tree)`` the double binary tree."""
    out = ServerBlocks(cluster, 1.0 / len(orders), eff)
    for ch, servers in enumerate(orders):
        for order, nic in servers:
            hops = [h for a, b in zip(order, order[1:]) for h in ((a, b), (b, a))]
            if hops:
                out.local(hops, [True] * len(hops))
        n = len(servers)
        for k in range(n):
            p = parent(k, n, ch % 2)
            if p < 0:
                continue
            (child, nic_c), (up, nic_p) = (servers[k][0][0], servers[k][1]), \
                (servers[p][0][0], servers[p][1])
            out.between(child, nic_c, nic_p, up)
            out.between(up, nic_p, nic_c, child)
    return out
