"""Communication layouts: which GPU talks to which, over which route, for each algorithm.

A layout turns a communicator (a list of GPUs, grouped by server) into directed edges with
their routes, per channel, the way NCCL lays them out: rings are flat and cross servers
through NICs chosen rail by rail (NVIDIA/nccl#471); trees are chains inside a server and a
double binary tree between servers (ncclGetBtree / ncclGetDtree).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..cluster import Cluster, Route
from ..hardware import SCALE_UP_CLASSES, gpu_spec, is_scale_up
from ..uniques import distinct_where
from .alltoall import aggregable, all_to_all_coefficients
from .blocks import named_orders
from .columns import gpu_places
from .host_path import HostPath, host_gpu_route
from .mesh import is_full_mesh, mesh_orders, mesh_paths
from .nics import home_nic, nic_owner, owned_nics
from .ring_tables import ring_entries, rings_entries, tree_entries


@dataclass(frozen=True)
class Communicator:
    """GPUs of a collective grouped by server, in rank order."""

    groups: tuple[tuple[str, ...], ...]   # per server, GPU node ids

    # counted once (a plan reads them several times, and a communicator may span every
    # server)
    @cached_property
    def n_ranks(self) -> int:
        return sum(len(g) for g in self.groups)

    @property
    def n_nodes(self) -> int:
        return len(self.groups)

    @cached_property
    def ppn(self) -> int:
        return max(len(g) for g in self.groups)

    @property
    def gpus(self) -> list[str]:
        return [g for grp in self.groups for g in grp]


def make_communicator(cluster: Cluster, ranks: list[int]) -> Communicator:
    """The GPUs of ``ranks`` per server, servers by id, each server's in ``ranks`` order
    (one stable sort by server)."""
    if not len(ranks):
        return Communicator(())
    order = np.asarray(ranks, np.int64)
    server = cluster.server_of_rank[order]
    by = np.argsort(server, kind="stable")
    cuts = (np.flatnonzero(np.diff(server[by])) + 1).tolist()
    gpus = cluster.gpus
    names = [gpus[r] for r in order[by].tolist()]
    return Communicator(tuple(tuple(names[i:j]) for i, j in
                              zip([0] + cuts, cuts + [len(names)])))


def gpu_route(cluster: Cluster, src: str, dst: str, src_nic: str | None = None,
              dst_nic: str | None = None, label: int = 0) -> Route:
    """Route GPU to GPU: inside the server directly, else GPU-NIC-fabric-NIC-GPU."""
    nodes = cluster.G.nodes
    if nodes[src]["server"] == nodes[dst]["server"]:
        return cluster.route(src, dst, label)
    a = src_nic or home_nic(cluster, src)
    b = dst_nic or home_nic(cluster, dst)
    return Route.join([cluster.route(src, a), cluster.route(a, b, label), cluster.route(b, dst)])


def _server_nics(cluster: Cluster, gpus: tuple[str, ...]) -> list[str]:
    """NICs a communicator's GPUs on one server drive: one GPU of a DGX uses one NIC."""
    nics = {n for g in gpus for n in owned_nics(cluster, g)}
    return sorted(nics, key=lambda n: cluster.G.nodes[n]["index"])


def channel_orders(cluster: Cluster, comm: Communicator, channels: int | None = None):
    """Per channel: per server, (GPU order inside the server, NIC used), NCCL-style.

    One server whose GPUs form a full mesh (Infinity Fabric) runs several ring orders on
    disjoint links (:mod:`.mesh`). Inside a server the ring enters at a GPU next to the channel's NIC and leaves from
    another GPU next to the same NIC, so traffic stays on one rail between servers. Worked
    out once per server design and set of member GPUs (local names), then named per server.
    """
    if comm.n_nodes == 1:
        gpus = list(comm.groups[0])
        if is_full_mesh(cluster, gpus):       # one ring per link set (.mesh)
            return [[(order, None)] for order in mesh_orders(gpus)]
        return [[(gpus, None)]]
    per_server = server_orders(cluster, comm)
    return named_orders(per_server,
                        channels or max(len(nics) for _, _, (nics, _) in per_server))


def server_orders(cluster: Cluster, comm: Communicator) -> list[tuple]:
    """Per server of ``comm``: (prefix of its node ids, (design, member GPUs' local names),
    (NICs, per NIC the GPU order) as local names), the last one object per key."""
    shapes: dict = {}
    per_server = []
    places = gpu_places(cluster)
    for gpus in comm.groups:
        prefix, design, local, _ = places[gpus[0]]
        key = (design, (local,) if len(gpus) == 1 else tuple(places[g][2] for g in gpus))
        shape = shapes.get(key)
        if shape is None:
            shape = shapes[key] = _server_orders(cluster, gpus, prefix)
        per_server.append((prefix, key, shape))
    return per_server


def _server_orders(cluster: Cluster, gpus: tuple[str, ...], prefix: str):
    """(NICs, per NIC the GPU order) of one server's members, as local names."""
    nics = _server_nics(cluster, gpus)
    peers = cluster.gpus_of_server(cluster.G.nodes[gpus[0]]["server"])
    ends = []
    for nic in nics:
        near = [g for g in gpus if nic in cluster.routes.nearest_nics(g)] or list(gpus)
        owner = nic_owner(cluster, nic, peers)
        entry = owner if owner in near else near[0]
        others = [g for g in near if g != entry]
        ends.append((entry, others[0] if others else entry))
    if len(gpus) > 2 and is_full_mesh(cluster, list(gpus)):
        paths = mesh_paths(ends, list(gpus))         # the channels on their own links (.mesh)
    else:
        paths = [[entry] + [g for g in gpus if g not in (entry, exit_)]
                 + ([exit_] if exit_ != entry else []) for entry, exit_ in ends]
    return [n[len(prefix):] for n in nics], [[g[len(prefix):] for g in p] for p in paths]


@dataclass
class EdgeSet:
    """Directed edges of one algorithm instance, flattened with a weight per entry.

    ``coefs`` are rate coefficients (link capacity each payload byte takes, a transport's
    efficiency included); ``wires`` the bytes that cross each link per payload byte.

    With ``track_extra`` (the cluster has a link latency what-if), ``intra_extra_s`` and
    ``inter_extra_s`` are the largest ``Route.extra_latency_s`` (link latency above the
    catalog's, negative for faster links) of the edges inside a server and of those
    between servers: what one step of each kind takes beyond NCCL's constants (``-inf``
    while there is no edge of the kind).
    """

    links: list
    coefs: list
    intra_hw: str = "nvlink"
    wires: list = field(default_factory=list)
    track_extra: bool = False
    intra_extra_s: float = -math.inf
    inter_extra_s: float = -math.inf
    host_path: HostPath | None = None   # NCCL without PXN: GPU-NIC parts through the CPU
    _joined: bool = field(default=False, repr=False, compare=False)   # one joined part each
    _index: tuple | None = field(default=None, repr=False, compare=False)

    def add(self, route: Route, weight: float, efficiency: float = 1.0,
            between_servers: bool = False, wire: np.ndarray | None = None) -> None:
        """Add ``route`` carrying ``weight`` of the payload, at ``efficiency`` of its
        links' bandwidth (it takes ``1 / efficiency`` of their capacity per byte), an edge
        inside a server or ``between_servers``; ``wire``: its bytes per link when they
        differ from ``route.coef`` (a host-staged part, :mod:`.host_path`)."""
        coef = route.coef if efficiency == 1.0 else route.coef / efficiency
        self.links.append(route.links)
        self.coefs.append(coef * weight)
        self.wires.append((route.coef if wire is None else wire) * weight)
        if self.track_extra:
            extra = route.extra_latency_s
            if between_servers:
                self.inter_extra_s = max(self.inter_extra_s, extra)
            else:
                self.intra_extra_s = max(self.intra_extra_s, extra)

    def step_extra_s(self) -> tuple[float, float]:
        """(``intra_extra_s``, ``inter_extra_s``), 0.0 for a kind without edges."""
        return (self.intra_extra_s if self.intra_extra_s > -math.inf else 0.0,
                self.inter_extra_s if self.inter_extra_s > -math.inf else 0.0)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(link ids, rate coefficients), read-only. The parts are joined on the first call
        and kept joined: every plan of the edge set (each protocol, and the tree's ring
        ceiling) shares one copy, not one each."""
        self._join()
        return self.links[0], self.coefs[0]

    def wire_coef(self) -> np.ndarray:
        """Bytes crossing each entry's link per payload byte, aligned with ``arrays()``."""
        self._join()
        return self.wires[0]

    def link_index(self) -> tuple[np.ndarray, np.ndarray]:
        """``np.unique(links, return_inverse=True)`` of ``arrays()``, worked out once (what
        :func:`~simulator.network.fabric.bottleneck_rate` sorts for each plan otherwise)."""
        self._join()
        if self._index is None:
            self._index = distinct_where(self.links[0], inverse=True)
        return self._index

    def _join(self) -> None:
        if self._joined and len(self.links) == 1:      # joined, nothing added since
            return
        empty = len(self.links) == 0
        joined = [np.zeros(0, np.int64) if empty else np.concatenate(self.links),
                  np.zeros(0) if empty else np.concatenate(self.coefs),
                  np.zeros(0) if not self.wires else np.concatenate(self.wires)]
        for a in joined:
            a.setflags(write=False)
        self.links, self.coefs, self.wires = [joined[0]], [joined[1]], [joined[2]]
        self._joined, self._index = True, None


def _intra_hw(cluster: Cluster, comm: Communicator) -> str:
    for grp in comm.groups:
        if len(grp) > 1:
            r = cluster.route(grp[0], grp[1])
            classes = set(cluster.link_class[r.links])
            return next((c for c in SCALE_UP_CLASSES if c in classes), "pcie")
    # one GPU per server: no step inside a server, the class only names the table row
    return gpu_spec(cluster.G.graph.get("gpu")).scale_up_class or "pcie"


def ring_edges(cluster: Cluster, comm: Communicator, chain_from: int | None = None,
               pcie_p2p_efficiency: float = 1.0, host_path: HostPath | None = None) -> EdgeSet:
    """Edges of the rings (one per channel), each weighted 1/channels.

    With ``chain_from`` (a GPU position in ``comm.gpus``) the ring is cut into a chain that
    starts at that GPU (broadcast and reduce pipelines). ``host_path``: NCCL without PXN
    (:mod:`.host_path`).
    """
    edges = _edge_set(cluster, comm, host_path)
    if chain_from is None and comm.n_nodes > 1 and blocks_exact(cluster, host_path):
        per_server = server_orders(cluster, comm)
        return _from_blocks(edges, ring_entries(cluster, per_server, pcie_p2p_efficiency))
    orders = channel_orders(cluster, comm)
    weight = 1.0 / len(orders)
    root = comm.gpus[chain_from] if chain_from is not None else None
    for ch, servers in enumerate(orders):
        seq = [(g, nic) for order, nic in servers for g in order]
        n = len(seq)
        start = [g for g, _ in seq].index(root) if root is not None else 0
        hops = range(n - 1) if root is not None else range(n)
        for h in hops:
            (a, nic_a), (b, nic_b) = seq[(start + h) % n], seq[(start + h + 1) % n]
            _add_edge(edges, cluster, (a, b), (nic_a, nic_b), ch, pcie_p2p_efficiency, weight)
    return edges


def ring_edge_sets(cluster: Cluster, comms: list[Communicator],
                   pcie_p2p_efficiency: float = 1.0) -> list[EdgeSet]:
    """``ring_edges(cluster, comm, None, pcie_p2p_efficiency)`` of each of ``comms`` (each
    across servers, on a cluster whose blocks are exact and without a host path), the rings
    laid out together (:func:`.ring_tables.rings_entries`)."""
    entries = rings_entries(cluster, [server_orders(cluster, c) for c in comms],
                            pcie_p2p_efficiency)
    return [_from_blocks(_edge_set(cluster, c), e) for c, e in zip(comms, entries)]


def _from_blocks(edges: EdgeSet, entries: tuple) -> EdgeSet:
    """``edges`` holding the (link ids, coefficients, wire bytes) laid out server by server
    or by table (one array each)."""
    links, coefs, wires = entries
    if len(links):
        edges.links.append(links)
        edges.coefs.append(coefs)
        edges.wires.append(wires)
    return edges


def blocks_exact(cluster: Cluster, host_path: HostPath | None) -> bool:
    """Lay out server by server (:mod:`.blocks`)? Not with host-staged NIC parts, whose
    CPU links the per-design link ids do not hold."""
    return host_path is None and aggregable(cluster)


def _edge_set(cluster: Cluster, comm: Communicator,
              host_path: HostPath | None = None) -> EdgeSet:
    return EdgeSet([], [], _intra_hw(cluster, comm), track_extra=cluster.has_extra_latency,
                   host_path=host_path)


def _add_edge(edges: EdgeSet, cluster: Cluster, pair: tuple[str, str], nics: tuple,
              label: int, pcie_p2p_efficiency: float, weight: float) -> None:
    """Add the GPU-to-GPU edge ``pair`` (through ``nics`` between servers) to ``edges``."""
    a, b = pair
    nodes = cluster.G.nodes
    efficiency = 1.0
    same_server = nodes[a]["server"] == nodes[b]["server"]
    route, wire = ((cluster.route(a, b, label), None) if same_server else
                   host_gpu_route(cluster, a, b, nics[0], nics[1], label, edges.host_path))
    if same_server and pcie_p2p_efficiency != 1.0:
        if not is_scale_up(set(cluster.link_class[route.links])):
            # No NVLink or Infinity Fabric between the pair: NCCL's P2P/SHM transport over PCIe reaches only
            # a calibrated fraction of the links' bandwidth.
            efficiency = pcie_p2p_efficiency
    edges.add(route, weight, efficiency, not same_server, wire)


def btree_parent(rank: int, n: int) -> int:
    """Parent in NCCL's binary tree (ncclGetBtree); -1 for the root (rank 0)."""
    if rank == 0:
        return -1
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    return up if up < n else rank ^ bit


def dtree_parent(rank: int, n: int, tree: int) -> int:
    """Parent in tree 0 or 1 of NCCL's double binary tree (mirror or shift of tree 0)."""
    if tree == 0:
        return btree_parent(rank, n)
    if n % 2 == 0:                       # mirror
        p = btree_parent(n - 1 - rank, n)
        return -1 if p < 0 else n - 1 - p
    p = btree_parent((rank - 1) % n, n)  # shift
    return -1 if p < 0 else (p + 1) % n


def tree_edges(cluster: Cluster, comm: Communicator, pcie_p2p_efficiency: float = 1.0,
               host_path: HostPath | None = None) -> EdgeSet:
    """Edges of the double binary tree, both directions (reduce up, broadcast down);
    ``host_path``: NCCL without PXN (:mod:`.host_path`)."""
    edges = _edge_set(cluster, comm, host_path)
    if comm.n_nodes > 1 and blocks_exact(cluster, host_path):
        return _from_blocks(edges, tree_entries(cluster, server_orders(cluster, comm),
                                                pcie_p2p_efficiency, dtree_parent))
    orders = channel_orders(cluster, comm)
    weight = 1.0 / len(orders)
    for ch, servers in enumerate(orders):
        for order, nic in servers:                 # chain inside each server
            for a, b in zip(order, order[1:]):
                for x, y in ((a, b), (b, a)):
                    _add_edge(edges, cluster, (x, y), (nic, nic), ch, pcie_p2p_efficiency,
                              weight)
        n = len(servers)
        for k in range(n):                         # tree between servers
            p = dtree_parent(k, n, ch % 2)
            if p < 0:
                continue
            (child, nic_c), (parent, nic_p) = (servers[k][0][0], servers[k][1]), \
                (servers[p][0][0], servers[p][1])
            for x, y, nx_, ny in ((child, parent, nic_c, nic_p), (parent, child, nic_p, nic_c)):
                route, wire = host_gpu_route(cluster, x, y, nx_, ny, ch, edges.host_path)
                edges.add(route, weight, between_servers=True, wire=wire)
    return edges


def direct_edges(cluster: Cluster, comm: Communicator, pairs=None,
                 pcie_p2p_efficiency: float = 1.0, host_path: HostPath | None = None) -> EdgeSet:
    """Point-to-point edges: every ordered pair (all_to_all) or the given pairs.

    Every ordered pair is summed per link without routing each pair
    (:mod:`simulator.collectives.alltoall`) where that is the same layout; else, and for
    given pairs, as :func:`direct_pair_edges`."""
    if pairs is not None or not blocks_exact(cluster, host_path):
        return direct_pair_edges(cluster, comm, pairs, pcie_p2p_efficiency, host_path)
    coef, wire = all_to_all_coefficients(cluster, comm.groups, pcie_p2p_efficiency)
    ids = np.flatnonzero(wire)
    edges = _edge_set(cluster, comm)
    edges.links.append(ids)
    edges.coefs.append(coef[ids])
    edges.wires.append(wire[ids])
    return edges


def direct_pair_edges(cluster: Cluster, comm: Communicator, pairs=None,
                      pcie_p2p_efficiency: float = 1.0,
                      host_path: HostPath | None = None) -> EdgeSet:
    """Point-to-point edges, one route per pair: every ordered pair or the given pairs."""
    gpus = comm.gpus
    if pairs is None:
        pairs = [(a, b) for a in gpus for b in gpus if a != b]
    edges = _edge_set(cluster, comm, host_path)
    for i, (a, b) in enumerate(pairs):
        _add_edge(edges, cluster, (a, b), (None, None), i, pcie_p2p_efficiency, 1.0)
    return edges
