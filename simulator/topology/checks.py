"""Sanity checks of a cluster graph (docs/topology-conventions.md)."""

from __future__ import annotations

from operator import itemgetter

import networkx as nx

from simulator.errors import TopologyError


def check_connected(G: nx.Graph) -> None:
    """Check that every node of ``G`` is reachable from the first GPU (or first node).

    :raises TopologyError: ``"topology is disconnected: ... unreachable from ..."`` naming
        the start node and a few unreachable ones; or for an empty graph.
    """
    if len(G) == 0:
        raise TopologyError("topology is empty")
    start = next((n for n, kind in G.nodes(data="kind") if kind == "gpu"), next(iter(G)))
    reached = nx.node_connected_component(G, start)
    if len(reached) < len(G):
        missing = [n for n in G if n not in reached]
        example = ", ".join(map(repr, missing[:3])) + (", ..." if len(missing) > 3 else "")
        raise TopologyError(f"topology is disconnected: {len(missing)} of {len(G)} nodes "
                            f"unreachable from {start!r} ({example})")


def check_cluster(G: nx.Graph) -> None:
    """Check that ``G`` is a usable cluster.

    It must have at least one GPU, GPU ranks 0..N-1 without gaps or repeats, edges with
    ``bw_bytes_per_s > 0`` and ``latency_s >= 0``, and be connected.

    :raises TopologyError: naming the first problem found (node or edge included).
    """
    ranks = []
    for n, d in G.nodes(data=True):
        if d.get("kind") == "gpu":
            rank = d.get("rank")
            if isinstance(rank, bool) or not isinstance(rank, int):
                raise TopologyError(f"GPU {n!r} has no integer rank (got {rank!r})")
            ranks.append(rank)
    if not ranks:
        raise TopologyError("topology has no GPU")
    ranks.sort()
    if ranks != list(range(len(ranks))):
        bad = next(i for i, r in enumerate(ranks) if r != i)
        raise TopologyError(f"GPU ranks are not 0..{len(ranks) - 1} without gaps or repeats "
                            f"(position {bad} holds rank {ranks[bad]})")
    if not _edges_plainly_valid(G):
        _check_edges(G)
    check_connected(G)



def _edges_plainly_valid(G: nx.Graph) -> bool:
    """Whether every edge has an int or float ``bw_bytes_per_s > 0`` and ``latency_s >=
    0`` (their types checked by one ``map``, the values by numpy); False sends the graph
    to :func:`_check_edges`, which names the first problem (or passes an edge whose
    figures are, say, numpy floats)."""
    import numpy as np        # here: a topology refused by name loads no numpy (startup)

    # each edge's dict once per end, as the adjacency lists it; the two figures read by C
    # (an edge without one: _check_edges names it)
    data = [d for _, nbrs in G.adjacency() for d in nbrs.values()]
    try:
        bw = list(map(itemgetter("bw_bytes_per_s"), data))
        lat = list(map(itemgetter("latency_s"), data))
    except KeyError:
        return False
    plain = {int, float}
    if not set(map(type, bw)) <= plain or not set(map(type, lat)) <= plain:
        return False
    try:
        return bool((np.array(bw, float) > 0).all() and (np.array(lat, float) >= 0).all())
    except OverflowError:             # an int beyond a float's range: judged one by one
        return False


def _check_edges(G: nx.Graph) -> None:
    """Every edge from both ends (a plain walk of the adjacency is cheaper than G.edges'
    bookkeeping); the first bad one is met from its first node, as G.edges names it."""
    for u, nbrs in G.adjacency():
        for v, d in nbrs.items():
            bw, lat = d.get("bw_bytes_per_s"), d.get("latency_s")
            if not isinstance(bw, (int, float)) or not bw > 0:
                raise TopologyError(f"edge {u!r}-{v!r}: bw_bytes_per_s must be > 0, "
                                    f"got {bw!r}")
            if not isinstance(lat, (int, float)) or not lat >= 0:
                raise TopologyError(f"edge {u!r}-{v!r}: latency_s must be >= 0, got {lat!r}")
