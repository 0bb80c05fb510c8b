"""Cluster: a topology graph indexed for simulation (directed links, ranks, servers, NICs).

Every undirected edge of the graph becomes two directed links (full duplex), each with its
capacity, latency and kind; GPUs are indexed by rank, nodes by server. The routes over the
links are :class:`~simulator.routes.Routes`' (``cluster.routes``), and tables other modules
derive from the cluster are kept in its :class:`~simulator.memo.Memo` (``cluster.memo``).

Every directed link keeps the catalog latency of its ``link_type`` beside its own: a
latency what-if is the difference (``extra_latency_s``, exactly 0.0 without one), which
collectives add on top of NCCL's constants (measured on catalog links).
"""

from __future__ import annotations

from functools import cached_property

import networkx as nx
import numpy as np

from .choices import ECMP_MODES
from .constants import ModelConstants, load_constants
from .errors import TopologyError
from .gcpause import gc_paused
from .hardware import link_names, link_spec
from .memo import Memo
from .routes import Route, Routes

__all__ = ["Cluster", "Route"]


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

    Attributes
    ----------
    routes : Routes
        The routes over the links (computed once per pair, design or switch pair).
    memo : Memo
        Tables other modules derive from this cluster, each under its user's key.

    Raises
    ------
    TopologyError
        If the graph has no GPU.
    ValueError
        If ``ecmp`` is not one of the modes.
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
        self._members: dict[int, list[str]] | None = None    # server -> its nodes
        self._nics_of: dict[int, list[str]] = {}
        self.routes = Routes(self)
        self.memo = Memo()

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

    @property
    def link_kinds(self) -> list[tuple[str, str]]:
        """The distinct (``link_type``, ``link_class``) pairs of the links, in the order they
        first appear (``""`` / ``net`` where an edge names none)."""
        return list(self._kinds)

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
        # (rank, node, server): sorted by rank, then node id (unique: server never compared)
        gpus = [(d["rank"], n, d["server"]) for n, d in self.G.nodes(data=True)
                if d.get("kind") == "gpu"]
        if not gpus:
            raise TopologyError("the topology has no GPU")
        gpus.sort()
        self.gpus: list[str] = [n for _, n, _ in gpus]
        servers = [server for _, _, server in gpus]
        self.server_of_rank = np.array(servers)
        # server -> its GPU node ids by rank, servers in the order of their first rank
        self.gpus_by_server: dict[int, list[str]] = {}
        for g, server in zip(self.gpus, servers):
            self.gpus_by_server.setdefault(server, []).append(g)

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
        among the server's own nodes rather than the whole graph's); none for a server
        that has no node."""
        nics = self._nics_of.get(server)
        if nics is None:
            nodes = self.G.nodes
            members = self._server_nodes().get(server, ())
            nics = [n for n in members if nodes[n].get("kind") == "nic"]
            nics.sort(key=lambda n: nodes[n]["index"])
            self._nics_of[server] = nics
        return nics

    def gpus_of_server(self, server: int) -> list[str]:
        """GPU node ids of one server, by local index.

        :raises KeyError: if the server has no GPU.
        """
        return self.gpus_by_server[server]

    def server_members(self, server: int) -> list[str]:
        """Node ids of one server (every node whose ``server`` is it), in graph order.

        :raises KeyError: if no node belongs to ``server``.
        """
        return self._server_nodes()[server]

    def _server_nodes(self) -> dict[int, list[str]]:
        """Server -> its node ids in graph order (worked out on the first ask)."""
        if self._members is None:
            members: dict[int, list[str]] = {}
            for n, d in self.G.nodes(data=True):
                if "server" in d:
                    members.setdefault(d["server"], []).append(n)
            self._members = members
        return self._members

    @cached_property
    def link_ends(self) -> list[tuple[str, str]]:
        """(from node, to node) of every directed link, by link id."""
        return list(self.link_id)

    # ------------------------------------------------------------------ routing
    def route(self, src: str, dst: str, label: int = 0) -> Route:
        """ECMP route from node ``src`` to node ``dst``: ``self.routes.route`` (the one
        routing question most of the machine asks, so asked of the cluster).

        :raises TopologyError: if no path exists.
        """
        return self.routes.route(src, dst, label)


def _edges(G: nx.Graph):
    """``G.edges(data=True)`` in its order (each edge from the first of its nodes in
    adjacency order), without the edge view's per-edge bookkeeping."""
    done: set = set()
    for u, nbrs in G.adjacency():
        for v, d in nbrs.items():
            if v not in done:
                yield u, v, d
        done.add(u)

