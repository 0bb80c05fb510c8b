"""Copies between a GPU and the host memory of a server: where TensorFlow keeps variables on
a CPU (parameter servers, CentralStorageStrategy).

The route a tensor takes:

* to the GPU's own server: GPU -> PCIe -> the host CPU (one DMA copy);
* to another server: a TensorFlow task sends gRPC messages from host memory, so the tensor is
  first copied to the CPU nearest the GPU, then leaves through the task's NIC (``nic``, the
  index of the NIC that carries the task's address), crosses the fabric to the peer's NIC of
  the same index and lands in the host memory of that server.

Inside a server a copy never transits another GPU or the NVSwitch (routes are the cheapest
paths without them). A server's host memory is the CPU socket nearest its NIC ``nic``. The
reverse direction (host to GPU) takes the same links the other way. Every hop shares
bandwidth with whatever else is on the link (the fabric decides), and one copy is capped at
the engine's host-device copy rate.
"""

from __future__ import annotations

import itertools

import networkx as nx

from ..cluster import Cluster, Route
from ..errors import TopologyError
from ..network.fabric import Flow


def _server_nodes(cluster: Cluster, server: int, kind: str) -> list[str]:
    return sorted(n for n in cluster.server_members(server)
                  if cluster.G.nodes[n].get("kind") == kind)


def _host_side(cluster: Cluster, server: int, ends: tuple[str, ...]) -> nx.Graph:
    """The server without its GPUs and NVSwitch (except ``ends``): a DMA between a GPU and
    host memory never transits another GPU, although a path through NVLink can be cheaper."""
    nodes = cluster.G.nodes
    keep = [n for n in cluster.server_members(server)
            if n in ends or nodes[n].get("kind") not in ("gpu", "nvswitch")]
    return cluster.G.subgraph(keep)


def host_side_route(cluster: Cluster, a: str, b: str) -> Route:
    """The cheapest route ``a`` -> ``b`` inside one server that transits no other GPU and no
    NVSwitch (what a DMA to host memory, or a host-staged NIC transfer, takes)."""
    server = cluster.G.nodes[a]["server"]
    paths = list(itertools.islice(nx.all_shortest_paths(
        _host_side(cluster, server, (a, b)), a, b, weight="cost"), 64))
    return cluster.routes.paths_route(paths, a, b, 0)


def nearest_cpu(cluster: Cluster, node: str) -> str:
    """The CPU node of ``node``'s server with the cheapest path from it (lowest id on ties).

    :raises TopologyError: if the server has no CPU node.
    """
    cache = cluster.memo.get(("host", "nearest cpu"), dict)
    found = cache.get(node)
    if found is None:
        server = cluster.G.nodes[node]["server"]
        cpus = _server_nodes(cluster, server, "cpu")
        if not cpus:
            raise TopologyError(f"server {server} has no CPU node: host memory is unreachable")
        dist = nx.single_source_dijkstra_path_length(_host_side(cluster, server, (node,)),
                                                     node, weight="cost")
        found = cache[node] = min(cpus, key=lambda c: (dist.get(c, float("inf")), c))
    return found


def server_nic(cluster: Cluster, server: int, index: int) -> str:
    """NIC ``index`` of ``server``.

    :raises TopologyError: if the server has no such NIC.
    """
    nics = cluster.nics_of_server(server)
    if not 0 <= index < len(nics):
        raise TopologyError(f"server {server} has {len(nics)} NIC(s), no NIC {index}")
    return nics[index]


def host_memory(cluster: Cluster, server: int, nic: int = 0) -> str:
    """The CPU node whose memory holds ``server``'s host tensors."""
    return nearest_cpu(cluster, server_nic(cluster, server, nic))


def host_route(cluster: Cluster, rank: int, server: int, to_host: bool, nic: int = 0) -> Route:
    """Route of a copy from GPU ``rank`` to ``server``'s host memory (or back)."""
    cache = cluster.memo.get(("host", "routes"), dict)
    key = (rank, server, to_host, nic)
    route = cache.get(key)
    if route is None:
        gpu = cluster.gpus[rank]
        own = int(cluster.server_of_rank[rank])
        if own == server:
            hops = [gpu, host_memory(cluster, server, nic)]
        else:
            hops = [gpu, nearest_cpu(cluster, gpu), server_nic(cluster, own, nic),
                    server_nic(cluster, server, nic), host_memory(cluster, server, nic)]
        if not to_host:
            hops.reverse()
        same = [cluster.G.nodes[a].get("server") == cluster.G.nodes[b].get("server")
                for a, b in zip(hops, hops[1:])]
        route = cache[key] = Route.join([
            (host_side_route(cluster, a, b) if inside else cluster.route(a, b))
            for (a, b), inside in zip(zip(hops, hops[1:]), same) if a != b])
    return route


def host_flow(cluster: Cluster, rank: int, server: int, size_bytes: int, to_host: bool,
              nic: int = 0, max_rate: float = float("inf")) -> Flow:
    """A :class:`Flow` for one copy between GPU ``rank`` and ``server``'s host memory."""
    route = host_route(cluster, rank, server, to_host, nic)
    return Flow(float(size_bytes), route.links, route.coef, route.latency_s, max_rate,
                label="h2d" if not to_host else "d2h")
