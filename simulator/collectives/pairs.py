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
    out = []
    for (a, b), (links, coef, wire) in zip(pairs, entries):
        key = (_shape(cluster, a, b), size_bytes, coef.dtype.str, coef.tobytes())
        known = shapes.get(key)
        if known is None:
            out.append(shapes.setdefault(key, model.plan("send_recv", size_bytes, [a, b])))
            continue
        out.append(_read_off(cluster, known, links, wire))
    return out


def _shape(cluster, a: int, b: int) -> tuple:
    """What a send/recv plan depends on besides its links."""
    nodes = cluster.G.nodes
    da, db = nodes[cluster.gpus[a]], nodes[cluster.gpus[b]]
    return (da.get("template", da["server"]), da["local"], db.get("template", db["server"]),
            db["local"], da["server"] == db["server"])


def _read_off(cluster, plan, links: np.ndarray, wire: np.ndarray):
    """``plan`` (of a pair of the same shape and coefficients) on ``links``, costed as
    ``CollectiveModel._plan_one`` costs a plan."""
    payload = plan.payload_bytes
    flow = Flow(payload, links, plan.coef, plan.latency_s, plan.max_rate)
    rate = bottleneck_rate(flow, cluster.capacity_bytes_per_s) if payload else math.inf
    transfer = payload / rate if payload else 0.0
    return replace(plan, links=links, predicted_s=plan.latency_s + transfer, wire_coef=wire)


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
