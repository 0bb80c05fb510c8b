"""Bundles: identical transfers moved as one flow, split back where they stop being identical.

The instance groups of one collective (a TP all-reduce on every server of a stage, a DP
reduce-scatter on every rail) and the members of one send between pipeline stages start at
the same instant with the same payload, latency and rate cap. On a fabric where they are
equivalent (each on links no other instance uses, or sharing links symmetrically) the
max-min solve gives each of them the same rate at every instant, so they finish together:
moving them as one flow (one SimPy transfer, one rate variable) gives the same times with
events that do not grow with the number of instances.

A bundle is a :class:`~simulator.network.fabric.Flow` whose entries are its instances'
entries one after another, in order, with ``parts`` marking where each instance starts.
Whether the instances really are equivalent is not guessed from the layout: the max-min
solve itself checks, every round, that a bundle's instances freeze together
(:func:`~simulator.network.maxmin.share_bandwidth_checked`); where they do not (uneven
placement, a degraded link, a failed NIC, another transfer on some of their links, servers of
different designs) the fabric splits the bundle, each part with the bytes it has left, and
solves again: into groups of the instances that have one rate in a solve with one flow per
instance (:func:`groups_of`; each group a bundle again, checked like any other), where the
groups keep every link's entries in instance order (:func:`keeps_order`), else into one
flow per instance. Until then the instances had the same rate, so the split replay is the
exact per-instance replay from that instant on. Every sum the fabric forms (link loads,
counters, samples) has the same entries in the same order as with one flow per instance,
so the times are the same to the last bit.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .maxmin import FlowIncidence


def bundle_flows(flows: list, label: str = "") -> object:
    """One flow standing for ``flows`` (same size, latency and rate cap; the caller's
    contract), or the flow itself when there is one."""
    if len(flows) == 1:
        return flows[0]
    first = flows[0]
    lengths = [len(f.links) for f in flows]
    parts = np.zeros(len(flows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=parts[1:])
    wire = None
    if any(f.wire_coef is not None for f in flows):
        wire = np.concatenate([f.coef if f.wire_coef is None else f.wire_coef for f in flows])
    return replace(first, links=np.concatenate([f.links for f in flows]),
                   coef=np.concatenate([f.coef for f in flows]), wire_coef=wire,
                   label=label or first.label, parts=parts)


def signature(flow) -> tuple:
    """What instances of one bundle share: payload size, latency and rate cap."""
    return flow.size_bytes, flow.latency_s, flow.max_rate


def bundled(flows: list) -> list:
    """``flows`` with each run of neighbours of the same :func:`signature` made one bundle
    (only neighbours: the order of every entry stays as it was)."""
    return [bundle_flows(run) for run in runs_of(flows, signature)]


def runs_of(items: list, key) -> list[list]:
    """``items`` cut into runs of neighbours with the same ``key(item)``."""
    out: list[list] = []
    last = object()
    for item in items:
        k = key(item)
        if not out or k != last:
            out.append([])
            last = k
        out[-1].append(item)
    return out


def instances(flow) -> list:
    """The flows a bundle stands for (``[flow]`` for a plain one), sharing its arrays."""
    if flow.parts is None:
        return [flow]
    out = []
    for a, b in zip(flow.parts[:-1].tolist(), flow.parts[1:].tolist()):
        wire = None if flow.wire_coef is None else flow.wire_coef[a:b]
        f = replace(flow, links=flow.links[a:b], coef=flow.coef[a:b], wire_coef=wire,
                    parts=None)
        f.start_s = flow.start_s
        out.append(f)
    return out


class Splitter:
    """:func:`instances` with each bundle's instance arrays made once; or the bundle cut
    into smaller bundles, one per group of its instances (:func:`groups_of`).

    A planned bundle recurs by its arrays (its collective runs at every micro-batch and
    layer), and where it splits it splits again: slicing it anew each time gave instances
    whose arrays were new objects, so the link classes and the remembered solves, which
    know a flow by its arrays' ids (:func:`~simulator.network.solve.flow_key`), met them
    as new flows every time (40,756 refinements of the classes in one replay of
    ``plan llama3-70b-fsdp-tp8-256gpu`` on 1,024 GPUs, 378 of them distinct). Here a
    bundle's slices (and its groups' bundles) are kept with its arrays (so no other array
    takes their ids), the last :data:`REMEMBERED` bundles split."""

    REMEMBERED = 1024

    def __init__(self):
        self._slices: dict = {}

    def __call__(self, flow, groups: tuple | None = None) -> list:
        """The flows ``flow`` is split into: one per instance, or with ``groups`` (tuples
        of instance indices, ascending, the groups by their first) one per group, a group
        of several a bundle of its instances' entries in their order."""
        if flow.parts is None:
            return [flow]
        key = (id(flow.links), id(flow.coef), id(flow.wire_coef), id(flow.parts), groups)
        entry = self._slices.get(key)
        if entry is None:
            if len(self._slices) >= self.REMEMBERED:
                self._slices.pop(next(iter(self._slices)))
            whole = instances(flow)
            parts = whole if groups is None else [
                whole[g[0]] if len(g) == 1 else bundle_flows([whole[k] for k in g])
                for g in groups]
            entry = self._slices[key] = (
                (flow.links, flow.coef, flow.wire_coef, flow.parts),
                [(p.links, p.coef, p.wire_coef, p.parts) for p in parts])
        out = []
        for links, coef, wire, parts in entry[1]:
            f = replace(flow, links=links, coef=coef, wire_coef=wire, parts=parts)
            f.start_s = flow.start_s
            out.append(f)
        return out


def groups_of(rates: np.ndarray) -> tuple:
    """The instances of a bundle grouped by their rate in the solve with one flow per
    instance (``rates``, in instance order): tuples of instance indices, ascending, the
    groups by their first."""
    groups: dict = {}
    for k, rate in enumerate(rates.tolist()):
        groups.setdefault(rate, []).append(k)
    return tuple(tuple(g) for g in groups.values())


def keeps_order(flow, groups: tuple) -> bool:
    """Whether the bundles of ``groups`` (in order, each its instances' entries in order)
    put every link's entries in the order the instances have them: each link's loads are
    then the same sums, term for term, as with one flow per instance. Two instances of
    different groups that share a link, the later instance in the earlier group, would
    add their terms in another order."""
    position = np.empty(len(flow.parts) - 1, np.int64)
    position[[k for g in groups for k in g]] = np.arange(len(position))
    entry_position = np.repeat(position, np.diff(flow.parts))
    order = np.argsort(flow.links, kind="stable")       # per link, in instance order
    links, at = flow.links[order], entry_position[order]
    return not np.any((links[1:] == links[:-1]) & (at[1:] < at[:-1]))


def incidence(flows: list) -> FlowIncidence:
    """The flows in compressed form; ``part`` / ``part_owner`` set where any is a bundle."""
    inc = FlowIncidence.from_lists([f.links for f in flows], [f.coef for f in flows],
                                   [f.max_rate for f in flows])
    if all(f.parts is None for f in flows):
        return inc
    counts = [1 if f.parts is None else len(f.parts) - 1 for f in flows]
    owner = np.repeat(np.arange(len(flows), dtype=np.int64), counts)
    sizes = np.concatenate([np.array([len(f.links)]) if f.parts is None else np.diff(f.parts)
                            for f in flows])
    part = np.repeat(np.arange(len(owner), dtype=np.int64), sizes)
    return replace(inc, part=part, part_owner=owner)


def slowest_rate(flow, rate_alone) -> float:
    """The smallest of ``rate_alone(instance)`` over the bundle's instances (the last to
    finish where each sees the links alone)."""
    return min(rate_alone(f) for f in instances(flow))


class Join:
    """Where a split bundle's instances report: the bundle finishes with the last."""

    def __init__(self, flow, done, count: int):
        self.flow, self.done, self.left = flow, done, count
