"""Blast radius from the topology: which servers a failure takes out, what reroutes."""

from __future__ import annotations

from conftest import star_graph
from simulator.reliability.inventory import inventory
from simulator.topology.loader import load_topology, resolve_topology

AUTO = {}


def _superpod(nodes: int):
    return load_topology(resolve_topology("dgx-a100-superpod"), nodes=nodes)


def test_counts_on_a_two_group_superpod():
    # 40 DGX A100: 8 GPUs and 8 NICs each; 2 rail groups x 8 rails = 16 leaves, 8 spines;
    # cables: 320 NIC-leaf + 16 x 8 leaf-spine = 448.
    inv = inventory(_superpod(40), 320, AUTO)
    assert [len(inv[c]) for c in ("node", "gpu", "nic", "link", "leaf_switch",
                                  "spine_switch", "software")] == [40, 320, 320, 448, 16, 8, 1]


def test_leaf_takes_down_every_server_behind_it_and_spines_reroute():
    inv = inventory(_superpod(40), 320, AUTO)
    leaves = dict(zip(inv["leaf_switch"].names, inv["leaf_switch"].blasts))
    assert leaves["leaf.r3.g1"].lost == tuple(range(20, 40))
    assert leaves["leaf.r3.g1"].interrupts
    for b in inv["spine_switch"].blasts:     # 8 spines: none is an articulation point
        assert not b.lost and not b.interrupts and b.reroute == "spine switch"


def test_nic_cable_isolates_its_server_leaf_spine_cable_reroutes():
    inv = inventory(_superpod(40), 320, AUTO)
    links = dict(zip(inv["link"].names, inv["link"].blasts))
    nic = links["n7.nic2~leaf.r2.g0"]
    assert nic.lost == (7,) and nic.interrupts and nic.reroute is None
    up = links["leaf.r2.g0~spine.5"]
    assert up.lost == () and not up.interrupts and up.reroute == "link leaf-spine ib-hdr"
    forced = inventory(_superpod(40), 320, {"link": "interrupt"})["link"]
    assert dict(zip(forced.names, forced.blasts))["leaf.r2.g0~spine.5"].interrupts


def test_a_bridge_cuts_off_the_servers_behind_it():
    # Two leaves of 4 one-GPU servers under a single spine: each uplink is a bridge, so its
    # failure cuts the 4 servers of that leaf off (the larger piece keeps running).
    inv = inventory(star_graph(8, leaves=2, uplink_bw=1e9), 8, AUTO)
    links = dict(zip(inv["link"].names, inv["link"].blasts))
    cut = [b.lost for n, b in links.items() if "spine" in n]
    assert sorted(cut) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    # The single spine is an articulation point: losing it cuts one leaf's servers off.
    (spine,) = inventory(star_graph(8, leaves=2, uplink_bw=1e9), 8, AUTO)["spine_switch"].blasts
    assert len(spine.lost) == 4 and spine.interrupts


def test_only_the_jobs_servers_count():
    # 16 of 32 GPUs on 4 servers: components of servers 2 and 3 are not the job's.
    inv = inventory(_superpod(4), 16, AUTO)
    assert len(inv["node"]) == 2 and len(inv["gpu"]) == 16 and len(inv["nic"]) == 16


def test_degraded_fabric_is_slower_when_uplinks_are_the_bottleneck():
    # Leaf-spine at 4:1 oversubscription, 2 leaves of 4 servers: a 1 GiB all-reduce over all
    # 64 GPUs crosses the leaf uplinks; losing one of 16 uplinks (or a spine) leaves 15
    # equal paths, so the cross-leaf part runs at most 16/15 slower and never faster.
    import yaml

    from simulator.constants import load_constants
    from simulator.collectives.model import CollectiveModel
    from simulator.cluster import Cluster
    from simulator.collectives.run import run_collective
    from simulator.reliability.inventory import degraded_graph
    from simulator.topology.loader import topology_from_dict
    data = yaml.safe_load(resolve_topology("a100-roce-leaf-spine").read_text())
    data["params"]["oversubscription"] = 4.0
    G = topology_from_dict(data, nodes=8)
    k = load_constants()
    times = [run_collective(CollectiveModel(Cluster.from_graph(g, k), k), "all_reduce", 1 << 30,
                            list(range(64))).time_s
             for g in (G, degraded_graph(G, ("edge", "leaf.g0", "spine.0")),
                       degraded_graph(G, ("node", "spine.0")))]
    assert times[0] < times[1] <= times[0] * 16 / 15 * 1.001
    assert times[2] == times[1]
