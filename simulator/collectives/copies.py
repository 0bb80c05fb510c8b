"""Copy-based reductions: the ``star`` algorithm of ``reduce`` and ``broadcast``.

TensorFlow's ReductionToOneDevice and HierarchicalCopyAllReduce do not call NCCL: every
member copies its whole tensor to one device, which sums them (``add_n``), and the result
is copied back to every member (``cross_device_utils.aggregate_single_gradient_using_copy``,
``aggregate_gradients_using_hierarchical_copy``). So a star reduce puts ``n - 1`` copies of
the full tensor on the root's port at once, where NCCL's pipelined chain puts one: time
``(n - 1) S / B`` against ``S / B``.

A star plan is one coupled flow over the direct routes member -> root (reduce) or root ->
member (broadcast), each carrying ``S``; the latency is one launch plus the longest route.
It is chosen only by name (``algo="star"``), never by the NCCL tuner.
"""

from __future__ import annotations

import dataclasses
import math

from ..choices import STAR_OPS
from ..cluster import Route
from ..errors import ConfigError
from ..network.fabric import bottleneck_rate
from .layouts import gpu_route, make_communicator
from .plan import Plan


def star_plan(model, op: str, size_bytes: int, ranks: list[int], root: int = 0):
    """A :class:`~simulator.collectives.plan.Plan` of ``op`` by copies to/from ``root``
    (a position in ``ranks``' server-grouped order, as for the other algorithms).

    :raises ConfigError: (field ``algo``) for an op other than reduce and broadcast, and
        (field ``root``) for a root outside the communicator.
    """
    if op not in STAR_OPS:
        raise ConfigError(f"algorithm 'star' implements {' and '.join(STAR_OPS)}, not {op}",
                          field="algo")
    comm = make_communicator(model.cluster, ranks)
    if comm.n_ranks == 1:
        return model.local_plan(op, size_bytes)
    gpus = comm.gpus
    if not 0 <= root < len(gpus):
        raise ConfigError(f"root {root} is outside the {len(gpus)} ranks", field="root")
    hub = gpus[root]
    pairs = [(g, hub) if op == "reduce" else (hub, g) for g in gpus if g != hub]
    routes = [gpu_route(model.cluster, a, b, label=i) for i, (a, b) in enumerate(pairs)]
    joined = Route.join(routes)
    latency = model.k.launch_overhead_s + max(r.latency_s for r in routes)
    plan = Plan(op, "star", "copy", comm.n_ranks, comm.n_nodes, size_bytes, latency,
                float(size_bytes), joined.links, joined.coef, math.inf, 0.0)
    rate = bottleneck_rate(plan.flow(), model.cluster.capacity_bytes_per_s)
    return dataclasses.replace(plan, predicted_s=latency + size_bytes / rate)
