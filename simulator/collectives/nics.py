"""Which NIC a GPU drives: NCCL's assignment of a server's NICs to its GPUs.

Below the layouts (:mod:`simulator.collectives.layouts`) and the aggregated all-to-all
(:mod:`simulator.collectives.alltoall`), which both route GPU traffic through these NICs.
"""

from __future__ import annotations

from ..cluster import Cluster


def nic_owner(cluster: Cluster, nic: str, gpus: list[str]) -> str:
    """The GPU that drives ``nic``: among the GPUs nearest to it, round robin by NIC index.

    On a DGX A100 (two GPUs and two NICs per PCIe switch) NIC j belongs to GPU j; with 16
    NICs (two per GPU) each GPU owns two, as NCCL assigns them.
    """
    near = [g for g in gpus if nic in cluster.routes.nearest_nics(g)]
    return near[cluster.G.nodes[nic]["index"] % len(near)] if near else ""


def owned_nics(cluster: Cluster, gpu: str) -> list[str]:
    """The NICs ``gpu`` drives (falls back to all its nearest NICs if it owns none).

    Worked out once per server design and local GPU (as ``cluster.routes.nearest_nics``,
    which it reads, is) and named per server; per GPU on a server without a design
    (``template``).
    """
    cache = cluster.memo.get(("nics", "owned"), dict)
    mine = cache.get(gpu)
    if mine is None:
        d = cluster.G.nodes[gpu]
        template = d.get("template")
        prefix = gpu[: len(gpu) - len(d["local"])]
        key = (template, d["local"]) if template is not None else None
        local = cache.get(key) if key is not None else None
        if local is None:
            peers = cluster.gpus_of_server(d["server"])
            nearest = cluster.routes.nearest_nics(gpu)
            owned = [n for n in nearest if nic_owner(cluster, n, peers) == gpu] or nearest
            local = [n[len(prefix):] for n in owned]
            if key is not None:
                cache[key] = local
        mine = cache[gpu] = [prefix + n for n in local]
    return mine


def home_nic(cluster: Cluster, gpu: str) -> str:
    """The NIC a GPU uses for point-to-point traffic: the first one it owns."""
    return owned_nics(cluster, gpu)[0]
