"""Generators of current NVIDIA systems that the A100-era builders cannot describe.

* ``nvl_rack`` server type: a rack-scale NVLink domain (GB200 NVL72: 72 GPUs on NVLink
  Switch trays, one Grace CPU per two GPUs, one NIC per GPU), stamped like any server so
  the leaf-spine and rail-optimized fabrics join racks. Its GPU count is checked against the
  most GPUs the GPU's NVLink generation joins in one domain (``max_domain_gpus``).
* ``superpod``: a rail-optimized InfiniBand fat tree whose switches can reduce in the
  network (SHARP, graph attribute ``sharp``), as the DGX H100/B200 SuperPOD's Quantum-2
  fabric; ``rail_optimized`` itself makes no such claim.

Conventions as in docs/topology-conventions.md; the rack's GPUs form one "server" because
NCCL treats one NVLink domain as the intra-node level (its rings and NVLS stay in it).
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from simulator.errors import ConfigError
from simulator.hardware import link_spec
from simulator.topology.args import check_int, edge_attrs, gpu_arg, link_arg
from simulator.topology.fabrics import rail_optimized
from simulator.topology.servers import SERVER_TYPES, ServerLayout, server_layout


def check_nvlink_domain(gpu: str, gpus: int, field: str = "gpus") -> None:
    """Refuse ``gpus`` GPUs of model ``gpu`` in one NVLink domain when its NVLink
    generation's switches join fewer (``max_domain_gpus`` in links.yaml).

    :raises ConfigError: naming ``field``; or ``gpu`` for a GPU without NVLink.
    """
    spec = gpu_arg(gpu)
    if spec.scale_up_class != "nvlink":
        raise ConfigError(f"{gpu!r} has no NVLink, so it cannot form an NVLink domain",
                          field="gpu")
    limit = link_spec(spec.scale_up).max_domain_gpus
    if limit is not None and gpus > limit:
        raise ConfigError(f"{gpus} GPUs in one NVLink domain, but {spec.scale_up} switches "
                          f"join at most {limit}", field=field)


def nvl_rack_layout(gpu: str = "GB200", gpus: int = 72, nic: str = "ib-ndr") -> ServerLayout:
    """Layout of one rack-scale NVLink domain (see module docstring).

    GPU i: one NVLink edge to ``nvswitch`` (the rack's switch trays as one node), one host
    edge (its PCIe type) to PCIe switch i, which holds NIC i and hangs off Grace CPU i // 2.

    :raises ConfigError: naming ``gpu``, ``gpus`` (not even, or over the NVLink domain
        limit) or ``nic``.
    """
    spec = gpu_arg(gpu)
    check_int(gpus, "gpus", 2)
    if gpus % 2:
        raise ConfigError(f"must be even (one Grace CPU per two GPUs), got {gpus}",
                          field="gpus")
    check_nvlink_domain(gpu, gpus)
    link_arg(nic, "nic", "net")
    nvlink, host = edge_attrs(link_spec(spec.scale_up)), edge_attrs(link_spec(spec.pcie))
    nodes = [(f"gpu{i}", {"kind": "gpu", "local": f"gpu{i}", "index": i}) for i in range(gpus)]
    nodes.append(("nvswitch", {"kind": "nvswitch", "local": "nvswitch"}))
    for kind, prefix, count in (("pcie_switch", "pcie", gpus), ("cpu", "cpu", gpus // 2),
                                ("nic", "nic", gpus)):
        nodes += [(f"{prefix}{i}", {"kind": kind, "local": f"{prefix}{i}", "index": i})
                  for i in range(count)]
    edges = [(f"gpu{i}", "nvswitch", nvlink) for i in range(gpus)]
    edges += [(f"gpu{i}", f"pcie{i}", host) for i in range(gpus)]
    edges += [(f"nic{i}", f"pcie{i}", host) for i in range(gpus)]
    edges += [(f"pcie{i}", f"cpu{i // 2}", host) for i in range(gpus)]
    return ServerLayout(f"nvl_rack:gpu={gpu}:gpus={gpus}:nic={nic}", gpu, gpus, gpus, nic,
                        tuple(nodes), tuple(edges))


SERVER_TYPES.setdefault("nvl_rack", nvl_rack_layout)


def superpod(nodes: int, node: dict[str, Any], nodes_per_leaf: int = 32,
             spines: int | None = None, oversubscription: float = 1.0,
             uplink: str | None = None, sharp: bool = True) -> nx.Graph:
    """Rail-optimized InfiniBand fat tree (:func:`rail_optimized`) whose switches reduce in
    the network when ``sharp`` (SHARP v3 on Quantum-2 / Quantum-X800): NCCL's CollNet
    algorithms may then run on it.

    :raises ConfigError: as :func:`rail_optimized`, or naming ``sharp`` (not a bool, or
        true on a fabric whose NICs are not InfiniBand).
    """
    if not isinstance(sharp, bool):
        raise ConfigError(f"must be true or false, got {sharp!r}", field="sharp")
    G = rail_optimized(nodes, node, nodes_per_leaf, spines, oversubscription, uplink)
    nic = server_layout(node).nic
    if sharp and not nic.startswith("ib-"):
        raise ConfigError(f"SHARP needs InfiniBand switches; this fabric's NICs are {nic}",
                          field="sharp")
    G.graph["sharp"] = sharp
    return G
