"""SwitchRouter against networkx: same cheapest paths, in the same order."""

import random

import networkx as nx
import pytest

from simulator.routing import SwitchRouter


def _nx_paths(G, s, t, limit=64):
    """The paths networkx's predecessor map gives, enumerated as the router does."""
    pred, _ = nx.dijkstra_predecessor_and_distance(G, s, weight="cost")
    out, stack = [], [[t]]
    while stack and len(out) < limit:
        partial = stack.pop()
        if partial[-1] == s:
            out.append(partial[::-1])
            continue
        for p in reversed(pred[partial[-1]]):
            stack.append(partial + [p])
    return out


def _fat_tree(pods=4, leaves=3, spines=2, cores=2, seed=0, costs=(10,)):
    rng = random.Random(seed)
    G = nx.Graph()
    for c in range(cores):
        for p in range(pods):
            for s in range(spines):
                G.add_edge(f"core{c}", f"spine{p}.{s}", cost=rng.choice(costs))
    for p in range(pods):
        for s in range(spines):
            for leaf in range(leaves):
                G.add_edge(f"spine{p}.{s}", f"leaf{p}.{leaf}", cost=rng.choice(costs))
    return G


@pytest.mark.parametrize("costs", [(10,), (10, 20), (7, 10, 13)])
@pytest.mark.parametrize("seed", [0, 1])
def test_paths_equal_networkx_in_order(costs, seed):
    G = _fat_tree(seed=seed, costs=costs)
    r = SwitchRouter(G)
    names = list(G.nodes)
    for s in names:
        for t in names:
            if s != t:
                assert r.paths(s, t, 64) == _nx_paths(G, s, t), (s, t)
                assert sorted(r.paths(s, t, 64)) == sorted(
                    nx.all_shortest_paths(G, s, t, weight="cost"))


def test_two_tier_pairs_need_no_search():
    G = nx.complete_bipartite_graph(6, 3)
    nx.set_edge_attributes(G, 5, "cost")
    G = nx.relabel_nodes(G, {i: f"sw{i}" for i in G})
    r = SwitchRouter(G)
    assert r.paths("sw0", "sw1", 64) == [["sw0", m, "sw1"] for m in ("sw6", "sw7", "sw8")]
    assert r._preds == {}            # answered by the two-hop rule alone
    assert r.paths("sw0", "sw1", 2) == [["sw0", "sw6", "sw1"], ["sw0", "sw7", "sw1"]]


def test_a_cheaper_longer_path_beats_two_hops():
    G = nx.Graph()
    G.add_edge("a", "m", cost=10)
    G.add_edge("m", "b", cost=10)
    for x, y in (("a", "x"), ("x", "y"), ("y", "b")):
        G.add_edge(x, y, cost=3)
    r = SwitchRouter(G)
    assert r.paths("a", "b", 64) == [["a", "x", "y", "b"]] == _nx_paths(G, "a", "b")


def test_unreachable():
    G = nx.Graph()
    G.add_edge("a", "b", cost=1)
    G.add_edge("c", "d", cost=1)
    r = SwitchRouter(G)
    assert r.paths("a", "c", 64) == [] and r.paths("a", "b", 64) == [["a", "b"]]
    assert r.paths("a", "a", 64) == [["a"]]


def test_switch_paths_are_the_same_whatever_the_hash_seed():
    # the switch graph lists switches and neighbours in the topology's own order, not in
    # that of a set of names (which changes with PYTHONHASHSEED): the same ECMP path order
    import os
    import subprocess
    import sys

    code = ("from simulator.cluster import Cluster\n"
            "from simulator.topology import rail_optimized\n"
            "c = Cluster(rail_optimized(9, {'type': 'dgx_a100', 'gpu': 'A100-SXM4-80GB', "
            "'nics': 8, 'nic': 'ib-hdr'}, nodes_per_leaf=2, spines=4))\n"
            "print(c.routes.switch_paths('leaf.r0.g0', 'leaf.r0.g3'),"
            " list(c.routes.switch_graph.adj['spine.1']))\n")
    out = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
           for seed in (1, 2, 3)}
    assert len(out) == 1
    assert "['leaf.r0.g0', 'spine.0', 'leaf.r0.g3']" in out.pop()
