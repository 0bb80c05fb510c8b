"""One collective validation case from its ``cases.yaml`` entry: the topology graph with its
overrides, the ranks and ops checked against the measured table
(:func:`simulator.validation.collectives.validate.load_cases` reads the files)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import networkx as nx
import pandas as pd

from simulator.choices import OPS
from simulator.errors import ConfigError
from simulator.topology.generators import MULTI_NODE
from simulator.topology.loader import resolve_topology, topology_from_dict
from simulator.validation.collectives.schema import Case, CaseSpec
from simulator.validation.common import read_yaml as _read_yaml


def apply_overrides(data: dict, overrides: dict[str, Any], source: str, where: str) -> dict:
    """A deep copy of the topology mapping ``data`` with dotted keys set.

    Every key but the last must name an existing mapping (``params.node.nics`` needs
    ``params.node``); the loader then checks the value.

    :raises ConfigError: field ``<where>.<dotted key>`` when a parent is missing.
    """
    out = copy.deepcopy(data)
    for key, value in overrides.items():
        parts = key.split(".")
        cur = out
        for i, part in enumerate(parts[:-1]):
            nxt = cur.get(part) if isinstance(cur, dict) else None
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {key!r}: the topology has no mapping "
                                  f"{'.'.join(parts[:i + 1])!r}", source=source,
                                  field=f"{where}.{key}")
            cur = nxt
        cur[parts[-1]] = value
    return out


def _topology_data(spec: CaseSpec, source: str, where: str) -> tuple[Path, dict]:
    """The topology file of ``spec`` and its mapping with the overrides applied."""
    try:
        path = resolve_topology(spec.topology)
    except ConfigError as exc:
        raise ConfigError(exc.reason, source=source, field=f"{where}.topology") from None
    data = _read_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("params", {}), dict):
        raise ConfigError(f"topology file {path} is not a mapping with params", source=source,
                          field=f"{where}.topology")
    return path, apply_overrides(data, spec.overrides, source, f"{where}.overrides")


def _build_graph(tid: str, spec: CaseSpec, source: str) -> tuple[Path, nx.Graph]:
    where = f"cases.{tid}"
    path, data = _topology_data(spec, source, where)
    nodes = spec.nodes
    if data.get("generator") not in MULTI_NODE:
        if nodes not in (None, 1):
            raise ConfigError(f"topology {spec.topology!r} is a single server; nodes must be 1",
                              source=source, field=f"{where}.nodes")
        nodes = None
    try:
        G = topology_from_dict(data, source=str(path), nodes=nodes)
    except ConfigError as exc:
        f = exc.field or ""
        if f == "--nodes":
            fld = f"{where}.nodes"
        elif any(f == k or f.startswith(k + ".") or k.startswith(f + ".")
                 for k in spec.overrides) and f:
            fld = f"{where}.overrides.{f}"
        else:
            fld = f"{where}.topology"
        raise ConfigError(f"topology {spec.topology!r} ({f or 'file'}): {exc.reason}",
                          source=source, field=fld) from None
    return path, G


def _ops(c: CaseSpec, source: str, where: str) -> tuple[str, ...]:
    ops = tuple([c.op] if isinstance(c.op, str) else c.op)
    for op in ops:
        if op not in OPS:
            raise ConfigError(f"unknown op {op!r}; valid: {', '.join(OPS)}", source=source,
                              field=f"{where}.op")
    return ops


def _ranks(c: CaseSpec, G: nx.Graph, source: str, where: str) -> list[int]:
    n_gpus = sum(1 for _, k in G.nodes(data="kind") if k == "gpu")
    ranks = list(range(n_gpus)) if c.ranks is None else list(c.ranks)
    if len(ranks) < 2 or len(set(ranks)) != len(ranks) or \
            any(not 0 <= r < n_gpus for r in ranks):
        raise ConfigError(f"ranks must be at least 2 distinct ranks in 0..{n_gpus - 1}, "
                          f"got {c.ranks}", source=source, field=f"{where}.ranks")
    return ranks


def _table_rows(tid: str, ops: tuple[str, ...], meas: pd.DataFrame, source: str,
                meas_source: str, where: str) -> pd.DataFrame:
    rows = meas[meas["table_id"] == tid].sort_values(["op", "size_bytes"])
    if rows.empty:
        raise ConfigError(f"no rows for table {tid!r} in {meas_source}", source=source,
                          field=where)
    extra_ops = sorted(set(rows["op"]) - set(ops))
    if extra_ops:
        raise ConfigError(f"the table measures {', '.join(extra_ops)}, not listed in op "
                          f"({', '.join(ops)})", source=source, field=f"{where}.op")
    return rows


def _check_placement(G: nx.Graph, ranks: list[int], rows: pd.DataFrame, source: str,
                     where: str) -> None:
    """The simulated ranks and servers must be the measured ones."""
    servers = {G.nodes[g]["server"] for g in G.nodes if G.nodes[g].get("kind") == "gpu"
               and G.nodes[g]["rank"] in set(ranks)}
    m_ranks, m_nodes = set(rows["ranks"]), set(rows["nodes"])
    if m_ranks != {len(ranks)} or m_nodes != {len(servers)}:
        raise ConfigError(f"simulates {len(ranks)} ranks on {len(servers)} server(s) but "
                          f"the table measured {sorted(m_ranks)} ranks on "
                          f"{sorted(m_nodes)} node(s)", source=source,
                          field=f"{where}.ranks" if m_nodes == {len(servers)}
                          else f"{where}.nodes")


def build_case(tid: str, c: CaseSpec, meas: pd.DataFrame, source: str,
               meas_source: str) -> Case:
    """The case ``tid`` of ``cases.yaml`` (``source``) with its rows of ``meas``.

    :raises ConfigError: field ``cases.<tid>.<key>``: unknown op, bad topology or overrides,
        ranks out of range, no rows, ops or rank/node counts that differ from the table.
    """
    where = f"cases.{tid}"
    ops = _ops(c, source, where)
    topo_path, G = _build_graph(tid, c, source)
    ranks = _ranks(c, G, source, where)
    rows = _table_rows(tid, ops, meas, source, meas_source, where)
    _check_placement(G, ranks, rows, source, where)
    return Case(tid, c.topology, topo_path, c.nodes, dict(c.overrides), ranks, ops,
                c.split, c.nccl, c.notes, G, rows.reset_index(drop=True), source,
                c.cuda_graph, None if c.fits is None else tuple(c.fits))


__all__ = ["apply_overrides", "build_case"]
