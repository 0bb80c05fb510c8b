"""From a topology name (and a scenario's what-ifs) to a :class:`~simulator.cluster.Cluster`.

The one place the scenario -> graph -> cluster wiring lives: ``run``, ``reliability``,
studies and the importer's replay all build their cluster here.
"""

from __future__ import annotations

import networkx as nx

from simulator.cluster import Cluster
from simulator.constants import ModelConstants
from simulator.errors import ConfigError
from simulator.topology.loader import (SCENARIO_LINKS, load_topology, resolve_topology,
                                       topology_from_dict)
from simulator.yamlio import read_yaml


def load_cluster(topology: str, nodes: int | None = None, links: dict | None = None, *,
                 ecmp: str = "spread", seed: int = 0,
                 constants: ModelConstants | None = None) -> Cluster:
    """The cluster of ``topology`` (a file or shipped name) with ``nodes`` servers and the
    what-if ``links`` (``{link_type: {bw, latency}}``); capacities at the efficiencies of
    ``constants``.

    :raises ConfigError: as :func:`~simulator.topology.loader.resolve_topology` and
        :func:`~simulator.topology.loader.load_topology`.
    """
    graph = load_topology(resolve_topology(topology), nodes=nodes, links=links or None)
    return Cluster.from_graph(graph, constants, ecmp=ecmp, seed=seed)


def graph_gpus(G: nx.Graph) -> int:
    """The GPUs of a cluster graph."""
    return sum(1 for _, d in G.nodes(data=True) if d.get("kind") == "gpu")


def scenario_gpus(scn, G: nx.Graph) -> int:
    """The GPUs a scenario runs on: ``cluster.gpus``, else every GPU of its graph ``G``."""
    return scn.cluster.gpus or graph_gpus(G)


def scenario_graph(scn) -> nx.Graph:
    """The topology graph of a :class:`~simulator.scenario.Scenario`'s ``cluster`` section,
    its ``links`` what-ifs applied (what :func:`scenario_cluster` builds its cluster from).

    :raises ConfigError: as :func:`~simulator.topology.loader.load_topology`; a mistake in
        the scenario's ``cluster`` section (``topology``, ``nodes``, ``links``) names the
        scenario's file, one in the topology file names that file.
    """
    c = scn.cluster
    try:
        path = resolve_topology(c.topology)
        if c.topology_set:
            return _topology_with_sets(scn, path)
        return load_topology(path, nodes=c.nodes, links=c.links or None,
                             nodes_from="cluster.nodes")
    except ConfigError as exc:
        if exc.source == SCENARIO_LINKS:          # the scenario's cluster.links
            exc = ConfigError(exc.reason, field=exc.field)
        elif exc.field == "cluster.nodes":         # named in the topology's file
            exc = ConfigError(exc.reason, field="nodes")
        raise scn.located(exc, "cluster") from None


def scenario_cluster(scn, constants: ModelConstants | None = None,
                     graph: nx.Graph | None = None) -> Cluster:
    """The cluster of a :class:`~simulator.scenario.Scenario`'s ``cluster``
    section (ECMP salted with its ``simulation.seed``)."""
    c = scn.cluster
    return Cluster.from_graph(scenario_graph(scn) if graph is None else graph, constants,
                              qps=scn.nccl.ib_qps_per_connection,
                              ecmp=c.ecmp, seed=scn.simulation.seed)


def _topology_with_sets(scn, path) -> nx.Graph:
    """The topology file ``path`` with the scenario's ``cluster.topology_set`` keys
    (``--set topology.params.node.gpu=H100-SXM``) set before building, as a study's
    ``topology.*`` axes are. An error about a key that was set names that ``--set``.

    :raises ConfigError: as :func:`~simulator.topology.loader.topology_from_dict`.
    """
    c = scn.cluster
    return topology_with_keys(path, c.topology_set, source=scn.source, prefix="--set topology.",
                              nodes=c.nodes, links=c.links or None, nodes_from="cluster.nodes")


def topology_with_keys(path, keys: dict, *, source: str, prefix: str,
                       nodes: int | None = None, links: dict | None = None,
                       nodes_from: str = "--nodes") -> nx.Graph:
    """The topology file ``path`` with dotted ``keys`` (``{"params.node.nics": 4}``) set
    before building. An error about a key that was set is reported as ``source`` and field
    ``prefix + key`` (e.g. ``quickstart.yaml: --set topology.params.gpu: ...``).

    :raises ConfigError: as :func:`~simulator.topology.loader.topology_from_dict`.
    """
    data = read_yaml(path, "topology file")
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", source=str(path))
    for key, value in keys.items():
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"{part!r} is not a mapping, cannot set {key}",
                                  source=source, field=f"{prefix}{key}")
            node = nxt
        node[parts[-1]] = value
    try:
        return topology_from_dict(data, source=str(path), nodes=nodes, links=links,
                                  nodes_from=nodes_from)
    except ConfigError as exc:
        field = exc.field or ""
        if exc.source == str(path) and any(field == k or field.startswith(k + ".")
                                           or k.startswith(field + ".") for k in keys):
            raise ConfigError(exc.reason, source=source, field=f"{prefix}{field}") from None
        raise
