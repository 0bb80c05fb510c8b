"""Server builders: the wiring inside one host (GPUs, NVSwitch, PCIe switches, CPUs, NICs).

Each design is a *layout* (local node ids, node attributes and local edges, computed once)
that is *stamped* onto the graph for each server with ids prefixed ``n{server}.``. Multi-node
fabrics stamp the same layout many times, which keeps building thousands of GPUs fast.
See docs/topology-conventions.md for ids and attributes.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import networkx as nx

from simulator.errors import ConfigError
from simulator.hardware import link_spec
from simulator.topology.args import (check_choice, check_int, edge_attrs, gpu_arg, link_arg,
                                     prefixed)

DGX_NICS = (1, 2, 4, 8, 16)
DGX_GPUS = 8
DGX_PCIE_SWITCHES = 4


@dataclass(frozen=True)
class ServerLayout:
    """The local wiring of one server design.

    ``nodes`` holds ``(local_id, attrs)``, ``edges`` holds ``(local_u, local_v, attrs)``;
    ``nic`` is the link type of its network ports, ``template`` the design string.
    """

    template: str
    gpu: str
    gpus: int
    nics: int
    nic: str
    nodes: tuple
    edges: tuple


def dgx_a100_layout(gpu: str = "A100-SXM4-80GB", nics: int = 8,
                    nic: str = "ib-hdr", nic_pcie: list | None = None) -> ServerLayout:
    """Layout of a DGX/HGX A100-style 8-GPU server (see :func:`dgx_a100_node`).

    ``nic_pcie`` places NIC j on PCIe switch ``nic_pcie[j]`` instead of ``j*4//nics``: a
    degraded or unusual server whose NIC sits across the CPU socket from its GPUs (switches
    0-1 hang off cpu0, 2-3 off cpu1), so their traffic crosses the switch uplinks, both
    CPUs and the socket-to-socket link.

    :raises ConfigError: naming ``gpu`` (unknown or without NVLink), ``nics`` (not one of
        1, 2, 4, 8, 16), ``nic`` (unknown or not a network link type) or ``nic_pcie`` (not
        ``nics`` switch numbers 0-3).
    """
    spec = gpu_arg(gpu)
    if spec.scale_up_class == "infinity_fabric":
        raise ConfigError(f"{gpu!r} has no NVLink: its GPUs are joined by Infinity Fabric as a "
                          f"full mesh, without an NVSwitch; use the oam_mesh server type",
                          field="gpu")
    if spec.scale_up is None:
        raise ConfigError(f"{gpu!r} has no NVLink; use the pcie server type", field="gpu")
    check_choice(nics, "nics", DGX_NICS)
    link_arg(nic, "nic", "net")
    nvlink = edge_attrs(link_spec(spec.scale_up))
    places = _nic_places(nic_pcie, nics)
    nodes, edges = _eight_gpu_host(
        spec, nics, places, [("nvswitch", {"kind": "nvswitch", "local": "nvswitch"})],
        [(f"gpu{i}", "nvswitch", nvlink) for i in range(DGX_GPUS)])
    template = f"dgx_a100:gpu={gpu}:nics={nics}:nic={nic}"
    if nic_pcie is not None:
        template += ":nic_pcie=" + ",".join(map(str, places))
    return ServerLayout(template, gpu, DGX_GPUS, nics, nic, tuple(nodes), tuple(edges))


def _eight_gpu_host(spec, nics: int, places: list[int], fabric_nodes: list,
                    fabric_edges: list) -> tuple[list, list]:
    """Nodes and edges of an 8-GPU server: the GPUs, then the scale-up ``fabric_nodes``
    and ``fabric_edges`` (an NVSwitch, or a mesh's links), then the host side: GPU 2i and
    2i+1 on PCIe switch i, NIC j on switch ``places[j]``, switch i on cpu i//2, the two
    CPUs' socket link."""
    pcie = edge_attrs(link_spec(spec.pcie))
    nodes = [(f"gpu{i}", {"kind": "gpu", "local": f"gpu{i}", "index": i})
             for i in range(DGX_GPUS)]
    nodes += fabric_nodes + _indexed("pcie_switch", "pcie", DGX_PCIE_SWITCHES)
    nodes += _indexed("cpu", "cpu", 2) + _indexed("nic", "nic", nics)
    edges = list(fabric_edges)
    edges += [(f"gpu{i}", f"pcie{i // 2}", pcie) for i in range(DGX_GPUS)]
    # NIC j sits on switch j*4//nics: with 8 NICs each GPU has its own NIC on its switch.
    edges += [(f"nic{j}", f"pcie{places[j]}", pcie) for j in range(nics)]
    edges += [(f"pcie{i}", f"cpu{i // 2}", pcie) for i in range(DGX_PCIE_SWITCHES)]
    edges.append(("cpu0", "cpu1", edge_attrs(link_spec("xgmi"))))
    return nodes, edges


def _nic_places(nic_pcie: Any, nics: int) -> list[int]:
    """The PCIe switch of each NIC: ``nic_pcie`` checked, or the default ``j*4//nics``."""
    if nic_pcie is None:
        return [j * DGX_PCIE_SWITCHES // nics for j in range(nics)]
    if not isinstance(nic_pcie, list) or len(nic_pcie) != nics:
        raise ConfigError(f"must list one PCIe switch (0-{DGX_PCIE_SWITCHES - 1}) per NIC, "
                          f"{nics} in all, got {nic_pcie!r}", field="nic_pcie")
    for j, place in enumerate(nic_pcie):
        check_int(place, f"nic_pcie[{j}]", 0, DGX_PCIE_SWITCHES - 1)
    return list(nic_pcie)


def pcie_layout(gpu: str = "A100-PCIE-40GB", gpus: int = 4, nics: int = 1,
                nic: str = "roce-100", gpus_per_pcie_switch: int = 2) -> ServerLayout:
    """Layout of a PCIe-only server (see :func:`pcie_node`).

    :raises ConfigError: naming ``gpu``, ``gpus`` (not 1..8), ``nics`` (not 1..16), ``nic`` or
        ``gpus_per_pcie_switch`` (< 1).
    """
    spec = gpu_arg(gpu)
    check_int(gpus, "gpus", 1, 8)
    check_int(nics, "nics", 1, 16)
    link_arg(nic, "nic", "net")
    check_int(gpus_per_pcie_switch, "gpus_per_pcie_switch", 1)
    switches = -(-gpus // gpus_per_pcie_switch)
    cpus = 1 if switches == 1 else 2
    pcie = edge_attrs(link_spec(spec.pcie))
    nodes = [(f"gpu{i}", {"kind": "gpu", "local": f"gpu{i}", "index": i}) for i in range(gpus)]
    nodes += _indexed("pcie_switch", "pcie", switches)
    nodes += _indexed("cpu", "cpu", cpus) + _indexed("nic", "nic", nics)
    edges = [(f"gpu{i}", f"pcie{i // gpus_per_pcie_switch}", pcie) for i in range(gpus)]
    edges += [(f"nic{j}", f"pcie{j % switches}", pcie) for j in range(nics)]
    edges += [(f"pcie{i}", f"cpu{i * cpus // switches}", pcie) for i in range(switches)]
    if cpus == 2:
        edges.append(("cpu0", "cpu1", edge_attrs(link_spec("xgmi"))))
    template = (f"pcie:gpu={gpu}:gpus={gpus}:nics={nics}:nic={nic}"
                f":gpus_per_pcie_switch={gpus_per_pcie_switch}")
    return ServerLayout(template, gpu, gpus, nics, nic, tuple(nodes), tuple(edges))


def oam_mesh_layout(gpu: str = "MI300X", nics: int = 8, nic: str = "roce-400") -> ServerLayout:
    """Layout of an 8-GPU OAM platform whose GPUs are joined by Infinity Fabric as a full
    mesh (see :func:`oam_mesh_node`).

    :raises ConfigError: naming ``gpu`` (unknown, or its scale-up link is not Infinity
        Fabric), ``nics`` (not one of 1, 2, 4, 8, 16) or ``nic``.
    """
    spec = gpu_arg(gpu)
    if spec.scale_up_class != "infinity_fabric":
        raise ConfigError(f"{gpu!r} has no Infinity Fabric links to mesh; use the dgx_a100 "
                          f"(NVSwitch) or pcie server type", field="gpu")
    check_choice(nics, "nics", DGX_NICS)
    link_arg(nic, "nic", "net")
    mesh = edge_attrs(link_spec(spec.scale_up))
    # each GPU one Infinity Fabric link to each of the 7 others: 28 links, no switch
    nodes, edges = _eight_gpu_host(spec, nics, _nic_places(None, nics), [],
                                   [(f"gpu{i}", f"gpu{j}", mesh) for i in range(DGX_GPUS)
                                    for j in range(i + 1, DGX_GPUS)])
    template = f"oam_mesh:gpu={gpu}:nics={nics}:nic={nic}"
    return ServerLayout(template, gpu, DGX_GPUS, nics, nic, tuple(nodes), tuple(edges))


SERVER_TYPES: dict[str, Callable[..., ServerLayout]] = {
    "dgx_a100": dgx_a100_layout,
    "pcie": pcie_layout,
    "oam_mesh": oam_mesh_layout,
}


def server_layout(node: Any) -> ServerLayout:
    """Layout from a fabric's ``node`` dict: ``type`` plus the builder's keyword arguments.

    :raises ConfigError: with field ``node.<key>`` for a non-mapping, a missing or unknown
        ``type``, an unknown key or a bad value.
    """
    if not isinstance(node, Mapping):
        raise ConfigError(f"must be a mapping with a 'type' key, got {node!r}", field="node")
    kwargs = dict(node)
    kind = kwargs.pop("type", None)
    if not isinstance(kind, str) or kind not in SERVER_TYPES:
        raise ConfigError(f"must be one of {', '.join(SERVER_TYPES)}, got {kind!r}",
                          field="node.type")
    build = SERVER_TYPES[kind]
    valid = list(inspect.signature(build).parameters)
    unknown = [k for k in kwargs if k not in valid]
    if unknown:
        raise ConfigError(f"unknown parameter(s) {', '.join(map(repr, unknown))} for type "
                          f"{kind!r}; valid: {', '.join(valid)}", field=f"node.{unknown[0]}")
    try:
        return build(**kwargs)
    except ConfigError as exc:
        raise prefixed(exc, "node") from None


def stamp(G: nx.Graph, layout: ServerLayout, server: int) -> None:
    """Add one server of ``layout`` to ``G`` as ``n{server}.*`` (no checks; see add_server)."""
    p = f"n{server}."
    base = {"server": server, "template": layout.template}
    rank0 = server * layout.gpus
    G.add_nodes_from(
        (p + local, {**attrs, **base, "rank": rank0 + attrs["index"]} if attrs["kind"] == "gpu"
         else {**attrs, **base})
        for local, attrs in layout.nodes)
    G.add_edges_from((p + u, p + v, attrs) for u, v, attrs in layout.edges)


def add_server(G: nx.Graph | None, layout: ServerLayout, server: int, name: str) -> nx.Graph:
    """Stamp ``layout`` as server ``server`` onto ``G`` (a new graph if None) and return it.

    Graph attributes are set on a new graph; on an existing one ``nodes`` grows to cover
    ``server``, and its ``gpu``/``gpus_per_node`` must match the layout.

    :raises ConfigError: naming ``server`` (negative, or already in G) or ``gpu`` (mixed models).
    """
    check_int(server, "server", 0)
    G = nx.Graph() if G is None else G
    wanted = {"gpu": layout.gpu, "gpus_per_node": layout.gpus}
    for key, value in wanted.items():
        if G.graph.get(key, value) != value:
            raise ConfigError(f"graph already has {key}={G.graph[key]!r}, got {value!r}",
                              field="gpu")
    if f"n{server}.gpu0" in G:
        raise ConfigError(f"server {server} is already in the graph", field="server")
    G.graph.update({"name": G.graph.get("name", name), **wanted})
    G.graph["nodes"] = max(G.graph.get("nodes", 0), server + 1)
    stamp(G, layout, server)
    return G


def dgx_a100_node(G: nx.Graph | None = None, server: int = 0, gpu: str = "A100-SXM4-80GB",
                  nics: int = 8, nic: str = "ib-hdr", nic_pcie: list | None = None) -> nx.Graph:
    """Add one DGX A100 server (8 NVSwitch-connected GPUs) to ``G`` and return ``G``.

    Parameters
    ----------
    G : networkx.Graph, optional
        Graph to add to; a new one when None.
    server : int
        Server number (>= 0); node ids are ``n{server}.*``, ranks ``server*8 + index``.
    gpu : str
        GPU model with NVLink (``A100-SXM4-40GB``, ``A100-SXM4-80GB``, ``H100-SXM``,
        ``H200-SXM``); its
        ``nvlink`` type wires GPU-NVSwitch edges and its ``pcie`` type the PCIe tree.
    nics : int
        Compute NICs: 1, 2, 4, 8 (DGX A100: one per GPU) or 16 (two per GPU, as OCI BM.GPU4.8).
        NIC j sits on PCIe switch ``j*4//nics``, or ``nic_pcie[j]`` when given.
    nic : str
        Network link type of the NICs (``ib-hdr``, ``roce-100``, ...).

    Wiring: GPU 2i and 2i+1 on PCIe switch i (4 switches), switch i on cpu i//2, cpu0-cpu1
    xgmi, every GPU one edge to the ``nvswitch`` node.

    Raises
    ------
    ConfigError
        Naming the bad argument (``gpu``, ``nics``, ``nic``, ``server``).
    """
    return add_server(G, dgx_a100_layout(gpu, nics, nic, nic_pcie), server, "dgx_a100")


def oam_mesh_node(G: nx.Graph | None = None, server: int = 0, gpu: str = "MI300X",
                  nics: int = 8, nic: str = "roce-400") -> nx.Graph:
    """Add one 8-GPU OAM platform (AMD Instinct MI300X/MI325X/MI350X/MI355X) to ``G``.

    Parameters
    ----------
    G : networkx.Graph, optional
        Graph to add to; a new one when None.
    server : int
        Server number (>= 0); node ids ``n{server}.*``, ranks ``server*8 + index``.
    gpu : str
        GPU model whose ``scale_up`` link is of class ``infinity_fabric``.
    nics : int
        Compute NICs: 1, 2, 4, 8 (one 400G NIC per GPU on AMD's reference platforms) or 16.
    nic : str
        Network link type of the NICs (``roce-400``, ``ib-ndr``...).

    Wiring: every pair of GPUs one direct Infinity Fabric edge (a full mesh of 28 links, each
    GPU 7 links, no switch: AMD's MI300X platform); GPU 2i and 2i+1 and NIC j (j*4//nics)
    on PCIe switch i, switch i on cpu i//2, cpu0-cpu1 the socket link, as the DGX layout.

    Raises
    ------
    ConfigError
        Naming the bad argument (``gpu``, ``nics``, ``nic``, ``server``).
    """
    return add_server(G, oam_mesh_layout(gpu, nics, nic), server, "oam_mesh")


def pcie_node(G: nx.Graph | None = None, server: int = 0, gpu: str = "A100-PCIE-40GB",
              gpus: int = 4, nics: int = 1, nic: str = "roce-100",
              gpus_per_pcie_switch: int = 2) -> nx.Graph:
    """Add one PCIe-only GPU server (no NVLink) to ``G`` and return ``G``.

    Parameters
    ----------
    G : networkx.Graph, optional
        Graph to add to; a new one when None.
    server : int
        Server number (>= 0).
    gpu : str
        GPU model; its NVLink, if any, is not modelled here.
    gpus : int
        GPUs in the server, 1 to 8; GPU i sits on PCIe switch ``i // gpus_per_pcie_switch``.
    nics : int
        NICs shared by the GPUs, 1 to 16, on the PCIe switches round-robin (NIC j on ``j % S``).
    nic : str
        Network link type of the NICs.
    gpus_per_pcie_switch : int
        GPUs per PCIe switch (>= 1). The first half of the switches hang off cpu0 and the rest
        off cpu1 (one CPU when there is a single switch); cpu0-cpu1 is an xgmi edge.

    Raises
    ------
    ConfigError
        Naming the bad argument.
    """
    layout = pcie_layout(gpu, gpus, nics, nic, gpus_per_pcie_switch)
    return add_server(G, layout, server, "pcie")


def _indexed(kind: str, prefix: str, count: int) -> list:
    return [(f"{prefix}{i}", {"kind": kind, "local": f"{prefix}{i}", "index": i})
            for i in range(count)]
