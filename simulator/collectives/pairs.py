"""Send/recv plans for many GPU pairs at once: one planned pair per shape, the others read off.

A pipeline stage's send on 16,384 GPUs is a thousand GPU pairs, each planned on its own as
``CollectiveModel.plan("send_recv", size, [a, b])``: a communicator, NCCL's latency and
protocol, and a route searched edge by edge. Everything of such a plan but its links depends
only on the pair's shape (the design of either server and the GPUs' places in them, and
whether they share a server), so one pair of each shape is planned in full and the others
take its plan with their own links (one pair is planned per shape, size and coefficients:
a route under one leaf differs from one across the spines). Their routes are laid out by
table (:mod:`.crossings`: the part inside either server worked out once per design and
local GPU, read off a column of link ids per server; the NIC links and switch paths per
NIC and switch pair), pairs alike in all of that in one table, and costed as the plan
costs them (the bottleneck rate of the pair's own links, the same coefficients), a table
at a time. So every plan is the one ``plan`` gives, bit for bit (a test compares them);
where a table lacks an entry (a NIC without its switch) the routes are laid out pair by
pair as rings are (:class:`simulator.collectives.blocks.ServerBlocks`), which reports it. Used where the blocks are exact
(``spread`` ECMP, no link latency what-if, no host-staged NIC path of an NCCL without PXN,
:mod:`.host_path`); elsewhere every pair is planned on its own.
"""

from __future__ import annotations

import math

import numpy as np

from ..network.fabric import Flow, bottleneck_rate
from ..uniques import distinct_where
from .blocks import ServerBlocks
from .columns import rank_places
from .crossings import Ends, lay_out
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
    shapes = {} if shapes is None else shapes   # (shape, size, coefficients) -> its plan
    laid = _tables(cluster, pairs, model.k.pcie_p2p_efficiency)
    if laid is None:
        return _pair_by_pair(model, size_bytes, pairs, shapes)
    kinds, classes = laid
    out: list = [None] * len(pairs)
    for c in classes:
        first = int(c.edges[0])
        key = (kinds[first], size_bytes, c.coef.dtype.str, c.coef.tobytes())
        rest, table = c.edges, c.links
        if key not in shapes:
            shapes[key] = out[first] = model.plan("send_recv", size_bytes, list(pairs[first]))
            rest, table = rest[1:], table[1:]
        plan = shapes[key]
        rates = _rates(cluster, plan, table)
        if plan.payload_bytes:
            predicted = (plan.latency_s + plan.payload_bytes / np.array(rates)).tolist()
        else:
            predicted = [plan.latency_s + 0.0] * len(rates)
        for slot, links, time_s in zip(rest.tolist(), table, predicted):
            out[slot] = plan.placed(links, time_s, c.wire)
    return out


def _pair_by_pair(model, size_bytes: int, pairs, shapes: dict) -> list:
    """:func:`pair_plans` with each pair's route laid out on its own (where a table of
    :mod:`.crossings` lacks an entry)."""
    cluster = model.cluster
    kinds = [_shape(cluster, a, b) for a, b in pairs]
    entries = _routes(cluster, pairs, model.k.pcie_p2p_efficiency, kinds)
    out: list = []
    later: dict = {}                            # key -> [(slot, links, wire)] to read off
    for (a, b), kind, (links, coef, wire) in zip(pairs, kinds, entries):
        key = (kind, size_bytes, coef.dtype.str, coef.tobytes())
        if key not in shapes:
            shapes[key] = model.plan("send_recv", size_bytes, [a, b])
            out.append(shapes[key])
            continue
        later.setdefault(key, []).append((len(out), links, wire))
        out.append(None)
    for key, items in later.items():
        plan = shapes[key]
        table = [links for _, links, _ in items]
        for (slot, links, wire), rate in zip(items, _rates(cluster, plan, table)):
            transfer = plan.payload_bytes / rate if plan.payload_bytes else 0.0
            out[slot] = plan.placed(links, plan.latency_s + transfer, wire)
    return out


def _rates(cluster, plan, rows) -> list[float]:
    """The bottleneck rate of ``plan`` (of a pair of the same shape and coefficients) on
    each of ``rows`` (link ids, a 2-D table or a list of arrays), as
    ``CollectiveModel._plan_one`` costs a plan (``bottleneck_rate``: per link its
    coefficients summed in entry order, the least capacity / load). At once for the routes
    whose entries repeat links where the first one's do (a spread route names its NIC link
    once per path): their loads are the same sums; one by one for the others."""
    payload, coef, cap = plan.payload_bytes, plan.coef, cluster.capacity_bytes_per_s
    if not payload:
        return [math.inf] * len(rows)
    width = len(coef)
    if not len(rows):
        return []
    if not width or width > _MAX_BATCH_WIDTH or any(len(x) != width for x in rows):
        return [_read_off_rate(cluster, plan, links) for links in rows]
    table = np.asarray(rows) if isinstance(rows, np.ndarray) else np.stack(rows)
    links, first, where = distinct_where(table[0], first=True, inverse=True)
    load = np.bincount(where, weights=coef, minlength=len(links))
    alike = _alike_rows(table, first, where)
    used = np.flatnonzero(load > 0)
    rates = np.minimum((cap[table[:, first[used]]] / load[used]).min(axis=1), plan.max_rate)
    return [rate if ok else _read_off_rate(cluster, plan, table[i])
            for i, (rate, ok) in enumerate(zip(rates.tolist(), alike.tolist()))]


def _alike_rows(table: np.ndarray, first: np.ndarray, where: np.ndarray) -> np.ndarray:
    """Per row of ``table``, whether its entries repeat links exactly where the first row's
    do (``first``: the position where the first row first names each of its distinct
    links, ``where``: each of its entries as an index into them). A row does when each
    entry equals the entry at the first position of the first row's link there (its
    repeats include the first row's) and it has as many distinct links (so no others):
    what comparing every pair of entries tells, in rows x width instead of rows x width^2."""
    same = (table == table[:, first[where]]).all(axis=1)
    ordered = np.sort(table, axis=1)
    distinct = (ordered[:, 1:] != ordered[:, :-1]).sum(axis=1) + 1
    return same & (distinct == len(first))


def _read_off_rate(cluster, plan, links: np.ndarray) -> float:
    flow = Flow(plan.payload_bytes, links, plan.coef, plan.latency_s, plan.max_rate)
    return bottleneck_rate(flow, cluster.capacity_bytes_per_s)


def _tables(cluster, pairs, eff: float) -> tuple | None:
    """(each pair's :func:`_shape`, its route's entries by class of :func:`.crossings.lay_out`)
    as :func:`_routes` lays them out; None where a table lacks an entry. A GPU's home NIC and
    its part of the route inside the server are worked out once per shape of pair."""
    if not len(pairs):
        return [], []
    ends = np.asarray(pairs, np.int64).reshape(-1, 2)
    design, local, designs, locals_ = rank_places(cluster)
    server = cluster.server_of_rank
    a, b = ends[:, 0], ends[:, 1]
    same = server[a] == server[b]
    code = (((design[a] * len(locals_) + local[a]) * len(designs) + design[b])
            * len(locals_) + local[b]) * 2 + same
    found, first, inverse = distinct_where(code, first=True, inverse=True)
    blocks = ServerBlocks(cluster, 1.0, eff)
    shapes, nics, sides, kinds = [], [], {}, []
    per_kind = np.empty((len(found), 4), np.int64)      # shape and NIC of either end
    gpus = cluster.gpus
    for k, i in enumerate(first.tolist()):
        ga, gb = gpus[a[i]], gpus[b[i]]
        kind = _shape(cluster, int(a[i]), int(b[i]))
        kinds.append(kind)
        if kind[4]:
            template, shape, _ = blocks.local_shape([(ga, gb)], [True])
            shapes.append((template, shape))
            per_kind[k] = len(shapes) - 1, -1, -1, -1
            continue
        for j, (gpu, outward) in enumerate(((ga, True), (gb, False))):
            prefix, nic, entries = _side(blocks, sides, gpu, kind[2 * j], kind[2 * j + 1],
                                         outward)
            shapes.append((kind[2 * j], entries))
            nics.append((kind[2 * j], nic[len(prefix):]))
            per_kind[k, 2 * j:2 * j + 2] = len(shapes) - 1, len(nics) - 1
    at = per_kind[inverse.ravel()]
    classes = lay_out(blocks, shapes, nics, Ends(server[a], at[:, 0], at[:, 1]),
                      Ends(server[b], at[:, 2], at[:, 3]))
    return None if classes is None else ([kinds[k] for k in inverse.ravel().tolist()],
                                         classes)


def _shape(cluster, a: int, b: int) -> tuple:
    """What a send/recv plan depends on besides its links."""
    nodes = cluster.G.nodes
    da, db = nodes[cluster.gpus[a]], nodes[cluster.gpus[b]]
    return (da.get("template", da["server"]), da["local"], db.get("template", db["server"]),
            db["local"], da["server"] == db["server"])


def _routes(cluster, pairs, eff: float, kinds: list[tuple]) -> list[tuple]:
    """(link ids, coefficients before NCCL's factor, wire bytes) of each pair's route, as
    ``layouts.direct_pair_edges`` lays it out (GPU, home NIC, fabric, NIC, GPU); ``kinds``
    each pair's :func:`_shape`. A GPU's home NIC and its part of the route inside the
    server are worked out once per design and local GPU, then named per server."""
    blocks = ServerBlocks(cluster, 1.0, eff)
    sides: dict = {}        # (design, local GPU, outward) -> (local NIC name, its entries)
    gpus = cluster.gpus
    ends = []
    for (a, b), (design_a, local_a, design_b, local_b, same) in zip(pairs, kinds):
        ga, gb = gpus[a], gpus[b]
        if same:
            blocks.local([(ga, gb)], [True])
        else:
            prefix_a, nic_a, out = _side(blocks, sides, ga, design_a, local_a, True)
            prefix_b, nic_b, into = _side(blocks, sides, gb, design_b, local_b, False)
            blocks.add_shape(prefix_a, ga, design_a, out)
            blocks.fabric(nic_a, nic_b)
            blocks.add_shape(prefix_b, nic_b, design_b, into)
        ends.append(len(blocks.links))
    parts = blocks.links, blocks.coefs, blocks.wires
    blocks.entries()
    return _split(parts, ends)


def _side(blocks: ServerBlocks, sides: dict, gpu: str, design, local: str,
          outward: bool) -> tuple[str, str, tuple]:
    """(prefix of ``gpu``'s server's node ids, its home NIC, the entries of GPU -> NIC if
    ``outward`` else NIC -> GPU)."""
    prefix = gpu[: len(gpu) - len(local)]
    known = sides.get((design, local, outward))
    if known is None:
        nic = home_nic(blocks.cluster, gpu)
        hop = (gpu, nic) if outward else (nic, gpu)
        known = sides[(design, local, outward)] = (nic[len(prefix):],
                                                    blocks.local_shape([hop], [False])[1])
    return prefix, prefix + known[0], known[1]


def _split(parts, ends: list[int]) -> list[tuple]:
    """Per pair (``ends``: one past its last part), its parts of each of ``parts`` joined:
    one concatenation each, then views of it."""
    joined, bounds = [], None
    for part in parts:
        if not part:
            return [(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))] * len(ends)
        joined.append(np.concatenate(part))
        if bounds is None:
            sizes = np.fromiter((len(x) for x in part), np.int64, len(part))
            bounds = np.concatenate([[0], np.cumsum(sizes)])[[0] + ends].tolist()
    return [tuple(x[i:j] for x in joined) for i, j in zip(bounds, bounds[1:])]
