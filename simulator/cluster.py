"""Cluster: a topology graph indexed for simulation (directed links, ranks, routes).

Every undirected edge of the graph becomes two directed links (full duplex). Routes are
equal-cost multipath (ECMP) over the cheapest paths, where a hop costs 1/bandwidth, so a
GPU pair inside a DGX goes over NVSwitch and never over PCIe. Routes inside a server are
computed once per server design (``template``) and reused; routes between switches are
computed once per switch pair on the small switch-only graph; so routing a ring across
thousands of GPUs costs a few dictionary look-ups per hop.

Every directed link keeps the catalog latency of its ``link_type`` beside its own: a
latency what-if is the difference (``extra_latency_s``, exactly 0.0 without one), which
collectives add on top of NCCL's constants (measured on catalog links).
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass
from functools import cached_property

import networkx as nx
import numpy as np

from .choices import ECMP_MODES
from .collectives.constants import ModelConstants, load_constants
from .errors import TopologyError
from .gcpause import gc_paused
from .hardware import link_names, link_spec
from .routing import SwitchRouter

_MAX_ECMP_PATHS = 64


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


def _cost(bw_bytes_per_s: float) -> int:
    # Integer hop cost (femtoseconds per byte) so equal-cost sums compare exactly.
    return max(1, round(1e15 / bw_bytes_per_s))


class Cluster:
    """A topology graph ready for simulation.

    Parameters
    ----------
    G : networkx.Graph
        A graph following ``docs/topology-conventions.md``.
    link_efficiency : dict, optional
        Usable fraction of nominal bandwidth per ``link_class`` (calibration data).
    ecmp : {"spread", "hash"}
        ``spread`` splits a flow evenly over all equal-cost paths (ideal packet spraying);
        ``hash`` pins each flow to one path chosen by a seeded hash (models ECMP collisions).
    seed : int
        Salt of the ECMP hash.
    qps : int
        Queue pairs per connection between servers (NCCL_IB_QPS_PER_CONNECTION): under
        ``hash`` ECMP each QP is hashed to its own path, so a connection splits evenly over
        up to ``qps`` paths; under ``spread`` it changes nothing (already split evenly).

    Raises
    ------
    TopologyError
        If the graph has no GPU.
    """

    def __init__(self, G: nx.Graph, link_efficiency: dict[str, float] | None = None,
                 ecmp: str = "spread", seed: int = 0, qps: int = 1):
        if ecmp not in ECMP_MODES:
            raise ValueError(f"ecmp must be one of {ECMP_MODES}, got {ecmp!r}")
        self.G = G
        self.ecmp = ecmp
        self.seed = seed
        self.qps = qps
        with gc_paused():      # an entry per link and per GPU, no cycles
            self._index_links(link_efficiency or {})
            self._index_ranks()
        self._local_paths: dict = {}
        self._switch_paths: dict = {}
        self._route_cache: dict = {}
        self._local_shapes: dict = {}      # (template, local src, local dst) -> hops
        self._template_pairs: dict = {}    # template -> {(local a, local b): position}
        self._server_ids: dict = {}        # server -> link id per template pair
        self._core_link_ids: dict = {}     # (switch, switch) -> link ids per ECMP path
        self._attached: dict = {}          # NIC -> its switch

    @classmethod
    def from_graph(cls, G: nx.Graph, constants: ModelConstants | None = None,
                   ecmp: str = "spread", seed: int = 0, qps: int = 1) -> "Cluster":
        """A cluster whose link capacities carry the calibrated efficiencies of
        ``constants`` (the shipped ones when None)."""
        k = constants or load_constants()
        return cls(G, link_efficiency=k.link_efficiency, ecmp=ecmp, seed=seed, qps=qps)

    def capacities_at(self, link_efficiency: dict[str, float]) -> np.ndarray:
        """Usable bytes/s of every directed link: nominal bandwidth x the efficiency of
        its ``link_type`` when the table has one, else of its ``link_class``, else 1."""
        if not len(self._kind_of_link):
            return np.zeros(0)
        eff = np.array([link_efficiency.get(t, link_efficiency.get(c, 1.0))
                        for t, c in self._kinds])
        return self.nominal_bytes_per_s * eff[self._kind_of_link]

    # ----------------------------------------------------------------- indexing
    def _index_links(self, efficiency: dict[str, float]) -> None:
        G = self.G
        walk = list(_edges(G))
        edges = [d for _, _, d in walk]
        keys = [key for u, v, _ in walk for key in ((u, v), (v, u))]
        # both directions, in edge order (a self-loop keeps its second id, as one by one)
        self.link_id: dict[tuple, int] = dict(zip(keys, range(len(keys))))
        bw = [d["bw_bytes_per_s"] for d in edges]
        lat = [d["latency_s"] for d in edges]
        costs = {b: _cost(b) for b in dict.fromkeys(bw)}
        for d, b in zip(edges, bw):
            d["cost"] = costs[b]
        self.nominal_bytes_per_s = np.repeat(np.array(bw, float), 2)
        latency = np.repeat(np.array(lat, float), 2)
        self.latency_s = latency
        # (type, class) of each directed link, as an index into the distinct pairs in the
        # order they first appear (one pass; ``link_type`` and ``link_class``, a string
        # per link, are made from them where asked for)
        index: dict[tuple, int] = {}
        kind = [index.setdefault((d.get("link_type", ""), d.get("link_class", "net")),
                                 len(index)) for d in edges]
        self._kinds = list(index)
        self._kind_of_link = np.repeat(np.array(kind, np.int64), 2)
        self.capacity_bytes_per_s = self.capacities_at(efficiency)
        self.catalog_latency_s = self._catalog_latencies()
        self.extra_latency_s = latency - self.catalog_latency_s
        self.has_extra_latency = bool(self.extra_latency_s.any())

    def link_type_groups(self) -> tuple[list[str], np.ndarray]:
        """The distinct ``link_type`` of the links, sorted, and each directed link's index
        among them (``sorted(set(link_type))`` and the position of each link's type there,
        from the (type, class) pairs the index keeps rather than a string per link)."""
        names = sorted({t for t, _ in self._kinds})
        at = {t: i for i, t in enumerate(names)}
        group_of_kind = np.array([at[t] for t, _ in self._kinds], np.int64)
        return names, group_of_kind[self._kind_of_link]

    @cached_property
    def link_class(self) -> np.ndarray:
        """Per directed link, its ``link_class`` (``net`` where the edge names none)."""
        return self._per_link(1)

    @cached_property
    def link_type(self) -> np.ndarray:
        """Per directed link, its ``link_type`` (``""`` where the edge names none)."""
        return self._per_link(0)

    def _per_link(self, field: int) -> np.ndarray:
        """Field ``field`` of each link's (type, class), a string array as wide as the
        longest (what ``np.array`` of one string per link makes), from the distinct pairs."""
        if not len(self._kind_of_link):
            return np.array([])
        return np.array([kind[field] for kind in self._kinds])[self._kind_of_link]

    def _catalog_latencies(self) -> np.ndarray:
        """Per directed link, the catalog latency of its ``link_type``; a link of a type
        the catalog does not hold keeps its own (no what-if can be told apart)."""
        out = self.latency_s.copy()
        catalog = set(link_names())
        for k, (name, _) in enumerate(self._kinds):
            if name in catalog:
                out[self._kind_of_link == k] = link_spec(name).latency_s
        return out

    def _index_ranks(self) -> None:
        gpus = [(d["rank"], n) for n, d in self.G.nodes(data=True) if d.get("kind") == "gpu"]
        if not gpus:
            raise TopologyError("the topology has no GPU")
        gpus.sort()
        self.gpus: list[str] = [n for _, n in gpus]
        data = self.G._node                 # networkx's node store (no view per look-up)
        servers = [data[n]["server"] for n in self.gpus]
        self.server_of_rank = np.array(servers)
        self._gpus_by_server: dict[int, list[str]] = {}
        for g, server in zip(self.gpus, servers):
            self._gpus_by_server.setdefault(server, []).append(g)

    @property
    def n_gpus(self) -> int:
        return len(self.gpus)

    @property
    def n_links(self) -> int:
        return len(self.capacity_bytes_per_s)

    @cached_property
    def nics_by_server(self) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for n, d in self.G.nodes(data=True):
            if d.get("kind") == "nic":
                out.setdefault(d["server"], []).append(n)
        for nics in out.values():
            nics.sort(key=lambda n: self.G.nodes[n]["index"])
        return out

    def nics_of_server(self, server: int) -> list[str]:
        """NIC node ids of one server by index (``nics_by_server.get(server, [])``, found
        among the server's own nodes rather than the whole graph's)."""
        found = self.__dict__.setdefault("_nics_of", {})
        nics = found.get(server)
        if nics is None:
            if "nics_by_server" in self.__dict__:
                nics = self.nics_by_server.get(server, [])
            else:
                nodes = self.G.nodes
                members = self.__dict__.get("_members") or self._all_members()
                nics = [n for n in members.get(server, ()) if nodes[n].get("kind") == "nic"]
                nics.sort(key=lambda n: nodes[n]["index"])
            found[server] = nics
        return nics

    def gpus_of_server(self, server: int) -> list[str]:
        """GPU node ids of one server, by local index."""
        return self._gpus_by_server[server]

    @cached_property
    def _switch_graph(self) -> nx.Graph:
        """The switches and the links between them, a concrete copy (a subgraph view
        filters every leaf's many NIC neighbours on each access, which made routing
        between switches 40x slower) in the graph's own order: nodes as ``G`` lists them,
        each one's neighbours as its adjacency does. (``nx.Graph(G.subgraph(...))`` lists
        them in the order of a set of names, which changes with the interpreter's hash
        seed, and so did the order of the ECMP paths and the path each ``hash`` label
        picks.)"""
        data, adj = self.G._node, self.G._adj
        switches = [n for n, d in data.items() if d.get("kind") == "switch"]
        keep = set(switches)
        H = nx.Graph()
        H.graph.update(self.G.graph)
        H.add_nodes_from((n, data[n]) for n in switches)
        H.add_edges_from((u, v, d) for u in switches for v, d in adj[u].items() if v in keep)
        return H

    # ------------------------------------------------------------------ routing
    def route(self, src: str, dst: str, label: int = 0) -> Route:
        """ECMP route from node ``src`` to node ``dst`` (any kinds).

        ``label`` distinguishes flows of the same pair for the ``hash`` ECMP mode.

        :raises TopologyError: if no path exists.
        """
        key = (src, dst, label if self.ecmp == "hash" else 0)
        cached = self._route_cache.get(key)
        if cached is None:
            cached = self._route_uncached(src, dst, key[2])
            self._route_cache[key] = cached
        return cached

    def _route_uncached(self, src: str, dst: str, label: int) -> Route:
        nodes = self.G.nodes
        if src == dst:
            return Route(np.zeros(0, np.int64), np.zeros(0), 0.0)
        s_srv, d_srv = nodes[src].get("server"), nodes[dst].get("server")
        if s_srv is not None and s_srv == d_srv:
            if self.ecmp == "spread":
                return self._local_route(src, dst)
            return self._paths_route(self._local(src, dst), src, dst, label)
        s_kind, d_kind = nodes[src].get("kind"), nodes[dst].get("kind")
        if s_kind in ("nic", "switch") and d_kind in ("nic", "switch"):
            return self._fabric_route(src, dst, label)
        return self._paths_route(self._generic_paths(src, dst), src, dst, label, self.qps)

    def _local(self, src: str, dst: str) -> list[list[str]]:
        """Shortest paths inside one server, computed once per server design."""
        nodes = self.G.nodes
        template = nodes[src].get("template", nodes[src]["server"])
        key = (template, nodes[src]["local"], nodes[dst]["local"])
        local = self._local_paths.get(key)
        if local is None:
            server = nodes[src]["server"]
            members = [n for n in self._server_members(server)]
            sub = self.G.subgraph(members)
            paths = _shortest_paths(sub, src, dst)
            local = [[nodes[n]["local"] for n in p] for p in paths]
            self._local_paths[key] = local
        prefix = src[: len(src) - len(nodes[src]["local"])]
        return [[prefix + name for name in p] for p in local]

    def _local_route(self, src: str, dst: str) -> Route:
        """``_paths_route(_local(src, dst))`` without string work: the hops are kept per
        server design as positions in a per-server array of link ids (same ids, same
        order, same latency sum as the general path)."""
        nodes = self.G.nodes
        template = nodes[src].get("template", nodes[src]["server"])
        key = (template, nodes[src]["local"], nodes[dst]["local"])
        shape = self._local_shapes.get(key)
        if shape is None:
            paths = self._local(src, dst)
            pairs = self._template_pairs.setdefault(template, {})
            pos, bounds = [], []
            prefix_len = len(src) - len(nodes[src]["local"])
            for path in paths:
                start = len(pos)
                for a, b in zip(path, path[1:]):
                    pos.append(pairs.setdefault((a[prefix_len:], b[prefix_len:]), len(pairs)))
                bounds.append((start, len(pos)))
            shape = self._local_shapes[key] = (np.asarray(pos, np.int64), bounds,
                                               1.0 / len(paths))
        pos, bounds, share = shape
        links = self._server_link_ids(src, template)[pos]
        latency = extra = 0.0
        for a, b in bounds:
            latency += float(self.latency_s[links[a:b]].sum()) * share
            if self.has_extra_latency:
                extra += float(self.extra_latency_s[links[a:b]].sum()) * share
        return Route(links, np.full(len(links), share), latency, extra)

    def server_link_ids(self, node: str, template=None) -> np.ndarray:
        """Global ids of the directed links inside ``node``'s server that routes there have
        used so far, by their position in the server design's list (see
        :meth:`_local_route`); the same positions on every server of one design
        (``template``: the server's design, looked up when None)."""
        if template is None:
            d = self.G.nodes[node]
            template = d.get("template", d["server"])
        return self._server_link_ids(node, template)

    def _server_link_ids(self, node: str, template) -> np.ndarray:
        """Global ids of the template's local link pairs on ``node``'s server."""
        nodes = self.G.nodes
        server = nodes[node]["server"]
        pairs = self._template_pairs[template]
        ids = self._server_ids.get(server)
        have = 0 if ids is None else len(ids)
        if have < len(pairs):
            # pairs only grow at the end: look up the new ones
            prefix = node[: len(node) - len(nodes[node]["local"])]
            new = [self.link_id[(prefix + a, prefix + b)]
                   for a, b in itertools.islice(pairs, have, None)]
            ids = self._server_ids[server] = np.concatenate(
                [ids if ids is not None else np.zeros(0, np.int64), np.array(new, np.int64)])
        return ids

    def _server_members(self, server: int) -> list[str]:
        return (self.__dict__.get("_members") or self._all_members())[server]

    def _all_members(self) -> dict[int, list[str]]:
        """Server -> its node ids in graph order (worked out once)."""
        members = self.__dict__.setdefault("_members", {})
        if not members:
            for n, d in self.G.nodes(data=True):
                if "server" in d:
                    members.setdefault(d["server"], []).append(n)
        return members

    def _fabric_route(self, src: str, dst: str, label: int) -> Route:
        """NIC/switch to NIC/switch through the switch-only graph."""
        sw_src = src if self.G.nodes[src]["kind"] == "switch" else self._attached_switch(src)
        sw_dst = dst if self.G.nodes[dst]["kind"] == "switch" else self._attached_switch(dst)
        key = (sw_src, sw_dst)
        core = self.switch_paths(sw_src, sw_dst)
        head = [src] if src != sw_src else []
        tail = [dst] if dst != sw_dst else []
        if self.ecmp == "spread" and len({len(p) for p in core}) == 1:
            return self._spread_route(self._core_ids(key, core), head + [sw_src],
                                      [sw_dst] + tail)
        return self._paths_route([head + p + tail for p in core], src, dst, label, self.qps)

    def switch_paths(self, sw_src: str, sw_dst: str) -> list[list[str]]:
        """The equal-cost switch paths from ``sw_src`` to ``sw_dst`` (cached).

        :raises TopologyError: if there is none.
        """
        key = (sw_src, sw_dst)
        core = self._switch_paths.get(key)
        if core is None:
            core = [[sw_src]] if sw_src == sw_dst else self._switch_paths_from(sw_src, sw_dst)
            self._switch_paths[key] = core
        return core

    def _core_ids(self, key: tuple, core: list[list[str]]) -> np.ndarray:
        """Link ids of equal-length switch paths, one row per path (cached per pair)."""
        ids = self._core_link_ids.get(key)
        if ids is None:
            hops = [hop for p in core for hop in zip(p, p[1:])]
            ids = self._core_link_ids[key] = np.fromiter(
                map(self.link_id.__getitem__, hops), np.int64, len(hops)).reshape(len(core), -1)
        return ids

    def _spread_route(self, core: np.ndarray, head: list[str], tail: list[str]) -> Route:
        """``_paths_route`` of the paths ``head`` + core row + ``tail`` for ``spread`` ECMP,
        one array operation for all rows: the same links, order and latency sums (each row
        sums like the one path it is)."""
        rows, width = core.shape
        first = [self.link_id[(a, b)] for a, b in zip(head, head[1:])]
        last = [self.link_id[(a, b)] for a, b in zip(tail, tail[1:])]
        ids = np.empty((rows, len(first) + width + len(last)), np.int64)
        ids[:, :len(first)] = first
        ids[:, len(first):len(first) + width] = core
        ids[:, len(first) + width:] = last
        share = 1.0 / rows
        latency = extra = 0.0
        for x in self.latency_s[ids].sum(axis=1).tolist():
            latency += x * share
        if self.has_extra_latency:
            for x in self.extra_latency_s[ids].sum(axis=1).tolist():
                extra += x * share
        links = ids.ravel()
        return Route(links, np.full(len(links), share), latency, extra)

    def _switch_paths_from(self, src: str, dst: str) -> list[list[str]]:
        """Equal-cost switch paths; one search per source switch serves every target."""
        paths = self._switch_router.paths(src, dst, _MAX_ECMP_PATHS)
        if not paths:           # none only where ``dst`` cannot be reached
            raise TopologyError(f"no route from {src} to {dst}: the topology is disconnected")
        return paths

    @cached_property
    def _switch_router(self) -> SwitchRouter:
        return SwitchRouter(self._switch_graph, weight="cost")

    def _attached_switch(self, nic: str) -> str:
        found = self._attached.get(nic)
        if found is None:
            found = next((nb for nb in self.G.neighbors(nic)
                          if self.G.nodes[nb].get("kind") == "switch"), None)
            if found is None:
                raise TopologyError(f"NIC {nic} is not attached to any switch")
            self._attached[nic] = found
        return found

    def _generic_paths(self, src: str, dst: str) -> list[list[str]]:
        return _shortest_paths(self.G, src, dst)

    def _paths_route(self, paths: list[list[str]], src: str, dst: str, label: int,
                     qps: int = 1) -> Route:
        """Each of ``paths`` an equal share (``spread``), or the path each of ``qps`` queue
        pairs hashes to, ``k / qps`` of the bytes on a path ``k`` of them chose (``hash``)."""
        shares = None
        if self.ecmp == "hash" and len(paths) > 1:
            picks = [zlib.crc32(f"{src}|{dst}|{label}|{self.seed}".encode()) % len(paths)]
            picks += [zlib.crc32(f"{src}|{dst}|{label}|{self.seed}|qp{q}".encode()) % len(paths)
                      for q in range(1, qps)]
            chosen = sorted(set(picks))
            paths = [paths[i] for i in chosen]
            if len(chosen) > 1:
                shares = [picks.count(i) / qps for i in chosen]
        if shares is None:
            shares = [1.0 / len(paths)] * len(paths)
        links, coef, latency, extra = [], [], 0.0, 0.0
        for p, share in zip(paths, shares):
            ids = [self.link_id[(a, b)] for a, b in zip(p, p[1:])]
            links.extend(ids)
            coef.extend([share] * len(ids))
            latency += float(self.latency_s[ids].sum()) * share
            if self.has_extra_latency:
                extra += float(self.extra_latency_s[ids].sum()) * share
        links_arr = np.asarray(links, dtype=np.int64)
        return Route(links_arr, np.asarray(coef, dtype=float), latency, extra)

    # ----------------------------------------------------------- NIC selection
    def nearest_nics(self, gpu: str) -> list[str]:
        """The NICs of ``gpu``'s server with the cheapest path from it, by NIC index."""
        per_gpu = self.__dict__.setdefault("_nearest_gpu", {})
        found = per_gpu.get(gpu)
        if found is None:
            found = per_gpu[gpu] = self._nearest_nics(gpu)
        return found

    def _nearest_nics(self, gpu: str) -> list[str]:
        cache = self.__dict__.setdefault("_nearest", {})
        nodes = self.G.nodes
        key = (nodes[gpu].get("template"), nodes[gpu]["local"])
        local = cache.get(key)
        if local is None:
            server = nodes[gpu]["server"]
            nics = self.nics_of_server(server)
            if not nics:
                raise TopologyError(f"server {server} has no NIC to leave the node")
            sub = self.G.subgraph(self._server_members(server))
            dist = nx.single_source_dijkstra_path_length(sub, gpu, weight="cost")
            best = min(dist.get(n, np.inf) for n in nics)
            local = [nodes[n]["local"] for n in nics if dist.get(n) == best]
            cache[key] = local
        prefix = gpu[: len(gpu) - len(nodes[gpu]["local"])]
        return [prefix + name for name in local]


def _edges(G: nx.Graph):
    """``G.edges(data=True)`` in its order (each edge from the first of its nodes in
    adjacency order), without the edge view's per-edge bookkeeping."""
    done: set = set()
    for u, nbrs in G.adjacency():
        for v, d in nbrs.items():
            if v not in done:
                yield u, v, d
        done.add(u)


def _shortest_paths(G: nx.Graph, src: str, dst: str) -> list[list[str]]:
    try:
        paths = []
        for p in nx.all_shortest_paths(G, src, dst, weight="cost"):
            paths.append(p)
            if len(paths) >= _MAX_ECMP_PATHS:
                break
        return paths
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        raise TopologyError(f"no route from {src} to {dst}: the topology is disconnected") \
            from None
