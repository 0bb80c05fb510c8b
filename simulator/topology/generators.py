"""Topology generators: plain functions returning a ``networkx.Graph``.

They follow docs/topology-conventions.md. Server builders (``dgx_a100_node``, ``pcie_node``)
add one host to a graph; fabrics (``single_switch``, ``leaf_spine``, ``rail_optimized``)
build ``nodes`` servers and the network between them, then run :func:`check_cluster`.
``GENERATORS`` names them all for YAML files, each with when to use it.
"""

from __future__ import annotations

import inspect
from typing import Callable

import networkx as nx

from simulator.topology.fabrics import leaf_spine, rail_optimized, single_switch
from simulator.topology.servers import dgx_a100_node, oam_mesh_node, pcie_node
from simulator.topology.systems import superpod

GENERATORS: dict[str, tuple[Callable[..., nx.Graph], str]] = {
    "dgx_a100_node": (dgx_a100_node,
                      "one 8-GPU NVSwitch server (DGX/HGX A100 or H100): intra-node studies"),
    "oam_mesh_node": (oam_mesh_node,
                      "one 8-GPU AMD Instinct OAM platform: Infinity Fabric full mesh, no "
                      "switch (MI300X, MI325X, MI350X, MI355X)"),
    "pcie_node": (pcie_node,
                  "one PCIe-only server (no NVLink): GPUs talk through PCIe switches and CPUs"),
    "single_switch": (single_switch,
                      "a few servers on one switch: small clusters, no fabric contention"),
    "leaf_spine": (leaf_spine,
                   "a two-tier Clos with a server's NICs on one leaf: typical Ethernet/RoCE "
                   "or cloud fabric, with oversubscription between leaves"),
    "rail_optimized": (rail_optimized,
                       "a two-tier Clos with NIC j of every server on rail leaf j: DGX "
                       "SuperPOD-style InfiniBand clusters"),
    "superpod": (superpod,
                 "rail_optimized with SHARP-capable InfiniBand switches (sharp: true): DGX "
                 "H100/B200 SuperPODs, where NCCL's CollNet can reduce in the network"),
}

# Generators that build a whole cluster of ``nodes`` servers (``--nodes`` applies to them).
MULTI_NODE = tuple(name for name, (f, _) in GENERATORS.items()
                   if "nodes" in inspect.signature(f).parameters)

__all__ = ["GENERATORS", "MULTI_NODE"]
