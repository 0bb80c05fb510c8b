"""Stamp many servers of one design onto a new graph at once.

:func:`simulator.topology.servers.stamp` adds one server through networkx's
``add_nodes_from``/``add_edges_from``, which check every node and edge: with thousands of
servers, most of building the topology. Here the design is stamped once onto a small graph
with local ids (the *template*, so networkx itself decides adjacency order and merges
repeated edges), and each server copies the template's node and adjacency dicts with its
``n{server}.`` prefix: the same nodes, edges, attributes and orders as stamping server by
server (tests compare the two), one edge-data dict shared by both directions as networkx
keeps it.
"""

from __future__ import annotations

import networkx as nx

from simulator.topology.servers import ServerLayout


def _template(layout: ServerLayout) -> tuple:
    """(node rows, adjacency rows, edge attrs) of ``layout`` with local ids.

    Node rows are ``(local id, attrs, is_gpu)``; adjacency rows ``[(neighbour's node row,
    edge index)]`` in networkx's (node) order; edge attrs one dict per distinct edge.
    """
    T = nx.Graph()
    T.add_nodes_from(layout.nodes)
    T.add_edges_from(layout.edges)
    if len(T) != len(layout.nodes):
        raise ValueError(f"layout {layout.template!r} has edges to nodes it does not list")
    index: dict[int, int] = {}
    edges: list[dict] = []
    position = {n: i for i, n in enumerate(T)}
    adjacency = []
    for nbrs in T.adj.values():
        row = []
        for v, d in nbrs.items():
            if id(d) not in index:
                index[id(d)] = len(edges)
                edges.append(d)
            row.append((position[v], index[id(d)]))
        adjacency.append(tuple(row))
    nodes = tuple((n, d, d["kind"] == "gpu") for n, d in T.nodes(data=True))
    return nodes, tuple(adjacency), tuple(edges)


def stamp_servers(G: nx.Graph, layout: ServerLayout, count: int) -> None:
    """Add servers ``0..count-1`` of ``layout`` to the empty graph ``G`` (what ``count``
    calls of :func:`~simulator.topology.servers.stamp` add, in the same order)."""
    if len(G):
        raise ValueError("stamp_servers fills an empty graph")
    nodes, adjacency, edge_attrs = _template(layout)
    # networkx's own stores, written straight: its add_nodes_from/add_edges_from would
    # check every node and edge again, most of building a large topology (measured:
    # docs/speed.md, 2026-12-05)
    node_dict, adj_dict = G._node, G._adj
    template, gpus = layout.template, layout.gpus
    for s in range(count):
        p = f"n{s}."
        base = {"server": s, "template": template}
        rank0 = s * gpus
        names = [p + local for local, _, _ in nodes]
        for name, (_, attrs, is_gpu) in zip(names, nodes):
            node_dict[name] = ({**attrs, **base, "rank": rank0 + attrs["index"]}
                               if is_gpu else {**attrs, **base})
        data = [d.copy() for d in edge_attrs]
        for name, row in zip(names, adjacency):
            adj_dict[name] = {names[v]: data[e] for v, e in row}
    getattr(nx, "_clear_cache", lambda graph: None)(G)   # networkx >= 3.3 caches


def add_links(G: nx.Graph, pairs, attrs: dict) -> None:
    """``G.add_edges_from((u, v, attrs) for u, v in pairs)``: each new edge between two
    nodes already there put straight into networkx's adjacency (a copy of ``attrs``, shared
    by both directions as networkx keeps it); anything else (a node not there yet, an edge
    that exists, a graph class of its own) through networkx's own ``add_edge``.

    Written straight for the reason :func:`stamp_servers` is: ``add_edges_from``'s checks
    per edge cost the whole process measurably at scale (docs/speed.md, 2026-12-05)."""
    if type(G) is not nx.Graph:
        G.add_edges_from((u, v, attrs) for u, v in pairs)
        return
    node, adj = G._node, G._adj
    for u, v in pairs:
        if u in node and v in node and v not in adj[u]:
            adj[u][v] = adj[v][u] = dict(attrs)
        else:
            G.add_edge(u, v, **attrs)
    getattr(nx, "_clear_cache", lambda graph: None)(G)
