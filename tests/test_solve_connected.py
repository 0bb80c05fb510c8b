"""The flow fabric's split of active flows into sets that share no link
(simulator.network.solve.connected), against a brute force written here: the connected
components of the graph whose edges join every two flows that cross a link in common."""

import random

import networkx as nx

from simulator.network.solve import connected


def _brute_force(footprints: list) -> list[list[int]]:
    g = nx.Graph()
    g.add_nodes_from(range(len(footprints)))
    for i, a in enumerate(footprints):
        for j in range(i + 1, len(footprints)):
            if a & footprints[j]:
                g.add_edge(i, j)
    # each set in index order, the sets by their first index
    return sorted((sorted(c) for c in nx.connected_components(g)), key=lambda c: c[0])


def test_sets_are_the_components_of_flows_sharing_links():
    rng = random.Random(7)
    for _ in range(2000):
        links = rng.randint(1, 60)
        footprints = [frozenset(rng.sample(range(links), rng.randint(0, min(5, links))))
                      for _ in range(rng.randint(0, 40))]
        assert connected(footprints) == _brute_force(footprints)


def test_a_chain_joins_sets_found_apart_and_a_flow_crossing_nothing_is_alone():
    # flows 0 and 2 share nothing until flow 3 crosses a link of each
    footprints = [frozenset({1}), frozenset(), frozenset({5}), frozenset({1, 5}),
                  frozenset({9})]
    assert connected(footprints) == [[0, 2, 3], [1], [4]]
