"""Routes over a cluster's links: ECMP over the cheapest paths, computed once and kept.

Routes are equal-cost multipath (ECMP) over the cheapest paths, where a hop costs
1/bandwidth (the ``cost`` the :class:`~simulator.cluster.Cluster` puts on each edge), so a
GPU pair inside a DGX goes over NVSwitch and never over PCIe. Routes inside a server are
computed once per server design (``template``) and reused; routes between switches are
computed once per switch pair on the small switch-only graph; so routing a ring across
thousands of GPUs costs a few dictionary look-ups per hop.

:class:`Routes` owns every table this takes (paths per design and per switch pair, the
link ids of each server, each NIC's switch, each GPU's nearest NICs); it reads the
cluster's index (graph, link ids, latencies, servers) and writes nothing of it.
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass
from functools import cached_property

import networkx as nx
import numpy as np

from .errors import TopologyError
from .routing import SwitchRouter

MAX_ECMP_PATHS = 64
_UNEQUAL = object()      # kept for a switch pair whose cheapest paths differ in length


@dataclass(frozen=True)
class Route:
    """Directed link ids with the share of the payload each carries, and path latency.

    ``extra_latency_s`` is the part of ``latency_s`` above the catalog latencies of the
    links crossed (a what-if; 0.0 without one), averaged over the ECMP paths as
    ``latency_s`` is: what a NCCL step over this route takes beyond NCCL's own constants.
    """

    links: np.ndarray   # int64 link ids (may repeat)
    coef: np.ndarray    # float64 bytes on that link per payload byte
    latency_s: float
    extra_latency_s: float = 0.0

    @staticmethod
    def join(routes: list["Route"]) -> "Route":
        """Concatenate consecutive route segments into one route."""
        if not routes:
            return Route(np.zeros(0, np.int64), np.zeros(0), 0.0)
        return Route(np.concatenate([r.links for r in routes]),
                     np.concatenate([r.coef for r in routes]),
                     sum(r.latency_s for r in routes),
                     sum(r.extra_latency_s for r in routes))


@dataclass(frozen=True)
class _LocalShape:
    """A route inside a server as its design sees it: positions in the design's list of
    local link pairs, where each ECMP path lies among them, each path's share."""

    positions: np.ndarray
    paths: list[slice]
    share: float


class Routes:
    """The routes of one cluster (``cluster.routes``), each computed once and kept.

    ``cluster`` is the :class:`~simulator.cluster.Cluster` whose graph, link ids,
    latencies, ECMP mode and servers the routes are made of.
    """

    def __init__(self, cluster):
        self.cluster = cluster
        self._routes: dict = {}            # (src, dst, label) -> Route
        self._local_paths: dict = {}       # (template, local src, local dst) -> paths
        self._local_shapes: dict = {}      # (template, local src, local dst) -> _LocalShape
        self._design_pairs: dict = {}      # template -> {(local a, local b): position}
        self._server_ids: dict = {}        # server -> link id per design pair
        self._switch_paths: dict = {}      # (switch, switch) -> paths
        self._core_ids: dict = {}          # (switch, switch) -> link ids or _UNEQUAL
        self._attached: dict = {}          # NIC -> its switch
        self._nearest_of_gpu: dict = {}    # GPU -> its nearest NICs
        self._nearest_local: dict = {}     # (template, local GPU) -> local NIC names

    @property
    def kept(self) -> int:
        """How many routes (distinct ``route`` arguments) have been computed and kept."""
        return len(self._routes)

    # ------------------------------------------------------------------ any pair
    def route(self, src: str, dst: str, label: int = 0) -> Route:
        """ECMP route from node ``src`` to node ``dst`` (any kinds).

        ``label`` distinguishes flows of the same pair for the ``hash`` ECMP mode.

        :raises TopologyError: if no path exists.
        """
        key = (src, dst, label if self.cluster.ecmp == "hash" else 0)
        found = self._routes.get(key)
        if found is None:
            found = self._routes[key] = self._route_uncached(src, dst, key[2])
        return found

    def _route_uncached(self, src: str, dst: str, label: int) -> Route:
        nodes = self.cluster.G.nodes
        if src == dst:
            return Route(np.zeros(0, np.int64), np.zeros(0), 0.0)
        s_srv, d_srv = nodes[src].get("server"), nodes[dst].get("server")
        if s_srv is not None and s_srv == d_srv:
            if self.cluster.ecmp == "spread":
                return self._local_route(src, dst)
            return self.paths_route(self.local_paths(src, dst), src, dst, label)
        s_kind, d_kind = nodes[src].get("kind"), nodes[dst].get("kind")
        if s_kind in ("nic", "switch") and d_kind in ("nic", "switch"):
            return self._fabric_route(src, dst, label)
        return self.paths_route(_shortest_paths(self.cluster.G, src, dst), src, dst, label,
                                self.cluster.qps)

    def paths_route(self, paths: list[list[str]], src: str, dst: str, label: int,
                    qps: int = 1) -> Route:
        """The route over ``paths`` (equal-cost node paths ``src`` -> ``dst``): each an
        equal share (``spread`` ECMP), or the path each of ``qps`` queue pairs hashes to by
        ``src``, ``dst``, ``label`` and the cluster's seed, ``k / qps`` of the bytes on a
        path ``k`` of them chose (``hash``).

        :raises KeyError: if two consecutive nodes of a path are not linked.
        """
        cluster = self.cluster
        shares = None
        if cluster.ecmp == "hash" and len(paths) > 1:
            seed = cluster.seed
            picks = [zlib.crc32(f"{src}|{dst}|{label}|{seed}".encode()) % len(paths)]
            picks += [zlib.crc32(f"{src}|{dst}|{label}|{seed}|qp{q}".encode()) % len(paths)
                      for q in range(1, qps)]
            chosen = sorted(set(picks))
            paths = [paths[i] for i in chosen]
            if len(chosen) > 1:
                shares = [picks.count(i) / qps for i in chosen]
        if shares is None:
            shares = [1.0 / len(paths)] * len(paths)
        link_id = cluster.link_id
        links, coef, latency, extra = [], [], 0.0, 0.0
        for p, share in zip(paths, shares):
            ids = [link_id[(a, b)] for a, b in zip(p, p[1:])]
            links.extend(ids)
            coef.extend([share] * len(ids))
            latency += float(cluster.latency_s[ids].sum()) * share
            if cluster.has_extra_latency:
                extra += float(cluster.extra_latency_s[ids].sum()) * share
        links_arr = np.asarray(links, dtype=np.int64)
        return Route(links_arr, np.asarray(coef, dtype=float), latency, extra)

    # ------------------------------------------------------------ inside a server
    def local_paths(self, src: str, dst: str) -> list[list[str]]:
        """The cheapest paths (at most :data:`MAX_ECMP_PATHS`) from ``src`` to ``dst``, two
        nodes of one server, through that server's nodes only; worked out once per server
        design and named per server.

        :raises TopologyError: if the server holds no path between them.
        """
        nodes = self.cluster.G.nodes
        template = nodes[src].get("template", nodes[src]["server"])
        key = (template, nodes[src]["local"], nodes[dst]["local"])
        local = self._local_paths.get(key)
        if local is None:
            server = nodes[src]["server"]
            sub = self.cluster.G.subgraph(self.cluster.server_members(server))
            local = [[nodes[n]["local"] for n in p] for p in _shortest_paths(sub, src, dst)]
            self._local_paths[key] = local
        prefix = src[: len(src) - len(nodes[src]["local"])]
        return [[prefix + name for name in p] for p in local]

    def _local_route(self, src: str, dst: str) -> Route:
        """``paths_route(local_paths(src, dst))`` without string work: the hops are kept
        per server design as positions in a per-server array of link ids (same ids, same
        order, same latency sum as the general path)."""
        cluster = self.cluster
        nodes = cluster.G.nodes
        template = nodes[src].get("template", nodes[src]["server"])
        key = (template, nodes[src]["local"], nodes[dst]["local"])
        shape = self._local_shapes.get(key)
        if shape is None:
            shape = self._local_shapes[key] = self._shape(src, dst, template)
        links = self.server_link_ids(src, template)[shape.positions]
        latency = extra = 0.0
        for path in shape.paths:
            latency += float(cluster.latency_s[links[path]].sum()) * shape.share
            if cluster.has_extra_latency:
                extra += float(cluster.extra_latency_s[links[path]].sum()) * shape.share
        return Route(links, np.full(len(links), shape.share), latency, extra)

    def _shape(self, src: str, dst: str, template) -> _LocalShape:
        """The local paths ``src`` -> ``dst`` as positions in the design's pair list
        (pairs not listed yet are added at its end)."""
        paths = self.local_paths(src, dst)
        pairs = self._design_pairs.setdefault(template, {})
        positions, where = [], []
        cut = len(src) - len(self.cluster.G.nodes[src]["local"])
        for path in paths:
            start = len(positions)
            for a, b in zip(path, path[1:]):
                positions.append(pairs.setdefault((a[cut:], b[cut:]), len(pairs)))
            where.append(slice(start, len(positions)))
        return _LocalShape(np.asarray(positions, np.int64), where, 1.0 / len(paths))

    def server_link_ids(self, node: str, template=None) -> np.ndarray:
        """Global ids of the directed links inside ``node``'s server that routes there have
        used so far, by their position in the server design's list (:meth:`local_link`
        names each); the same positions on every server of one design (``template``: the
        server's design, looked up when None). The list only grows, at its end.

        :raises KeyError: if ``node`` has no server, or its server lacks a link the
            design's list holds.
        """
        nodes = self.cluster.G.nodes
        d = nodes[node]
        if template is None:
            template = d.get("template", d["server"])
        server = d["server"]
        pairs = self._design_pairs.get(template, {})
        ids = self._server_ids.get(server)
        have = 0 if ids is None else len(ids)
        if have < len(pairs):
            # pairs only grow at the end: look up the new ones
            prefix = node[: len(node) - len(d["local"])]
            link_id = self.cluster.link_id
            new = [link_id[(prefix + a, prefix + b)]
                   for a, b in itertools.islice(pairs, have, None)]
            ids = self._server_ids[server] = np.concatenate(
                [ids if ids is not None else np.zeros(0, np.int64), np.array(new, np.int64)])
        return ids if ids is not None else np.zeros(0, np.int64)

    def local_link(self, template, position: int) -> tuple[str, str]:
        """The local names (from, to) of the ``position``-th link of design ``template``'s
        list (:meth:`server_link_ids` holds its id on each server at that position).

        :raises IndexError: if the list is shorter (no route has used that many links).
        """
        pairs = self._design_pairs.get(template, {})
        found = next(itertools.islice(pairs, position, None), None)
        if found is None:
            raise IndexError(f"design {template!r} has {len(pairs)} link(s) listed, "
                             f"no position {position}")
        return found

    # ------------------------------------------------------------ between servers
    def _fabric_route(self, src: str, dst: str, label: int) -> Route:
        """NIC/switch to NIC/switch through the switch-only graph."""
        nodes = self.cluster.G.nodes
        sw_src = src if nodes[src]["kind"] == "switch" else self.attached_switch(src)
        sw_dst = dst if nodes[dst]["kind"] == "switch" else self.attached_switch(dst)
        head = [src] if src != sw_src else []
        tail = [dst] if dst != sw_dst else []
        if self.cluster.ecmp == "spread":
            core = self.core_link_ids(sw_src, sw_dst)
            if core is not None:
                return self._spread_route(core, head + [sw_src], [sw_dst] + tail)
        core_paths = self.switch_paths(sw_src, sw_dst)
        return self.paths_route([head + p + tail for p in core_paths], src, dst, label,
                                self.cluster.qps)

    def switch_paths(self, sw_src: str, sw_dst: str) -> list[list[str]]:
        """The equal-cost switch paths from ``sw_src`` to ``sw_dst`` (at most
        :data:`MAX_ECMP_PATHS`; ``[[sw_src]]`` from a switch to itself).

        :raises TopologyError: if there is none.
        """
        key = (sw_src, sw_dst)
        core = self._switch_paths.get(key)
        if core is None:
            if sw_src == sw_dst:
                core = [[sw_src]]
            else:
                core = self.switch_router.paths(sw_src, sw_dst, MAX_ECMP_PATHS)
                if not core:           # none only where ``sw_dst`` cannot be reached
                    raise TopologyError(f"no route from {sw_src} to {sw_dst}: the topology "
                                        "is disconnected")
            self._switch_paths[key] = core
        return core

    def core_link_ids(self, sw_src: str, sw_dst: str) -> np.ndarray | None:
        """Link ids of the switch paths ``sw_src`` -> ``sw_dst``, one row per path, when
        they are all as long; None where their lengths differ.

        :raises TopologyError: if there is no path.
        """
        key = (sw_src, sw_dst)
        ids = self._core_ids.get(key)
        if ids is None:
            core = self.switch_paths(sw_src, sw_dst)
            if len({len(p) for p in core}) != 1:
                ids = _UNEQUAL
            else:
                hops = [hop for p in core for hop in zip(p, p[1:])]
                ids = np.fromiter(map(self.cluster.link_id.__getitem__, hops), np.int64,
                                  len(hops)).reshape(len(core), -1)
            self._core_ids[key] = ids
        return None if ids is _UNEQUAL else ids

    def _spread_route(self, core: np.ndarray, head: list[str], tail: list[str]) -> Route:
        """``paths_route`` of the paths ``head`` + core row + ``tail`` for ``spread`` ECMP,
        one array operation for all rows: the same links, order and latency sums (each row
        sums like the one path it is)."""
        cluster = self.cluster
        link_id = cluster.link_id
        rows, width = core.shape
        first = [link_id[(a, b)] for a, b in zip(head, head[1:])]
        last = [link_id[(a, b)] for a, b in zip(tail, tail[1:])]
        ids = np.empty((rows, len(first) + width + len(last)), np.int64)
        ids[:, :len(first)] = first
        ids[:, len(first):len(first) + width] = core
        ids[:, len(first) + width:] = last
        share = 1.0 / rows
        latency = extra = 0.0
        for x in cluster.latency_s[ids].sum(axis=1).tolist():
            latency += x * share
        if cluster.has_extra_latency:
            for x in cluster.extra_latency_s[ids].sum(axis=1).tolist():
                extra += x * share
        links = ids.ravel()
        return Route(links, np.full(len(links), share), latency, extra)

    def attached_switch(self, nic: str) -> str:
        """The switch ``nic`` is cabled to: its first neighbour of kind ``switch``.

        :raises TopologyError: if ``nic`` is not in the graph or has no switch neighbour.
        """
        found = self._attached.get(nic)
        if found is None:
            try:
                neighbours = self.cluster.G.neighbors(nic)
            except nx.NetworkXError:
                raise TopologyError(f"NIC {nic} is not in the topology") from None
            switches = self._switches
            for found in neighbours:
                if found in switches:
                    break
            else:
                raise TopologyError(f"NIC {nic} is not attached to any switch")
            self._attached[nic] = found
        return found

    @cached_property
    def _switches(self) -> dict:
        """Switch node -> its attributes, in graph order."""
        return {n: d for n, d in self.cluster.G.nodes(data=True) if d.get("kind") == "switch"}

    @cached_property
    def switch_graph(self) -> nx.Graph:
        """The switches and the links between them, a concrete copy (a subgraph view would
        filter every leaf's many NIC neighbours on each access) in the graph's own order:
        nodes as the cluster's graph lists them, each one's neighbours as its adjacency
        does. (``nx.Graph(G.subgraph(...))`` lists them in the order of a set of names,
        which changes with the interpreter's hash seed, and so would the order of the ECMP
        paths and the path each ``hash`` label picks.)"""
        G, switches = self.cluster.G, self._switches
        H = nx.Graph()
        H.graph.update(G.graph)
        H.add_nodes_from(switches.items())
        H.add_edges_from((u, v, d) for u in switches for v, d in G.adj[u].items()
                         if v in switches)
        return H

    @cached_property
    def switch_router(self) -> SwitchRouter:
        """Cheapest paths on :attr:`switch_graph`, by link cost."""
        return SwitchRouter(self.switch_graph, weight="cost")

    # ------------------------------------------------------------ NIC selection
    def nearest_nics(self, gpu: str) -> list[str]:
        """The NICs of ``gpu``'s server with the cheapest path from it, by NIC index;
        worked out once per server design and local GPU.

        :raises TopologyError: if the server has no NIC.
        """
        found = self._nearest_of_gpu.get(gpu)
        if found is None:
            found = self._nearest_of_gpu[gpu] = self._nearest_nics(gpu)
        return found

    def _nearest_nics(self, gpu: str) -> list[str]:
        cluster = self.cluster
        nodes = cluster.G.nodes
        key = (nodes[gpu].get("template"), nodes[gpu]["local"])
        local = self._nearest_local.get(key)
        if local is None:
            server = nodes[gpu]["server"]
            nics = cluster.nics_of_server(server)
            if not nics:
                raise TopologyError(f"server {server} has no NIC to leave the node")
            sub = cluster.G.subgraph(cluster.server_members(server))
            dist = nx.single_source_dijkstra_path_length(sub, gpu, weight="cost")
            best = min(dist.get(n, np.inf) for n in nics)
            local = [nodes[n]["local"] for n in nics if dist.get(n) == best]
            self._nearest_local[key] = local
        prefix = gpu[: len(gpu) - len(nodes[gpu]["local"])]
        return [prefix + name for name in local]


def _shortest_paths(G: nx.Graph, src: str, dst: str) -> list[list[str]]:
    try:
        paths = []
        for p in nx.all_shortest_paths(G, src, dst, weight="cost"):
            paths.append(p)
            if len(paths) >= MAX_ECMP_PATHS:
                break
        return paths
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        raise TopologyError(f"no route from {src} to {dst}: the topology is disconnected") \
            from None
