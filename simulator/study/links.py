"""Where an iteration's communication time goes: the busiest links and the phase that
loads them, so a study's report can say why scaling stops being linear.

* Links get a *role* from what they join: ``NVLink links``, ``PCIe links``, ``NIC-leaf
  links``, ``leaf-spine uplinks``... (``docs/topology-conventions.md``: node ``kind`` and a
  switch's ``tier``).
* A link's utilisation *while communicating* is the capacity its transfers took
  (``Timeline.machine.link_occupancy_bytes``) over (capacity x the critical rank class's
  communication time), capped at 1: the mean over the whole iteration hides saturation
  behind compute.
* A *phase* is a collective and the training phase it runs in (``reduce_scatter
  (backward)``). The phase that loads the busiest link type most is found from the fabric's
  utilisation samples per link type (``Timeline.machine.link_samples``): each sample interval's
  load is credited to the phases running then.
"""

from __future__ import annotations

import json

import numpy as np

from ..engine.records import COMM_KINDS, Timeline
from ..metrics.summary import COMPUTE_KINDS, critical_class, union_length

_CLASS_ROLES = {"nvlink": "NVLink links", "infinity_fabric": "Infinity Fabric links",
               "pcie": "PCIe links", "cpu": "CPU links"}


def link_role(G, u: str, v: str, link_class: str) -> str:
    """What a link joins, in words (``leaf-spine uplinks``, ``NIC-leaf links``...)."""
    if link_class in _CLASS_ROLES:
        return _CLASS_ROLES[link_class]
    a, b = G.nodes[u], G.nodes[v]
    tiers = sorted(d.get("tier", d.get("kind", "?")) for d in (a, b))
    if a.get("kind") == b.get("kind") == "switch":
        return f"{tiers[0]}-{tiers[1]} uplinks"
    if "switch" in (a.get("kind"), b.get("kind")):
        tier = (a if a.get("kind") == "switch" else b).get("tier", "switch")
        return f"NIC-{'switch' if tier == 'single' else tier} links"
    return f"{a.get('kind', '?')}-{b.get('kind', '?')} links"


def link_roles(cluster) -> np.ndarray:
    """The role of every directed link, indexed like ``cluster.capacity_bytes_per_s``."""
    roles = np.empty(len(cluster.link_id), dtype=object)
    for (u, v), i in cluster.link_id.items():
        roles[i] = link_role(cluster.G, u, v, str(cluster.link_class[i]))
    return roles


def phase_key(collective: str, phase: str) -> str:
    return f"{collective} ({phase})" if phase else collective


def comm_summary(tl: Timeline, trace, cluster, comm_s: float) -> dict:
    """Per-iteration facts about communication (columns of a study's results)."""
    cls = critical_class(tl)
    ops = {op.id: op for c in trace.classes if c.id == cls for op in c.ops}
    recs = [r for r in tl.records if r.cls == cls]
    comm = [(r, phase_key(ops[r.op_id].collective or r.kind if r.op_id in ops else r.kind,
                          r.phase)) for r in recs if r.kind in COMM_KINDS]
    compute = [(r.start_s, r.end_s) for r in recs if r.kind in COMPUTE_KINDS]
    out = {"exposed_by_phase": _exposed_by_phase(comm, compute)}
    out["top_exposed_phase"] = max(out["exposed_by_phase"],
                                   key=out["exposed_by_phase"].get, default="")
    cap = cluster.capacity_bytes_per_s
    busy = np.divide(tl.machine.link_occupancy_bytes, cap * comm_s, out=np.zeros_like(cap),
                     where=(cap > 0) & (comm_s > 0))
    busy = np.minimum(busy, 1.0)
    roles = link_roles(cluster)
    by_role: dict[str, float] = {}
    for role, u in zip(roles, busy):
        by_role[role] = max(by_role.get(role, 0.0), float(u))
    i = int(np.argmax(busy)) if len(busy) else -1
    link_type = str(cluster.link_type[i]) if i >= 0 else ""
    of_type = cluster.link_type == link_type
    used = cap[of_type & (tl.machine.link_occupancy_bytes > 0)].sum()
    phase, phase_util = _loading_phase(tl, comm, link_type,
                                       cap[of_type].sum() / used if used > 0 else 1.0)
    out.update(busiest_link=str(roles[i]) if i >= 0 else "", busiest_link_type=link_type,
               busiest_link_util=float(busy[i]) if i >= 0 else 0.0,
               busiest_phase=phase, busiest_phase_util=phase_util,
               link_util_by_role=by_role)
    out["exposed_by_phase"] = json.dumps(out["exposed_by_phase"], sort_keys=True)
    out["link_util_by_role"] = json.dumps(by_role, sort_keys=True)
    return out


def _exposed_by_phase(comm: list, compute: list[tuple[float, float]]) -> dict[str, float]:
    """Seconds of each phase's communication not hidden under compute."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for r, key in comm:
        spans.setdefault(key, []).append((r.start_s, r.end_s))
    busy = union_length(compute)
    return {key: max(union_length(s + compute) - busy, 0.0) for key, s in spans.items()}


def _loading_phase(tl: Timeline, comm: list, link_type: str,
                   scale: float) -> tuple[str, float]:
    """The phase during which links of ``link_type`` carry the most load (utilisation x
    time), and their mean utilisation while it runs. The samples are fractions of the
    whole type's capacity; ``scale`` turns them into fractions of the links in use."""
    if not comm or not tl.machine.link_samples or link_type not in tl.machine.link_groups:
        return "", 0.0
    g = tl.machine.link_groups.index(link_type)
    t0 = np.array([t for t, _ in tl.machine.link_samples])
    load = np.array([f[g] for _, f in tl.machine.link_samples]) * scale
    # Load is constant between samples: its integral from 0 is piecewise linear.
    widths = np.diff(np.append(t0, max(tl.iteration_time_s, t0[-1])))
    cumulative = np.concatenate([[0.0], np.cumsum(load * widths)])

    def integral_to(t: np.ndarray) -> np.ndarray:
        k = np.clip(np.searchsorted(t0, t, side="right") - 1, 0, len(t0) - 1)
        return cumulative[k] + load[k] * np.clip(t - t0[k], 0, widths[k])

    keys = sorted({key for _, key in comm})
    index = {k: j for j, k in enumerate(keys)}
    starts = np.maximum(np.array([r.start_s for r, _ in comm]), t0[0])
    ends = np.maximum(np.array([r.end_s for r, _ in comm]), starts)
    which = np.array([index[key] for _, key in comm])
    integral = np.bincount(which, integral_to(ends) - integral_to(starts), len(keys))
    duration = np.bincount(which, ends - starts, len(keys))
    j = int(np.argmax(integral))
    return keys[j], min(float(integral[j] / duration[j]), 1.0) if duration[j] > 0 else 0.0
