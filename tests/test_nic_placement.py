"""`node.nic_pcie` of the dgx_a100 server type: NIC j on PCIe switch nic_pcie[j], e.g. a
NIC across the CPU socket from the GPUs that use it (switches 0-1 on cpu0, 2-3 on cpu1)."""

from __future__ import annotations

import pytest

from simulator.cluster import Cluster
from simulator.errors import ConfigError
from simulator.topology.servers import dgx_a100_layout


def _nic_switch(layout) -> dict[str, str]:
    return {u: v for u, v, _ in layout.edges if u.startswith("nic")}


def test_default_places_nic_j_on_switch_j_times_4_over_nics_and_keeps_the_template():
    layout = dgx_a100_layout(nics=2)
    assert _nic_switch(layout) == {"nic0": "pcie0", "nic1": "pcie2"}      # 0*4//2, 1*4//2
    assert layout.template == "dgx_a100:gpu=A100-SXM4-80GB:nics=2:nic=ib-hdr"


def test_nic_pcie_moves_each_nic_and_names_the_design():
    layout = dgx_a100_layout(nics=2, nic_pcie=[3, 1])
    assert _nic_switch(layout) == {"nic0": "pcie3", "nic1": "pcie1"}
    assert layout.template.endswith(":nic_pcie=3,1")    # its own server design (route cache)


@pytest.mark.parametrize("bad, field", [([0], "nic_pcie"), ("0,1", "nic_pcie"),
                                        ([0, 4], "nic_pcie[1]"), ([0, True], "nic_pcie[1]")])
def test_bad_placements_name_the_field(bad, field):
    with pytest.raises(ConfigError) as info:
        dgx_a100_layout(nics=2, nic_pcie=bad)
    assert info.value.field == field


def test_a_nic_across_the_socket_is_reached_over_nvlink_as_pxn_does():
    # every NIC on the other socket's switches: GPU 0 (pcie0, cpu0) takes NVLink to the GPU
    # on its NIC's switch, not pcie0 -> cpu0 -> xgmi -> cpu1 (NCCL's PXN, 2.12 and later)
    from simulator.topology import topology_from_dict
    G = topology_from_dict({"name": "x", "generator": "leaf_spine", "params": {
        "nodes": 2, "nodes_per_leaf": 2,
        "node": {"type": "dgx_a100", "nics": 8, "nic_pcie": [2, 2, 2, 2, 3, 3, 3, 3]}}})
    cluster = Cluster.from_graph(G)
    nics = cluster.routes.nearest_nics("n0.gpu0")
    assert all(G.has_edge(n, "n0.pcie2") or G.has_edge(n, "n0.pcie3") for n in nics)
    route = cluster.route("n0.gpu0", nics[0])
    crossed = {cluster.link_type[i] for i in route.links}
    assert "xgmi" not in crossed and any(t.startswith("nvlink") for t in crossed)
