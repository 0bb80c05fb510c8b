"""Per-server columns of a cluster (simulator/collectives/columns.py) against the plain
look-ups they stand for, on a regular cluster, one of mixed designs and one lacking a link."""

import numpy as np
import pytest

from simulator.cluster import Cluster
from simulator.collectives import columns
from simulator.topology import dgx_a100_node, rail_optimized

DGX = {"type": "dgx_a100", "gpu": "A100-SXM4-80GB", "nics": 8, "nic": "ib-hdr"}


def mixed():
    G = dgx_a100_node(None, 0, nics=8)
    for server, nics in ((1, 2), (2, 8), (3, 2)):
        dgx_a100_node(G, server, nics=nics)
    return G


def lacking():
    G = rail_optimized(4, DGX, nodes_per_leaf=2, spines=2)
    G.remove_edge("n1.gpu5", "n1.nvswitch")
    return G


def by_server(cluster):
    """(design, prefix) of each server id, from its first GPU."""
    out = {}
    for server, gpus in cluster.gpus_by_server.items():
        d = cluster.G.nodes[gpus[0]]
        out[server] = (d.get("template", server), gpus[0][: -len(d["local"])])
    return out


@pytest.mark.parametrize("build", [lambda: rail_optimized(5, DGX, nodes_per_leaf=2,
                                                          spines=2), mixed, lacking])
def test_pair_columns_are_the_per_server_link_look_ups(build):
    cluster = Cluster(build())
    servers = by_server(cluster)
    for design in {d for d, _ in servers.values()}:
        locals_ = [cluster.G.nodes[n]["local"] for n in cluster.server_members(
            next(s for s, (d, _) in servers.items() if d == design))]
        for a in locals_:
            assert columns.node_column(cluster, design, a) == [
                p + a for d, p in servers.values() if d == design]
            for b in locals_:
                got = columns.pair_column(cluster, design, a, b)
                want = [cluster.link_id.get((p + a, p + b), -1) if d == design else -1
                        for s, (d, p) in sorted(servers.items())]
                assert got.tolist() == want


@pytest.mark.parametrize("build", [lambda: rail_optimized(5, DGX, nodes_per_leaf=2,
                                                          spines=2), mixed, lacking])
def test_nic_columns_are_each_nics_links_to_its_switch(build):
    cluster = Cluster(build())
    for server, (design, prefix) in by_server(cluster).items():
        for nic in cluster.nics_of_server(server):
            local = nic[len(prefix):]
            up, code = columns.nic_column(cluster, design, local, True)
            down, _ = columns.nic_column(cluster, design, local, False)
            switch = next((v for v in cluster.G.adj[nic]
                           if cluster.G.nodes[v]["kind"] == "switch"), None)
            if switch is None:          # no fabric: no column entry
                assert up[server] == down[server] == code[server] == -1
                continue
            assert columns.switches(cluster)[1][code[server]] == switch
            assert up[server] == cluster.link_id[(nic, switch)]
            assert down[server] == cluster.link_id[(switch, nic)]
