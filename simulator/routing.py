"""Shortest paths on the switch-only graph, on integer indices.

networkx's Dijkstra calls a weight function and does several dictionary look-ups per edge;
on a fabric of thousands of GPUs (about a thousand switches) routing needs one search per
source switch, and those searches dominated a step's simulation. :class:`SwitchRouter`
does the same search on
adjacency lists of integers, visiting neighbours in the graph's own order and breaking
heap ties by push order exactly as ``networkx.dijkstra_predecessor_and_distance`` does, so
the predecessor lists, and therefore the ECMP paths and their order, are identical.

Two-hop shortcut: when ``src`` and ``dst`` are not adjacent and their cheapest common
neighbours give a path of exactly twice the cheapest link cost in the graph, no other path
can be as cheap (any path has at least two links), so the cheapest paths are exactly those
two-hop ones. They are listed in ``src``'s adjacency order, the order in which a Dijkstra
from ``src`` settles them (all at the same distance, pushed when ``src`` is settled). In a
two-tier leaf-spine fabric every leaf pair is such a pair and no search runs at all.
"""

from __future__ import annotations

from heapq import heappop, heappush

import networkx as nx


class SwitchRouter:
    """Equal-cost predecessor lists from each source, cached per source."""

    def __init__(self, G: nx.Graph, weight: str = "cost"):
        self.names = list(G.nodes)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.adj = [[(self.index[u], int(d[weight])) for u, d in G.adj[n].items()]
                    for n in self.names]
        self.nbr = [dict(a) for a in self.adj]
        self.min_cost = min((c for a in self.adj for _, c in a), default=0)
        self._preds: dict[int, list[list[int]]] = {}

    def predecessors(self, src: str) -> list[list[int]]:
        """For every node index, the indices of its predecessors on cheapest paths from
        ``src`` (empty for ``src`` and for unreachable nodes)."""
        s = self.index[src]
        pred = self._preds.get(s)
        if pred is None:
            pred = self._preds[s] = self._dijkstra(s)
        return pred

    def _dijkstra(self, s: int) -> list[list[int]]:
        n = len(self.names)
        done = [False] * n
        dist = [0] * n
        seen = [-1] * n
        pred: list[list[int]] = [[] for _ in range(n)]
        seen[s] = 0
        fringe = [(0, 0, s)]
        pushes = 1
        adj = self.adj
        while fringe:
            d, _, v = heappop(fringe)
            if done[v]:
                continue
            done[v] = True
            dist[v] = d
            for u, cost in adj[v]:
                vu = d + cost
                if done[u]:
                    if vu == dist[u]:
                        pred[u].append(v)
                elif seen[u] < 0 or vu < seen[u]:
                    seen[u] = vu
                    heappush(fringe, (vu, pushes, u))
                    pushes += 1
                    pred[u] = [v]
                elif vu == seen[u]:
                    pred[u].append(v)
        return pred

    def _two_hop(self, s: int, t: int) -> list[int] | None:
        """The middle nodes of the cheapest paths if they are all two-hop, else None."""
        if s == t or t in self.nbr[s]:
            return None
        to_t = self.nbr[t]
        mids = [(c + to_t[x], x) for x, c in self.adj[s] if x in to_t]
        if not mids:
            return None
        best = min(c for c, _ in mids)
        if best != 2 * self.min_cost:
            return None
        return [x for c, x in mids if c == best]

    def paths(self, src: str, dst: str, limit: int) -> list[list[str]]:
        """All cheapest paths ``src`` -> ``dst`` (at most ``limit``), in the order the
        predecessor lists give (the same order as from networkx's predecessor map); none
        where ``dst`` cannot be reached."""
        mids = self._two_hop(self.index[src], self.index[dst])
        if mids is not None:
            return [[src, self.names[x], dst] for x in mids[:limit]]
        pred = self.predecessors(src)
        s, names = self.index[src], self.names
        out: list[list[str]] = []
        stack = [[self.index[dst]]]
        while stack and len(out) < limit:
            partial = stack.pop()
            head = partial[-1]
            if head == s:
                out.append([names[i] for i in reversed(partial)])
                continue
            for p in reversed(pred[head]):
                stack.append(partial + [p])
        return out
