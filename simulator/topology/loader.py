"""Topology YAML files: read, validate, and build the graph with a named generator.

A file looks like::

    name: dgx-a100-superpod
    description: "..."
    generator: rail_optimized
    params: {nodes: 4, node: {type: dgx_a100, nics: 8, nic: ib-hdr}, nodes_per_leaf: 20}
    links: {ib-hdr: {bw: "400 Gb/s"}}   # optional what-if: new figures per link type
    source: "where the design comes from"

A single server's file may name the fabric its servers scale out on (``multi_node:
dgx-b200-superpod``): given a server count (``--nodes``, ``cluster.nodes``) it builds that
fabric with this file's server (its params become the fabric's ``params.node``, its links
apply too), so ``--set cluster.topology=dgx-b200`` on a 256-GPU scenario is
``dgx-b200-superpod`` with 32 nodes, graph and price alike.

Every mistake becomes one :class:`ConfigError` line naming the file and the dotted field.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from simulator.errors import ConfigError, TopologyError, did_you_mean, validation_error
from simulator.gcpause import gc_paused
from simulator.inputs import path_name, regular_file
from simulator.yamlio import read_yaml
from simulator.units import UnitError, parse_bandwidth, parse_time
from simulator.topology.checks import check_cluster
from simulator.topology.generators import GENERATORS, MULTI_NODE
from simulator.shipped import find_shipped, shipped_names

SCENARIO_LINKS = "cluster.links"   # the source named by errors in a scenario's overrides


class LinkOverride(BaseModel):
    """New figures for every link of one type (what-if: twice the bandwidth, ...)."""

    model_config = ConfigDict(extra="forbid")

    bw: str | float | None = None        # with a unit: "400 Gb/s", "50 GB/s"
    latency: str | float | None = None   # with a unit: "1.5 us"

    def edge_values(self, source: str, where: str) -> dict[str, float]:
        """The edge attributes this override sets: ``bw_bytes_per_s`` (per physical link,
        > 0) and ``latency_s``, for those given.

        :raises ConfigError: naming ``where.bw`` or ``where.latency`` for a value without a
            unit, one that cannot be read, one that is not finite (``1e999 s``), or a
            bandwidth that is not > 0.
        """
        values = {}
        for field, key, parse in (("bw", "bw_bytes_per_s", parse_bandwidth),
                                  ("latency", "latency_s", parse_time)):
            text = getattr(self, field)
            if text is None:
                continue
            try:
                values[key] = parse(text)
            except UnitError as exc:
                raise ConfigError(str(exc), source=source, field=f"{where}.{field}") from None
            if not math.isfinite(values[key]):
                raise ConfigError(f"must be finite, got {text!r}", source=source,
                                  field=f"{where}.{field}")
            if key == "bw_bytes_per_s" and values[key] <= 0:
                raise ConfigError(f"bandwidth must be > 0, got {text!r}", source=source,
                                  field=f"{where}.{field}")
        return values


_LINK_OVERRIDES = TypeAdapter(dict[str, LinkOverride])


class TopologyFile(BaseModel):
    """The top level of a topology YAML file."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    generator: str
    params: dict[str, Any] = Field(default_factory=dict)
    links: dict[str, LinkOverride] = Field(default_factory=dict)
    multi_node: str | None = None      # a single server's fabric for --nodes (module doc)
    source: str | None = None


def load_topology(path: str | Path, nodes: int | None = None,
                  links: dict | None = None, nodes_from: str = "--nodes") -> nx.Graph:
    """Build the cluster graph described by the YAML file ``path``.

    Parameters
    ----------
    path : str or Path
        Topology file.
    nodes : int, optional
        Server count overriding ``params.nodes``; only for multi-node generators.
    nodes_from : str
        Where ``nodes`` came from, as its errors name it: the ``--nodes`` option, or a
        scenario's ``cluster.nodes``.

    Raises
    ------
    ConfigError
        With ``source=str(path)`` and a dotted ``field``: unreadable file, malformed YAML
        (with its line), unknown keys, unknown generator, unknown parameters, bad values
        (sizes over the generators' limits, :mod:`simulator.topology.args`, whether in
        ``params`` or ``nodes``: checked before anything is built), a ``--nodes`` override
        on a single-node generator, or an unusable resulting graph.
    """
    source = str(path)
    data = read_yaml(Path(path), "topology file")
    with gc_paused():          # a million node and edge dicts, no cycles
        return topology_from_dict(data, source=source, nodes=nodes, links=links,
                                  nodes_from=nodes_from)


# single-server generators and the fabric ``node: {type: ...}`` their servers are
SINGLE_SERVER_TYPE = {"dgx_a100_node": "dgx_a100", "pcie_node": "pcie"}


def _fold_node(data: Any, source: str) -> tuple[Any, set]:
    """``data`` with a single-server generator's ``params.node`` mapping (the key a fabric's
    servers take, ``--set topology.params.node.gpu=H100-SXM``) folded into its params over
    the same keys there, and the folded keys; other data unchanged."""
    params = data.get("params") if isinstance(data, dict) else None
    if (not isinstance(params, dict) or "node" not in params
            or data.get("generator") not in SINGLE_SERVER_TYPE):
        return data, set()
    node, kind = params["node"], SINGLE_SERVER_TYPE[data["generator"]]
    if not isinstance(node, dict):
        raise ConfigError(f"must be a mapping, got {node!r}", source=source,
                          field="params.node")
    if node.get("type", kind) != kind:
        raise ConfigError(f"generator {data['generator']!r} builds a {kind!r} server, got "
                          f"{node['type']!r}", source=source, field="params.node.type")
    keys = {k: v for k, v in node.items() if k != "type"}      # they win over params.*
    rest = {k: v for k, v in params.items() if k != "node"}
    return {**data, "params": {**rest, **keys}}, set(keys)


def topology_from_dict(data: Any, source: str = "<dict>", nodes: int | None = None,
                       links: dict | None = None, nodes_from: str = "--nodes") -> nx.Graph:
    """Build the cluster graph from an already-parsed topology mapping.

    :raises ConfigError: as :func:`load_topology`, attributed to ``source``.
    """
    data, folded = _fold_node(data, source)
    try:
        return _build(data, source, nodes, links, nodes_from)
    except ConfigError as exc:
        key = (exc.field or "").removeprefix("params.").split(".")[0]
        if folded and exc.source == source and key in folded:
            raise ConfigError(exc.reason, source=source,
                              field="params.node." + exc.field.removeprefix("params.")) from None
        raise


def _build(data: Any, source: str, nodes: int | None, links: dict | None,
           nodes_from: str) -> nx.Graph:
    spec = _validate(data, source, nodes is not None)
    generate = GENERATORS[spec.generator][0]
    params = dict(spec.params)
    if nodes is not None and spec.generator not in MULTI_NODE and spec.multi_node:
        return _scaled_out(spec, source, nodes, links, nodes_from)
    if nodes is not None:
        if spec.generator not in MULTI_NODE:
            raise ConfigError(f"generator {spec.generator!r} builds a single server; "
                              f"{nodes_from} applies only to {', '.join(MULTI_NODE)}"
                              f"{_fabrics_of(spec.name)}", source=source, field=nodes_from)
        params["nodes"] = nodes
    try:
        G = generate(**params)
        if spec.generator not in MULTI_NODE:     # the fabrics check their own graph
            check_cluster(G)
    except ConfigError as exc:
        field = exc.field or ""
        where = nodes_from if field == "nodes" and nodes is not None else f"params.{field}"
        raise ConfigError(exc.reason, source=source, field=where.rstrip(".")) from None
    except TopologyError as exc:
        raise ConfigError(str(exc), source=source, field="params") from None
    overrides = [(spec.links, source)]
    if links:
        # Overrides from outside the file (a scenario's cluster.links) win over the file's.
        overrides.append((_scenario_links(links), SCENARIO_LINKS))
    _apply_link_overrides(G, overrides)
    G.graph["name"] = spec.name
    return G


def _fabrics_of(name: str) -> str:
    """``"; fabrics of these servers: dgx-h100-superpod"`` for a single-server topology
    ``name``: the shipped multi-server ones named after it (``mi300x-8gpu``: ``mi300x-*``),
    else ""."""
    stem = name.removesuffix("-8gpu")
    found = []
    for other in shipped_topologies():
        if other == name or not other.startswith(stem + "-"):
            continue
        data = read_yaml(find_shipped("topologies", other), "topology file")
        if isinstance(data, dict) and data.get("generator") in MULTI_NODE:
            found.append(other)
    return f"; fabrics of these servers: {', '.join(found)}" if found else ""


def _scaled_out(spec: TopologyFile, source: str, nodes: int, links: dict | None,
                nodes_from: str) -> nx.Graph:
    """``nodes`` of the server ``spec`` describes on the fabric its ``multi_node`` names
    (module docstring): the fabric file with this server as its ``params.node``."""
    path = find_shipped("topologies", spec.multi_node)
    if path is None:
        raise ConfigError(f"no shipped topology named {spec.multi_node!r}"
                          f"{did_you_mean(spec.multi_node, shipped_topologies())}",
                          source=source, field="multi_node")
    fabric = read_yaml(path, "topology file")
    if fabric.get("generator") not in MULTI_NODE or "node" not in fabric.get("params", {}):
        raise ConfigError(f"{spec.multi_node!r} is not a fabric of servers (its generator "
                          f"has no params.node)", source=source, field="multi_node")
    node = {"type": SINGLE_SERVER_TYPE[spec.generator], **spec.params}
    fabric["params"] = {**fabric["params"], "node": node}
    fabric["links"] = {**fabric.get("links", {}),
                       **{k: v.model_dump(exclude_none=True) for k, v in spec.links.items()}}
    return _build(fabric, str(path), nodes, links, nodes_from)


def _scenario_links(links: Any) -> dict[str, LinkOverride]:
    """A scenario's ``cluster.links`` checked as a topology file's ``links`` section."""
    try:
        return _LINK_OVERRIDES.validate_python(links)
    except ValidationError as exc:
        raise validation_error(exc, source=SCENARIO_LINKS, prefix="links",
                               valid=LinkOverride.model_fields, style="got") from None


def _apply_link_overrides(G: nx.Graph,
                          overrides: list[tuple[dict[str, LinkOverride], str]]) -> None:
    """Set the figures of ``overrides`` (``(links, source)`` pairs, later ones winning key
    by key) on every edge of an overridden ``link_type``, in one pass over the edges.

    ``bw`` is per physical link: an edge standing for several links (``lanes``, e.g. a
    leaf's aggregated uplinks to one spine) gets ``bw x lanes``, so the topology's
    oversubscription survives a what-if bandwidth.

    :raises ConfigError: naming ``source`` and ``links.<type>`` for a type not in ``G``,
        or as :meth:`LinkOverride.edge_values`.
    """
    if not any(links for links, _ in overrides):
        return
    present = {d.get("link_type", "") for _, _, d in G.edges(data=True)}
    changes: dict[str, dict[str, float]] = {}
    for links, source in overrides:
        for link_type, override in links.items():
            where = f"links.{link_type}"
            if link_type not in present:
                raise ConfigError(f"no link of type {link_type!r} in this topology; present: "
                                  f"{', '.join(sorted(present))}", source=source, field=where)
            changes.setdefault(link_type, {}).update(override.edge_values(source, where))
    if not changes:
        return
    for _, _, d in G.edges(data=True):
        values = changes.get(d.get("link_type"))
        if values:
            d.update(values)
            if "bw_bytes_per_s" in values:
                d["bw_bytes_per_s"] = values["bw_bytes_per_s"] * d.get("lanes", 1.0)


def resolve_topology(name_or_path: str | Path) -> Path:
    """Path of a topology given as a file path or a bare shipped name like ``dgx-a100``.

    Bare names are looked up as ``topologies/<name>.yaml`` under the current directory, then
    under the directory holding the ``simulator`` package.

    :raises ConfigError: (field ``topology``) when neither a file nor a shipped name matches;
        the message lists the shipped names.
    """
    path = path_name(name_or_path, "topology")
    if path.is_file():
        return path
    if path.exists():                       # a folder, FIFO or device: say which
        regular_file(path, "topology file")
    if len(path.parts) == 1:
        found = find_shipped("topologies", path.name)
        if found is not None:
            return found
    raise ConfigError(f"no topology file or shipped topology named {str(name_or_path)!r}"
                      f"{did_you_mean(path.stem, shipped_topologies())}; "
                      f"shipped: {', '.join(shipped_topologies()) or 'none found'}",
                      field="topology")


def shipped_topologies() -> list[str]:
    """Bare names of the topology files found in the ``topologies/`` folders (the current
    folder's, the shipped ones: :mod:`simulator.shipped`), sorted."""
    return shipped_names("topologies")


def _validate(data: Any, source: str, nodes_given: bool = False) -> TopologyFile:
    """Check the file's shape, generator name and parameter names (every required one
    given; ``nodes`` may come from outside, ``nodes_given``)."""
    if data is None:
        raise ConfigError("file is empty; expected name, generator and params", source=source)
    if not isinstance(data, dict):
        raise ConfigError(f"top level must be a mapping (name, generator, params, ...), "
                          f"got {type(data).__name__}", source=source)
    try:
        spec = TopologyFile.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, source=source, valid=TopologyFile.model_fields,
                               style="got") from None
    if spec.generator not in GENERATORS:
        raise ConfigError(f"unknown generator {spec.generator!r}; valid: "
                          f"{', '.join(GENERATORS)}", source=source, field="generator")
    signature = inspect.signature(GENERATORS[spec.generator][0]).parameters
    valid = [p for p in signature if p != "G"]
    unknown = [k for k in spec.params if k not in valid]
    if unknown:
        raise ConfigError(f"unknown parameter(s) {', '.join(map(repr, unknown))} for "
                          f"{spec.generator}; valid: {', '.join(valid)}",
                          source=source, field=f"params.{unknown[0]}")
    missing = [p for p in valid if signature[p].default is inspect.Parameter.empty
               and signature[p].kind is not inspect.Parameter.VAR_KEYWORD
               and p not in spec.params and not (p == "nodes" and nodes_given)]
    if missing:
        raise ConfigError(f"missing parameter(s) {', '.join(map(repr, missing))} for "
                          f"{spec.generator}", source=source, field=f"params.{missing[0]}")
    return spec
