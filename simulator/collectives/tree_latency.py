"""How long a tree's levels between servers take, beside what NCCL's tuner assumes.

NCCL's tuner costs a tree all_reduce at ``2 log2(nNodes) x hwLat[NET][Tree][proto]``
between servers (5.0 us per level and direction for LL, in every release read); the model
keeps that for *choosing* the algorithm and protocol, as NCCL does. For *timing* a
level beyond the first, this module takes what one level is: one network send up (reduce)
and one down (broadcast) of the double binary tree, each the same LL/LL128 transfer as one
ring step across the network, so NCCL's ``hwLat[NET][Ring][proto]`` (2.7 us for LL), over
the tree's real depth (``ncclGetBtree``, ``ceil(log2 nNodes)``). The first level stays in
the calibrated part of the latency (data/nccl.yaml ``tree_level_step``;
docs/collective-model.md, "Latency across servers").
"""

from __future__ import annotations

import math
from functools import cache

from ..constants import ModelConstants
from .layouts import dtree_parent


@cache
def tree_depth(n_nodes: int) -> int:
    """Levels between servers of NCCL's double binary tree over ``n_nodes`` servers: the
    longest chain from a leaf to the root, the deeper of the two trees."""
    depth = 0
    for tree in (0, 1):
        level: dict[int, int] = {}
        for rank in range(n_nodes):
            chain, r = [], rank
            while r not in level and r >= 0:
                chain.append(r)
                r = dtree_parent(r, n_nodes, tree)
            d = level.get(r, -1)
            for r in reversed(chain):
                d += 1
                level[r] = d
        depth = max(depth, max(level.values()))
    return depth


def tuner_deep_levels_s(k: ModelConstants, proto: str, n_nodes: int) -> float:
    """What NCCL's tuner charges for the levels beyond the first: ``2 (log2 n - 1)`` hops."""
    return 2 * max(math.log2(n_nodes) - 1.0, 0.0) * k.hop_latency_s["net"]["tree"][proto]


def deep_levels_s(k: ModelConstants, proto: str, n_nodes: int) -> float:
    """The time of the tree's levels beyond the first: per level one step up and one down
    at the ring's network step cost (protocols in ``k.tree_level_step_protos``; others at
    NCCL's tree term, :func:`tuner_deep_levels_s`)."""
    if proto not in k.tree_level_step_protos:
        return tuner_deep_levels_s(k, proto, n_nodes)
    step = k.hop_latency_s["net"][k.tree_level_hop_from][proto]
    return 2 * max(tree_depth(n_nodes) - 1, 0) * step


def plugin_levels_s(latency_inter_s: float, proto: str, n_nodes: int) -> float:
    """What the net plugin's reported latency adds to a tree between ``n_nodes`` servers:
    ``latencyInter`` (aws-ofi-nccl's ``latency``, 75 us on p5) once per level and direction,
    twice for Simple (tuning.cc: "Also add the flush extra latency"), over the tree's real
    depth; NCCL 2.28's ``ncclTopoTuneModel`` adds it to the tree's ``interLat`` the same way
    (``2 log2i(nNodes) x interLat``). 0.0 on one server or without a reported latency."""
    if n_nodes <= 1 or not latency_inter_s:
        return 0.0
    per_direction = latency_inter_s * (2 if proto == "Simple" else 1)
    return 2 * tree_depth(n_nodes) * per_direction


def timing_correction_s(k: ModelConstants, proto: str, n_nodes: int) -> float:
    """Time of a tree collective minus the tuner's estimate of it (0.0 up to 2 servers)."""
    if n_nodes <= 2:
        return 0.0
    return deep_levels_s(k, proto, n_nodes) - tuner_deep_levels_s(k, proto, n_nodes)
