"""Multi-node fabrics: servers from one ``node`` design joined by a switched network.

Every fabric takes ``nodes`` (server count) and ``node`` (a dict: ``type`` -- ``"dgx_a100"``
or ``"pcie"`` -- plus that builder's keyword arguments), builds servers 0..nodes-1 and wires
their NICs. Several parallel cables between a leaf and a spine are one aggregated edge.

Uplink sizing: a leaf's uplink bandwidth is its downlink ports' total bandwidth divided by
``oversubscription``, split equally over the spines. The leaf is sized for ``nodes_per_leaf``
servers even when fewer are attached (a partly filled last leaf keeps its full uplinks).
Spines are built even with a single leaf, where no traffic needs them: oversubscription then
changes nothing, since it only limits traffic between leaves.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from simulator.hardware import LinkSpec, link_spec
from simulator.topology.args import (MAX_SPINES, check_int, check_nodes, check_positive,
                                     check_switch_links, edge_attrs, link_arg)
from simulator.topology.checks import check_cluster
from simulator.topology.servers import ServerLayout, server_layout
from simulator.topology.stamping import add_links, stamp_servers


def single_switch(nodes: int, node: dict[str, Any]) -> nx.Graph:
    """Cluster whose NICs all plug into one switch ``switch`` (tier ``"single"``).

    Parameters
    ----------
    nodes : int
        Number of servers (>= 1).
    node : dict
        Server design: ``type`` plus the builder's keyword arguments.

    Returns
    -------
    networkx.Graph
        NIC-switch edges have the NIC's link type and bandwidth.

    Raises
    ------
    ConfigError
        Naming ``nodes`` or ``node.<key>``.
    TopologyError
        If the result fails :func:`check_cluster`.
    """
    check_nodes(nodes)
    layout = server_layout(node)
    G = _servers("single_switch", nodes, layout)
    G.add_node("switch", kind="switch", tier="single")
    nic = edge_attrs(link_spec(layout.nic))
    add_links(G, ((f"n{s}.nic{j}", "switch") for s in range(nodes)
                  for j in range(layout.nics)), nic)
    check_cluster(G)
    return G


def leaf_spine(nodes: int, node: dict[str, Any], nodes_per_leaf: int = 16,
               spines: int | None = None, oversubscription: float = 1.0,
               uplink: str | None = None) -> nx.Graph:
    """Two-tier Clos: all NICs of server s on leaf ``leaf.g{s // nodes_per_leaf}``.

    Parameters
    ----------
    nodes : int
        Number of servers (>= 1).
    node : dict
        Server design: ``type`` plus the builder's keyword arguments.
    nodes_per_leaf : int
        Servers per leaf (>= 1); there are ``ceil(nodes / nodes_per_leaf)`` leaves.
    spines : int, optional
        Spine switches ``spine.{i}`` (>= 1); default the NICs per server.
    oversubscription : float
        Leaf downlink / uplink bandwidth ratio (> 0). Each leaf's uplink total is
        ``nodes_per_leaf * nics * nic_bw / oversubscription`` bytes/s, one edge per spine.
    uplink : str, optional
        Network link type of the leaf-spine cables (latency, class); default the NIC's type.

    Raises
    ------
    ConfigError
        Naming the bad argument (``nodes``, ``node.<key>``, ``nodes_per_leaf``, ``spines``,
        ``oversubscription``, ``uplink``).
    TopologyError
        If the result fails :func:`check_cluster`.
    """
    layout, spines, up = _fabric_args(nodes, node, nodes_per_leaf, spines, oversubscription,
                                      uplink)
    check_switch_links(-(-nodes // nodes_per_leaf), spines)
    G = _servers("leaf_spine", nodes, layout)
    leaves = [f"leaf.g{k}" for k in range(-(-nodes // nodes_per_leaf))]
    G.add_nodes_from(leaves, kind="switch", tier="leaf")
    nic = edge_attrs(link_spec(layout.nic))
    add_links(G, ((f"n{s}.nic{j}", f"leaf.g{s // nodes_per_leaf}")
                  for s in range(nodes) for j in range(layout.nics)), nic)
    downlink = nodes_per_leaf * layout.nics * link_spec(layout.nic).bw_bytes_per_s
    _add_spines(G, leaves, spines, downlink / oversubscription, up)
    check_cluster(G)
    return G


def rail_optimized(nodes: int, node: dict[str, Any], nodes_per_leaf: int = 20,
                   spines: int | None = None, oversubscription: float = 1.0,
                   uplink: str | None = None) -> nx.Graph:
    """Rail-optimized Clos: NIC j of server s on leaf ``leaf.r{j}.g{s // nodes_per_leaf}``.

    One leaf per rail (NIC index) per group of ``nodes_per_leaf`` servers, as in the DGX
    SuperPOD scalable unit; leaves carry ``rail=j``. Every leaf connects to every spine.

    Parameters
    ----------
    nodes : int
        Number of servers (>= 1).
    node : dict
        Server design: ``type`` plus the builder's keyword arguments.
    nodes_per_leaf : int
        Servers per group, i.e. downlinks per rail leaf (>= 1).
    spines : int, optional
        Spine switches ``spine.{i}`` (>= 1); default the NICs per server.
    oversubscription : float
        Leaf downlink / uplink ratio (> 0): each leaf's uplink total is
        ``nodes_per_leaf * nic_bw / oversubscription`` bytes/s, one edge per spine.
    uplink : str, optional
        Network link type of the leaf-spine cables; default the NIC's type.

    Raises
    ------
    ConfigError
        Naming the bad argument.
    TopologyError
        If the result fails :func:`check_cluster`.
    """
    layout, spines, up = _fabric_args(nodes, node, nodes_per_leaf, spines, oversubscription,
                                      uplink)
    check_switch_links(-(-nodes // nodes_per_leaf) * layout.nics, spines)
    G = _servers("rail_optimized", nodes, layout)
    groups, rails = range(-(-nodes // nodes_per_leaf)), range(layout.nics)
    G.add_nodes_from((f"leaf.r{j}.g{k}", {"kind": "switch", "tier": "leaf", "rail": j})
                     for k in groups for j in rails)
    nic = edge_attrs(link_spec(layout.nic))
    add_links(G, ((f"n{s}.nic{j}", f"leaf.r{j}.g{s // nodes_per_leaf}")
                  for s in range(nodes) for j in rails), nic)
    leaves = [f"leaf.r{j}.g{k}" for k in groups for j in rails]
    downlink = nodes_per_leaf * link_spec(layout.nic).bw_bytes_per_s
    _add_spines(G, leaves, spines, downlink / oversubscription, up)
    check_cluster(G)
    return G


def _fabric_args(nodes, node, nodes_per_leaf, spines, oversubscription,
                 uplink) -> tuple[ServerLayout, int, LinkSpec]:
    """Check the shared leaf/spine arguments; return the layout, spine count, uplink type."""
    check_nodes(nodes)
    layout = server_layout(node)
    check_int(nodes_per_leaf, "nodes_per_leaf", 1)
    spines = (max(layout.nics, 1) if spines is None
              else check_int(spines, "spines", 1, MAX_SPINES))
    check_positive(oversubscription, "oversubscription")
    up = link_arg(layout.nic if uplink is None else uplink, "uplink", "net")
    return layout, spines, up


def _servers(name: str, nodes: int, layout: ServerLayout) -> nx.Graph:
    G = nx.Graph(name=name, gpu=layout.gpu, gpus_per_node=layout.gpus, nodes=nodes)
    stamp_servers(G, layout, nodes)
    return G


def _add_spines(G: nx.Graph, leaves: list[str], spines: int, uplink_bytes_per_s: float,
                up: LinkSpec) -> None:
    """Add ``spine.{i}`` and one edge per leaf-spine pair carrying ``uplink/spines`` bytes/s."""
    G.add_nodes_from((f"spine.{i}" for i in range(spines)), kind="switch", tier="spine")
    attrs = edge_attrs(up, uplink_bytes_per_s / spines)
    add_links(G, ((leaf, f"spine.{i}") for leaf in leaves for i in range(spines)), attrs)
