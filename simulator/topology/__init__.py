"""Cluster topologies: generator functions, checks and the YAML loader.

See docs/topology-conventions.md for the graph every generator returns.
"""

from simulator.topology.checks import check_cluster, check_connected
from simulator.topology.fabrics import leaf_spine, rail_optimized, single_switch
from simulator.topology.generators import GENERATORS, MULTI_NODE
from simulator.topology.servers import dgx_a100_node, pcie_node
from simulator.topology.loader import (load_topology, resolve_topology, shipped_topologies,
                                       topology_from_dict)

__all__ = [
    "GENERATORS", "MULTI_NODE", "check_cluster", "check_connected", "dgx_a100_node",
    "leaf_spine", "load_topology", "pcie_node", "rail_optimized", "resolve_topology",
    "shipped_topologies", "single_switch", "topology_from_dict",
]
