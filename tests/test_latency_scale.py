"""The 8 B all_reduce across 2-32 servers: what grows and why (docs/collective-model.md,
"Latency across servers"). The tuner picks tree LL at every size; each doubling of servers
adds NCCL's own 2 x hwLat[NET][Tree][LL], in every release table; the ring, linear in the
rank count, is never the lower one."""

import pytest

from simulator.cluster import Cluster
from simulator.collectives.constants import load_constants
from simulator.collectives.layouts import make_communicator
from simulator.collectives.model import CollectiveModel
from simulator.collectives.nccl_config import NcclConfig
from simulator.topology import load_topology, resolve_topology

K = load_constants()
NODES = (2, 4, 8, 16, 32)


def _model(nodes, **nccl):
    G = load_topology(resolve_topology("dgx-a100-superpod"), nodes=nodes)
    return CollectiveModel(Cluster.from_graph(G, K), K, NcclConfig(**nccl))


@pytest.mark.parametrize("nccl", [{}, {"version": "2.19"}, {"version": "2.28"}])
def test_each_doubling_of_servers_adds_two_network_hops_of_the_tree(nccl):
    lat = []
    for nodes in NODES:
        m = _model(nodes, **nccl)
        ranks = list(range(m.cluster.n_gpus))
        plan = m.plan("all_reduce", 8, ranks)
        assert (plan.algo, plan.proto) == ("tree", "LL")
        comm = make_communicator(m.cluster, ranks)
        ring = m.latency_s("all_reduce", "ring", "LL", comm, "nvlink", 8)
        assert ring > plan.latency_s          # the tuner's choice is the lower one
        lat.append(plan.latency_s)
    hop = m.k.hop_latency_s["net"]["tree"]["LL"]
    assert hop == pytest.approx(5.0e-6)
    for a, b in zip(lat, lat[1:]):
        assert b - a == pytest.approx(2 * hop)
