"""The pre-PXN path from a GPU to a NIC it cannot reach on its own PCIe switch.

NCCL 2.12+ (PXN) sends such traffic over NVLink to the GPU next to the NIC, which is the
route the cluster gives (the cheapest). An older NCCL goes through the CPU: GPUDirect RDMA
is off past a PCIe host bridge, so the bytes are staged in host memory, GPU -> PCIe -> its
CPU (-> socket link -> the other CPU) -> PCIe -> NIC, at a fraction of the PCIe
peer-to-peer rate (``host_path_fraction`` in data/nccl.yaml, NVIDIA/nccl#406: 9/12 through
one CPU, 6/12 across the socket). Used by the layouts (:mod:`.layouts`) when the NCCL
release has no PXN (:meth:`.nccl_config.NcclConfig.has_pxn`).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from ..cluster import Cluster, Route
from ..hardware import is_scale_up
from ..constants import read_data
from .host import host_side_route
from .nics import home_nic, owned_nics


@dataclass(frozen=True)
class HostPath:
    """Fractions of the links' rate a host-staged GPU-NIC transfer reaches."""

    through_cpu: float
    across_socket: float


def load_host_path() -> HostPath:
    """``host_path_fraction`` of data/nccl.yaml."""
    f = read_data("nccl.yaml")["host_path_fraction"]
    return HostPath(float(f["through_cpu"]), float(f["across_socket"]))


def host_path_applies(cluster: Cluster) -> bool:
    """Whether some GPU reaches a NIC it would use (its own or a nearest one) over another
    GPU's NVLink, so that a release without PXN takes the host path; checked once per
    server design and GPU."""
    return cluster.memo.get(("host_path", "applies"), lambda: _applies(cluster))


def _applies(cluster: Cluster) -> bool:
    seen: set = set()
    for gpu in cluster.gpus:
        d = cluster.G.nodes[gpu]
        key = (d.get("template", d["server"]), d["local"])
        if key in seen:
            continue
        seen.add(key)
        nics = set(cluster.routes.nearest_nics(gpu)) | set(owned_nics(cluster, gpu))
        if any(is_scale_up(set(cluster.link_class[cluster.route(gpu, n).links]))
               for n in sorted(nics)):
            return True
    return False


def nic_part(cluster: Cluster, src: str, dst: str,
             host_path: HostPath | None) -> tuple[Route, np.ndarray]:
    """(route with rate coefficients, wire bytes per link) of the GPU-NIC part ``src`` ->
    ``dst`` (one is a GPU, the other a NIC of its server). With ``host_path`` and a route
    that borrows another GPU's NVLink (PXN), the host path instead, each of its links
    taking ``1 / fraction`` of its capacity per byte."""
    route = cluster.route(src, dst)
    if host_path is None or not is_scale_up(set(cluster.link_class[route.links])):
        return route, route.coef
    try:
        host = host_side_route(cluster, src, dst)
    except nx.NetworkXNoPath:          # no PCIe path to the NIC that avoids the NVSwitch
        return route, route.coef
    across = "cpu" in set(cluster.link_class[host.links])
    frac = host_path.across_socket if across else host_path.through_cpu
    return Route(host.links, host.coef / frac, host.latency_s, host.extra_latency_s), host.coef


def host_gpu_route(cluster: Cluster, src: str, dst: str, src_nic: str | None,
                   dst_nic: str | None, label: int,
                   host_path: HostPath | None) -> tuple[Route, np.ndarray]:
    """(route, wire bytes) GPU ``src`` -> GPU ``dst`` of another server through the NICs,
    its GPU-NIC parts as :func:`nic_part` gives them."""
    a = src_nic or home_nic(cluster, src)
    b = dst_nic or home_nic(cluster, dst)
    (r1, w1), fabric, (r3, w3) = (nic_part(cluster, src, a, host_path),
                                  cluster.route(a, b, label),
                                  nic_part(cluster, b, dst, host_path))
    return Route.join([r1, fabric, r3]), np.concatenate([w1, fabric.coef, w3])


__all__ = ["HostPath", "host_gpu_route", "host_path_applies", "load_host_path", "nic_part"]
