"""Failures across the fleet: what fails, how often, and what each failure stops or slows.

The components and their blast radius come from the reliability model's inventory of the
whole cluster (:func:`simulator.reliability.inventory.inventory`, docs/reliability.md):

* a node, or one of its GPUs or NICs: the server is out until the repair (a GPU or NIC
  fault drains its server, as the reliability model takes the server out of the job);
* a leaf switch: every server whose NICs reach it is out;
* a link whose loss isolates a NIC, a bridge of the switch fabric, a spine that is an
  articulation point: the servers cut off are out;
* any other link or spine (a Clos with other paths left): nothing stops; while it is down the
  fabric is *degraded*: the jobs whose traffic crosses the spine (and the multi-server jobs
  on a server whose NIC cable it is) run at their step time on the fabric without it.

Every job with a GPU on a server that goes out stops and restarts from its last checkpoint
(:mod:`simulator.fleet.simulate`).

Rates are as the reliability model writes them: per component-time of the class's own
component (``"0.303 per 1000 gpu-days"``), or per node- or gpu-time of the whole cluster
(``"0.316 per 1000 node-days"`` for links: that rate times the servers, shared by all the
links). Nodes and leaf switches each fail from their own stream ``(seed, component)``; the
classes added after them (GPUs, NICs, links, spines: thousands of components) fail as one
Poisson process per class at their summed rate, the component drawn uniformly (a draw of
one that is down already is no failure: thinning, the same process as each failing alone).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..reliability.inventory import inventory
from ..reliability.quantities import parse_duration, parse_rate
from .mix import Mix
from .placement import Layout

NOUN = {"node": "node", "leaf_switch": "switch", "gpu": "gpu", "nic": "nic", "link": "link",
        "spine_switch": "switch"}
REPAIR = {"node": "repair", "leaf_switch": "leaf_repair", "gpu": "gpu_repair",
          "nic": "nic_repair", "link": "link_repair", "spine_switch": "spine_repair"}
BY_CLASS = ("gpu", "nic", "link", "spine_switch")     # one Poisson process per class
# the classes a scheduled failure's key names (a NIC's name given as a gpu: is no GPU)
SCHEDULED = {"node": ("node",), "gpu": ("gpu",), "nic": ("nic",), "link": ("link",),
             "switch": ("leaf_switch", "spine_switch")}


@dataclass(frozen=True)
class Component:
    """What fails: its name, the servers it takes out while it is down, its own rate (0
    where its class fails as one process) and repair time, and ``degrades``: the fabric
    element missing while it is down (``("node", switch)`` or ``("edge", u, v)``, as
    :func:`~simulator.reliability.inventory.degraded_graph` takes it) where it takes no
    server out; ``slows``: the server of a NIC whose (second) cable it is (a spine or a
    link between switches slows every job crossing the spine)."""

    name: str
    servers: tuple[int, ...]
    rate_per_s: float = 0.0
    repair_s: float = 86400.0
    degrades: tuple = ()
    slows: tuple[int, ...] = ()         # a NIC's cable: its server's multi-server jobs
    cls: str = "node"                   # its class (a key of NOUN)


@dataclass(frozen=True)
class FailureClass:
    """``components[first:first + count]`` failing as one Poisson process of
    ``rate_per_s`` (the class's sum), the failed one drawn uniformly."""

    name: str
    first: int
    count: int
    rate_per_s: float


def failing(cluster, layout: Layout, mix: Mix, source: str
            ) -> tuple[tuple[Component, ...], tuple[FailureClass, ...]]:
    """The components that fail, in a fixed order: every server (its node), every leaf
    switch (the servers whose NICs reach it), then, where the mix gives them a rate or
    names one in its schedule, every GPU, NIC, link and spine of the inventory; and the
    classes failing as one process.

    :raises ConfigError: naming ``failures.<class>`` for a rate of another basis.
    """
    f = mix.failures
    counts = {"node": len(layout.gpus), "gpu": layout.n_gpus}
    rate = {c: _rate(getattr(f, c), c, source, counts) for c in NOUN}
    repair = {c: parse_duration(getattr(f, REPAIR[c])) for c in NOUN}
    nodes = [Component(f"node {s}", (s,), rate["node"](1), repair["node"])
             for s in range(len(layout.gpus))]
    under: dict[str, list[int]] = {}
    for s, leaves in enumerate(layout.leaves):
        for name in sorted(leaves):
            under.setdefault(name, []).append(s)
    leaves = [Component(name, tuple(servers), rate["leaf_switch"](len(under)),
                        repair["leaf_switch"], cls="leaf_switch")
              for name, servers in sorted(under.items())]
    out = nodes + leaves
    classes = []
    if _needs_inventory(mix, rate):
        index = {sid: i for i, sid in enumerate(cluster.gpus_by_server)}
        inv = inventory(cluster.G, cluster.n_gpus, {})
        for c in BY_CLASS:
            comps = inv[c]
            total = rate[c](len(comps)) * len(comps)
            if total > 0:
                classes.append(FailureClass(c, len(out), len(comps), total))
            out += [_component(cluster.G, index, name, b, c, repair[c])
                    for name, b in zip(comps.names, comps.blasts)]
    return tuple(out), tuple(classes)


def _needs_inventory(mix: Mix, rate: dict) -> bool:
    """Whether GPUs, NICs, links or spines can fail: a rate, or a scheduled failure of one
    (a switch not among the leaves may be a spine)."""
    return (any(rate[c](1) > 0 for c in BY_CLASS)
            or any(e.gpu or e.nic or e.link or e.switch for e in mix.failures.schedule))


def _component(G, index: dict, name: str, blast, cls: str, repair_s: float) -> Component:
    """The fleet's component of one inventory entry (``index``: server id -> the layout's
    server)."""
    lost = tuple(sorted(index[s] for s in blast.lost))
    if lost:
        return Component(name, lost, 0.0, repair_s, cls=cls)
    if cls != "link":
        return Component(name, (), 0.0, repair_s, ("node", name), cls=cls)
    u, v = name.split("~")
    nics = [x for x in (u, v) if G.nodes[x].get("kind") == "nic"]
    return Component(name, (), 0.0, repair_s, ("edge", u, v),
                     tuple(index[G.nodes[x]["server"]] for x in nics), cls=cls)


def _rate(text: str, cls: str, source: str, counts: dict):
    """A function of the class's component count giving one component's failures per
    second, from ``text`` per the class's own component or per node or GPU of the cluster.

    :raises ConfigError: naming ``failures.<cls>`` for a rate of another basis.
    """
    rate = parse_rate(text)
    noun = NOUN[cls]
    if rate.per_s <= 0:
        return lambda n: 0.0
    if rate.basis == noun:
        return lambda n: rate.per_s
    if rate.basis in counts:
        return lambda n: rate.per_s * counts[rate.basis] / n if n else 0.0
    others = " or ".join(f"{b}-" for b in counts if b != noun)
    raise ConfigError(f"{rate.text!r} is per {rate.basis}; a {noun} failure rate is per "
                      f"{noun}-time, or per {others}time of the cluster, e.g. '6.5 per 1000 "
                      f"{noun}-days'", source=source, field=f"failures.{cls}")


def scheduled(mix: Mix, components: tuple[Component, ...], servers: int,
              source: str) -> tuple:
    """(time, component index) of each failure of the mix's schedule.

    :raises ConfigError: naming ``failures.schedule[i].<key>`` for a component that is not
        in the cluster.
    """
    index = {c.name: i for i, c in enumerate(components)}
    out = []
    for i, f in enumerate(mix.failures.schedule):
        field = f"failures.schedule[{i}]"
        if f.node is not None:
            if f.node >= servers:
                raise ConfigError(f"node {f.node}: the cluster's servers are "
                                  f"0..{servers - 1}", source=source, field=f"{field}.node")
            names, key = [f"node {f.node}"], "node"
        elif f.link is not None:
            a, b = f.link
            names, key = [f"{a}~{b}", f"{b}~{a}"], "link"
        else:
            key = next(k for k in ("switch", "gpu", "nic") if getattr(f, k) is not None)
            names = [getattr(f, key)]
        found = next((index[n] for n in names if n in index
                      and components[index[n]].cls in SCHEDULED[key]), None)
        if found is None:
            what = {"switch": "leaf or spine switch", "link": "link between switches or a "
                    "NIC and its switch"}.get(key, key)
            raise ConfigError(f"no {what} {names[0]!r} in the cluster", source=source,
                              field=f"{field}.{key}")
        out.append((parse_duration(f.at), found))
    return tuple(out)
