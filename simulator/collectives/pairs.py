"""Send/recv plans for many GPU pairs at once: one planned pair per shape, the others read off.

A pipeline stage's send on 16,384 GPUs is a thousand GPU pairs, each planned on its own as
``CollectiveModel.plan("send_recv", size, [a, b])``: a communicator, NCCL's latency and
protocol, and a route searched edge by edge. Everything of such a plan but its links depends
only on the pair's shape (the design of either server and the GPUs' places in them, and
whether they share a server), so one pair of each shape is planned in full and the others
take its plan with their own links (one pair is planned per shape, size and coefficients:
a route under one leaf differs from one across the spines). Their routes are laid out as
rings are (:class:`simulator.collectives.blocks.ServerBlocks`: inside a server once per
design, between servers once per switch pair) and costed as the plan costs them (the
bottleneck rate of the pair's own links, the same coefficients). So every plan is the one
``plan`` gives, bit for bit (a test compares them). Used where the blocks are exact
(``spread`` ECMP, no link latency what-if, no host-staged NIC path of an NCCL without PXN,
:mod:`.host_path`); elsewhere every pair is planned on its own.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..network.fabric import Flow, bottleneck_rate
from .blocks import ServerBlocks
from .layouts import blocks_exact
from .nics import home_nic

_MAX_BATCH_WIDTH = 64       # entries of a route read off in one table (w x w per route)


def pair_plans(model, size_bytes: int, pairs: list[tuple[int, int]],
               shapes: dict | None = None) -> list:
    """The plans ``model.plan("send_recv", size_bytes, [a, b])`` of each (a, b) in
    ``pairs`` (global ranks); ``shapes`` keeps the planned pairs from one call to the next
    (one per model: its keys are the shape, size and coefficients)."""
    cluster = model.cluster
    if not blocks_exact(cluster, model.host_path):
        return [model.plan("send_recv", size_bytes, [a, b]) for a, b in pairs]
    entries = _routes(cluster, pairs, model.k.pcie_p2p_efficiency)
    shapes = {} if shapes is None else shapes   # (shape, size, coefficients) -> its plan
    out: list = []
    later: dict = {}                            # key -> [(slot, links, wire)] to read off
    for (a, b), (links, coef, wire) in zip(pairs, entries):
        key = (_shape(cluster, a, b), size_bytes, coef.dtype.str, coef.tobytes())
        if key not in shapes:
            shapes[key] = model.plan("send_recv", size_bytes, [a, b])
            out.append(shapes[key])
            continue
        later.setdefault(key, []).append((len(out), links, wire))
        out.append(None)
    for key, items in later.items():
        plan = shapes[key]
        for (slot, links, wire), rate in zip(items, _rates(cluster, plan, items)):
            transfer = plan.payload_bytes / rate if plan.payload_bytes else 0.0
            out[slot] = replace(plan, links=links, predicted_s=plan.latency_s + transfer,
                                wire_coef=wire)
    return out


def _rates(cluster, plan, items) -> list[float]:
    """The bottleneck rate of ``plan`` (of a pair of the same shape and coefficients) on
    each of ``items``' links, as ``CollectiveModel._plan_one`` costs a plan
    (``bottleneck_rate``: per link its coefficients summed in entry order, the least
    capacity / load). At once for the routes whose entries repeat links where the first
    one's do (a spread route names its NIC link once per path): their loads are the same
    sums; one by one for the others."""
    payload, coef, cap = plan.payload_bytes, plan.coef, cluster.capacity_bytes_per_s
    if not payload:
        return [math.inf] * len(items)
    width = len(coef)
    if not width or width > _MAX_BATCH_WIDTH or any(len(x) != width for _, x, _ in items):
        return [_read_off_rate(cluster, plan, links) for _, links, _ in items]
    table = np.stack([links for _, links, _ in items])
    links, where = np.unique(table[0], return_inverse=True)
    where = where.ravel()
    load = np.bincount(where, weights=coef, minlength=len(links))
    equal = table[:, :, None] == table[:, None, :]
    alike = (equal == equal[0]).all(axis=(1, 2))
    used = np.flatnonzero(load > 0)
    first = np.array([np.flatnonzero(where == u)[0] for u in used], np.int64)
    rates = np.minimum((cap[table[:, first]] / load[used]).min(axis=1), plan.max_rate)
    return [float(rates[i]) if alike[i] else _read_off_rate(cluster, plan, table[i])
            for i in range(len(items))]


def _read_off_rate(cluster, plan, links: np.ndarray) -> float:
    flow = Flow(plan.payload_bytes, links, plan.coef, plan.latency_s, plan.max_rate)
    return bottleneck_rate(flow, cluster.capacity_bytes_per_s)


def _shape(cluster, a: int, b: int) -> tuple:
    """What a send/recv plan depends on besides its links."""
    nodes = cluster.G.nodes
    da, db = nodes[cluster.gpus[a]], nodes[cluster.gpus[b]]
    return (da.get("template", da["server"]), da["local"], db.get("template", db["server"]),
            db["local"], da["server"] == db["server"])


def _routes(cluster, pairs, eff: float) -> list[tuple]:
    """(link ids, coefficients before NCCL's factor, wire bytes) of each pair's route, as
    ``layouts.direct_pair_edges`` lays it out (GPU, home NIC, fabric, NIC, GPU)."""
    blocks = ServerBlocks(cluster, 1.0, eff)
    server = cluster.server_of_rank
    slots = []
    for a, b in pairs:
        first = len(blocks.links)
        ga, gb = cluster.gpus[a], cluster.gpus[b]
        if server[a] == server[b]:
            blocks.local([(ga, gb)], [True])
        else:
            blocks.between(ga, home_nic(cluster, ga), home_nic(cluster, gb), gb)
        slots.append((first, len(blocks.links)))
    blocks.entries()
    return [tuple(np.concatenate(part[i:j]) for part in (blocks.links, blocks.coefs,
                                                          blocks.wires))
            for i, j in slots]
