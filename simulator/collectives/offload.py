"""NCCL's reduction-offload algorithms: NVLS, NVLS-Tree and CollNet (IB SHARP).

* ``nvls`` (NVLink SHARP, NCCL 2.17+): inside one NVSwitch 3+ domain the switch reduces
  (``multimem.ld_reduce``) and multicasts (``multimem.st``), so each GPU sends and receives
  about the buffer once, against 2(n-1)/n of it on a ring. all_reduce, reduce_scatter and
  all_gather, one server (one NVLink domain), Simple protocol only.
* ``nvls_tree`` (NCCL 2.18+): NVLS inside each server, then GPU j of every server reduces its
  1/ppn shard over a double binary tree through its own NIC. all_reduce across servers.
* ``collnet_direct`` / ``collnet_chain`` (CollNet with the SHARP plugin,
  ``NCCL_COLLNET_ENABLE=1``): the servers' GPUs reduce-scatter over NVLink, each NIC sends its
  shard to the switches, which reduce across servers (in-network aggregation) and return
  the sum; then an all-gather over NVLink. all_reduce across servers; needs a fabric whose
  switches reduce (``sharp: true``). Direct supports at most 8 GPUs per server and needs an
  NVSwitch in the server (NCCL 2.19+ tuning.cc: "Disable CollNet+Direct if not on an
  NVSwitch system"; enqueue.cc: at most NCCL_MAX_DIRECT_ARITY + 1 = 8 local ranks).

Eligibility as NCCL 2.19-2.2x (tuning.cc, enqueue.cc): NVLS across servers needs CollNet
(NVLS + SHARP, not modelled), so it runs in one NVLink domain; NVLS-Tree needs two or
more servers; NVLS all_gather/reduce_scatter runs on one server only and on at most
NCCL_MAX_NVLS_ARITY GPUs (8 before NCCL 2.20, 32 from it; data/nccl.yaml
``nvls_max_arity``), so not on a 72-GPU NVL72 rack. CollNet's all_gather/reduce_scatter
(2.19+, with a plugin that has them) is not modelled.

The rate is the coupled flow's (every edge at one rate); each edge's coefficient counts
the bytes it carries per payload byte. Latencies: data/nccl.yaml ``offload``.
"""

from __future__ import annotations

import math

import numpy as np

from functools import cache

from ..cluster import Route
from ..errors import ConfigError
from ..network.fabric import Flow, bottleneck_rate
from ..constants import read_data
from .layouts import Communicator, EdgeSet, dtree_parent, gpu_route, home_nic
from .nccl_config import parse_version
from .plan import Plan
from .tree_latency import plugin_levels_s

OFFLOAD_ALGOS = ("nvls", "nvls_tree", "collnet_direct", "collnet_chain")
NVLS_OPS = ("all_reduce", "reduce_scatter", "all_gather")
COLLNET_DIRECT_MAX_PPN = 8


@cache
def _choice_data() -> tuple[tuple, float]:
    """(NCCL_MAX_NVLS_ARITY by release, sorted; CollNet Direct's arity latency in s)."""
    nccl = read_data("nccl.yaml")
    arity = sorted((parse_version(v), int(n)) for v, n in nccl["nvls_max_arity"].items()
                   if v != "source")
    return tuple(arity), float(nccl["collnet_direct_arity_latency_us"]["value"]) * 1e-6


def nvls_max_arity(version: str) -> int:
    """NCCL_MAX_NVLS_ARITY of NCCL ``version``: the most GPUs of one NVLink domain an NVLS
    all_gather / reduce_scatter spans (data/nccl.yaml ``nvls_max_arity``)."""
    have, table = parse_version(version), _choice_data()[0]
    return next((n for v, n in reversed(table) if v <= have), table[0][1])


def nvls_unavailable(model, op: str, algo: str, comm: Communicator) -> str | None:
    """Why ``algo`` (nvls or nvls_tree) cannot run ``op`` on ``comm``; None if it can."""
    gpu = model.gpu
    if not gpu.nvls or not model.has_nvswitch:
        return (f"{algo} needs NVLink SHARP (NVSwitch 3 or later: H100/H200/B200/GB200 "
                f"SXM); {gpu.name} on {model.cluster.G.graph.get('name')} has none")
    if comm.ppn < 2:
        return f"{algo} needs at least 2 GPUs per server, got {comm.ppn}"
    if algo == "nvls":
        if op not in NVLS_OPS:
            return f"nvls implements {', '.join(NVLS_OPS)}, not {op}"
        if comm.n_nodes > 1:
            return "nvls runs inside one NVLink domain; across servers use nvls_tree"
        arity = nvls_max_arity(model.nccl.version)
        if op != "all_reduce" and comm.ppn > arity:
            return (f"nvls {op} spans at most {arity} GPUs (NCCL {model.nccl.version}'s "
                    f"NCCL_MAX_NVLS_ARITY), got {comm.ppn}")
    elif op != "all_reduce" or comm.n_nodes < 2:
        return "nvls_tree is an all_reduce across servers"
    return None


def collnet_unavailable(model, op: str, algo: str, comm: Communicator) -> str | None:
    """Why ``algo`` (collnet_direct or collnet_chain) cannot run; None if it can."""
    if not model.cluster.G.graph.get("sharp"):
        return (f"{algo} reduces on the switches (IB SHARP), but "
                f"{model.cluster.G.graph.get('name')} has no SHARP switches (sharp: true)")
    if op != "all_reduce" or comm.n_nodes < 2:
        return f"{algo} is an all_reduce across servers"
    if algo == "collnet_direct" and comm.ppn > COLLNET_DIRECT_MAX_PPN:
        return f"collnet_direct supports at most {COLLNET_DIRECT_MAX_PPN} GPUs per server"
    if algo == "collnet_direct" and not model.has_nvswitch:
        return "collnet_direct needs an NVSwitch in the server (NCCL disables it without one)"
    return None


def check_available(reason: str | None) -> None:
    """Raise the one-line error of a forced algorithm that cannot run."""
    if reason:
        raise ConfigError(reason, field="algo")


def _switch_edges(model, comm: Communicator, weight: float, es: EdgeSet) -> None:
    """Each GPU to its server's NVSwitch and back, ``weight`` bytes per payload byte,
    at the calibrated NVLS efficiency."""
    cluster, eff = model.cluster, model.k.nvls_efficiency
    for grp in comm.groups:
        switch = grp[0][: -len(cluster.G.nodes[grp[0]]["local"])] + "nvswitch"
        for g in grp:
            es.add(cluster.route(g, switch), weight, eff)
            es.add(cluster.route(switch, g), weight, eff)


def _shard_trees(model, comm: Communicator, weight: float, es: EdgeSet) -> None:
    """GPU position j of every server on a double binary tree through its home NIC, both
    directions; ``weight`` bytes per payload byte on each tree edge."""
    cluster, n = model.cluster, comm.n_nodes
    for j in range(comm.ppn):
        column = [grp[j % len(grp)] for grp in comm.groups]
        nics = [home_nic(cluster, g) for g in column]
        for tree in (0, 1):
            for k in range(n):
                p = dtree_parent(k, n, tree)
                if p < 0:
                    continue
                for a, b in ((k, p), (p, k)):
                    route = gpu_route(cluster, column[a], column[b], nics[a], nics[b], j)
                    es.add(route, weight / 2, between_servers=True)


def offload_edges(model, op: str, algo: str, comm: Communicator) -> tuple[EdgeSet, float]:
    """(edges, payload bytes per byte of ``size``) of ``algo`` running ``op``."""
    es = EdgeSet([], [], "nvlink", track_extra=model.cluster.has_extra_latency)
    ppn = comm.ppn
    if algo == "nvls":
        _switch_edges(model, comm, 1.0, es)
        return es, (1.0 if op == "all_reduce" else (comm.n_ranks - 1) / comm.n_ranks)
    if algo == "nvls_tree":
        _switch_edges(model, comm, 1.0, es)
        _shard_trees(model, comm, 1.0 / ppn, es)
        return es, 1.0
    # CollNet: reduce-scatter + all-gather inside the server, a shard per NIC to the switch
    _switch_edges(model, comm, 2.0 * (ppn - 1) / ppn, es)
    cluster = model.cluster
    for grp in comm.groups:
        for g in grp:
            nic = home_nic(cluster, g)
            leaf = next(v for v in cluster.G.neighbors(nic)
                        if cluster.G.nodes[v].get("kind") == "switch")
            es.add(cluster.route(g, nic), 1.0 / ppn, between_servers=True)
            es.add(_link(cluster, nic, leaf), 1.0 / len(grp), between_servers=True)
            es.add(_link(cluster, leaf, nic), 1.0 / len(grp), between_servers=True)
            es.add(cluster.route(nic, g), 1.0 / ppn, between_servers=True)
    return es, 1.0


def _link(cluster, u: str, v: str) -> Route:
    """The one directed link ``u -> v`` as a route."""
    lid = cluster.link_id[(u, v)]
    return Route(np.array([lid], np.int64), np.ones(1), float(cluster.latency_s[lid]),
                 float(cluster.extra_latency_s[lid]))


def offload_latency_s(model, algo: str, comm: Communicator) -> float:
    """NCCL's latency model of ``algo`` (Simple protocol), launch overhead included:
    nvls ``base + intra``; nvls_tree ``base + intra + 2 log2(nodes) net``; collnet_chain
    ``base + 2 (ppn-1) intra + net``; collnet_direct ``base + 2 (min(1, ppn-1) intra +
    (ppn-1) arity) + net``, one NVLink hop plus an arity serialisation latency per local
    GPU (2.19+ tuning.cc's shapes; ``arity`` from data/nccl.yaml)."""
    k = model.k
    base, intra, inter = (k.offload_latency_s[algo][key] for key in ("base", "nvlink", "net"))
    scale = k.protocol_latency_factor["Simple"]
    ppn = comm.ppn
    if algo == "nvls":
        fixed, net = base + intra, 0.0
    elif algo == "nvls_tree":
        fixed, net = base + intra, 2 * math.log2(comm.n_nodes) * inter
    elif algo == "collnet_direct":
        arity = _choice_data()[1]
        fixed, net = base + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * arity), inter
    else:
        fixed, net = base + 2 * (ppn - 1) * intra, inter
    return k.launch_overhead_s + scale * fixed + net


def simple_only(algo: str, protos: tuple, asked: str) -> tuple:
    """The protocols to try for ``algo``: offload algorithms, PAT and RCCL's one-shot
    all_reduce run Simple only.

    :raises ConfigError: (field ``proto``) when another protocol is forced on them.
    """
    if algo not in OFFLOAD_ALGOS and algo not in ("pat", "one_shot"):
        return protos
    if asked not in ("auto", "Simple"):
        raise ConfigError(f"{algo} runs the Simple protocol only, got {asked}", field="proto")
    return ("Simple",)


def offload_plan(model, op: str, algo: str, comm: Communicator, size: int):
    """(plan, the tuner's time) of ``algo`` running ``op`` of ``size`` bytes on ``comm``;
    a link latency what-if adds its extra once per step kind, as for a direct step."""
    es, per_byte = offload_edges(model, op, algo, comm)
    links, coef = es.arrays()
    payload = per_byte * size
    nccl_latency = offload_latency_s(model, algo, comm)
    timed = nccl_latency + (plugin_levels_s(model.latency_inter_s, "Simple", comm.n_nodes)
                            if algo == "nvls_tree" else 0.0)
    latency = model.with_link_latency(timed, "ring", "Simple", max(es.step_extra_s()))
    flow = Flow(payload, links, coef, latency, math.inf)
    transfer = payload / bottleneck_rate(flow, model.cluster.capacity_bytes_per_s)
    plan = Plan(op, algo, "Simple", comm.n_ranks, comm.n_nodes, size, latency, payload, links,
                coef, math.inf, latency + transfer, wire_coef=es.wire_coef())
    return plan, nccl_latency + transfer
