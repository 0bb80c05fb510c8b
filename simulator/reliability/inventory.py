"""Components of the job's cluster and the blast radius of each one's failure.

From the topology graph: every node (server), GPU, NIC, network link, leaf and spine switch
the job depends on, and what its failure does (:class:`Blast`):

* a server, one of its GPUs or NICs: that server leaves the job;
* a leaf switch (or the single switch): every server with a NIC on it leaves the job
  ("a leaf switch takes down every node behind it");
* a link whose loss isolates a NIC, or a bridge of the switch fabric: the servers cut off
  leave the job;
* any other link, or a spine that is not an articulation point: the fabric reroutes; the job
  keeps running, slower, on the degraded fabric until the repair. Degraded fabrics are grouped
  by symmetry (``reroute`` key: the link's tiers and type) and one representative of each
  group is re-simulated.

A failure "interrupts" the job when a server leaves it (torchrun restarts every worker) or
when the class is configured ``effect: interrupt``.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

NONE = -1


@dataclass(frozen=True)
class Blast:
    """What one component's failure does: servers lost, whether it interrupts, reroute key."""

    lost: tuple[int, ...]
    interrupts: bool
    reroute: str | None


@dataclass(frozen=True)
class ComponentSet:
    """The components of one class, in a fixed order (``names[i]`` has ``blasts[i]``)."""

    cls: str
    names: tuple[str, ...]
    blasts: tuple[Blast, ...]
    # what to remove from the graph to build each reroute key's degraded fabric
    representatives: dict[str, tuple]

    def __len__(self) -> int:
        return len(self.names)


def job_servers(G: nx.Graph, world_size: int) -> list[int]:
    """Servers that hold the job's ranks ``0 .. world_size-1``, sorted."""
    return sorted({d["server"] for _, d in G.nodes(data=True)
                   if d.get("kind") == "gpu" and d.get("rank", world_size) < world_size})


def inventory(G: nx.Graph, world_size: int, effects: dict[str, str]) -> dict[str, ComponentSet]:
    """Every component class of the job (see module docstring).

    :param effects: per class ``auto`` | ``interrupt`` | ``reroute`` (the config's ``effect``).
    """
    servers = job_servers(G, world_size)
    used = set(servers)
    sw = nx.Graph(G.subgraph(n for n, d in G.nodes(data=True) if d.get("kind") == "switch"))
    nic_switches = _nic_switches(G, used)
    out = {
        "node": _simple("node", [f"n{s}" for s in servers], [(s,) for s in servers]),
        "gpu": _simple("gpu", *_members(G, used, "gpu", world_size)),
        "nic": _simple("nic", *_members(G, used, "nic", world_size)),
        "link": _links(G, sw, nic_switches, effects.get("link", "auto")),
        "leaf_switch": _switches(G, sw, nic_switches, ("leaf", "single"),
                                 effects.get("leaf_switch", "auto")),
        "spine_switch": _switches(G, sw, nic_switches, ("spine",),
                                  effects.get("spine_switch", "auto")),
        "software": _simple("software", ["job"], [()]),
    }
    return out


def _simple(cls: str, names: list[str], lost: list[tuple[int, ...]]) -> ComponentSet:
    return ComponentSet(cls, tuple(names), tuple(Blast(tuple(x), True, None) for x in lost), {})


def _members(G: nx.Graph, used: set[int], kind: str, world: int):
    rows = sorted(((d["server"], d.get("index", 0), n) for n, d in G.nodes(data=True)
                   if d.get("kind") == kind and d.get("server") in used
                   and (kind != "gpu" or d.get("rank", world) < world)))
    return [n for _, _, n in rows], [(s,) for s, _, _ in rows]


def _nic_switches(G: nx.Graph, used: set[int]) -> dict[str, tuple[int, list[str]]]:
    """NIC name -> (server, switches it is cabled to), for the job's servers."""
    out = {}
    for n, d in G.nodes(data=True):
        if d.get("kind") == "nic" and d.get("server") in used:
            out[n] = (d["server"], [m for m in G[n] if G.nodes[m].get("kind") == "switch"])
    return out


def _cut_off(sw: nx.Graph, nic_switches, removed_edge=None, removed_node=None) -> tuple[int, ...]:
    """Servers with a NIC on a switch no longer in the fabric's largest piece."""
    H = sw.copy()
    if removed_edge is not None:
        H.remove_edge(*removed_edge)
    if removed_node is not None:
        H.remove_node(removed_node)
    parts = sorted(nx.connected_components(H), key=lambda c: (-len(c), min(c)))
    main = parts[0] if parts else set()
    return tuple(sorted({s for s, sws in nic_switches.values()
                         if any(x not in main for x in sws)}))


def _links(G, sw, nic_switches, effect: str) -> ComponentSet:
    names, blasts, reps = [], [], {}
    bridges = {frozenset(e) for e in nx.bridges(sw)} if sw.number_of_edges() else set()
    net = sorted((u, v, d) for u, v, d in G.edges(data=True) if d.get("link_class") == "net")
    for u, v, d in net:
        nic = u if u in nic_switches else v if v in nic_switches else None
        kinds = (G.nodes[u].get("kind"), G.nodes[v].get("kind"))
        if nic is None and kinds != ("switch", "switch"):
            continue
        if nic is not None:
            server, sws = nic_switches[nic]
            lost = (server,) if len(sws) <= 1 else ()
        elif frozenset((u, v)) in bridges:
            lost = _cut_off(sw, nic_switches, removed_edge=(u, v))
        else:
            lost = ()
        key = None
        if not lost:
            tiers = sorted(G.nodes[x].get("tier", G.nodes[x].get("kind")) for x in (u, v))
            key = f"link {'-'.join(tiers)} {d.get('link_type', '?')}"
            reps.setdefault(key, ("edge", u, v))
        names.append(f"{u}~{v}")
        blasts.append(Blast(lost, bool(lost) or effect == "interrupt", key))
    return ComponentSet("link", tuple(names), tuple(blasts), reps)


def _switches(G, sw, nic_switches, tiers, effect: str) -> ComponentSet:
    names, blasts, reps = [], [], {}
    cut_points = set(nx.articulation_points(sw)) if len(sw) > 2 else set()
    behind_of: dict[str, set[int]] = {}
    for server, sws in nic_switches.values():
        for x in sws:
            behind_of.setdefault(x, set()).add(server)
    for n in sorted(sw):
        if G.nodes[n].get("tier") not in tiers:
            continue
        behind = tuple(sorted(behind_of.get(n, ())))
        lost = behind or (_cut_off(sw, nic_switches, removed_node=n) if n in cut_points else ())
        key = None
        if not lost:
            key = f"{G.nodes[n].get('tier')} switch"
            reps.setdefault(key, ("node", n))
        names.append(n)
        blasts.append(Blast(lost, bool(lost) or effect == "interrupt", key))
    cls = "spine_switch" if "spine" in tiers else "leaf_switch"
    return ComponentSet(cls, tuple(names), tuple(blasts), reps)


def degraded_graph(G: nx.Graph, element: tuple) -> nx.Graph:
    """A copy of ``G`` without one edge (``("edge", u, v)``) or switch (``("node", n)``)."""
    H = G.copy()
    if element[0] == "edge":
        H.remove_edge(element[1], element[2])
    else:
        H.remove_node(element[1])
    return H
