"""Helpers of the command line (simulator/cli.py): argument types, rank specs, tables.

Kept apart from ``cli.py`` so the subcommands there stay short, and so these pieces can be
tested without running a command.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .choices import OPS
from .errors import ConfigError
from .units import UnitError, format_size, parse_size

if TYPE_CHECKING:           # pandas and networkx load only when a command needs them
    import networkx as nx

# ------------------------------------------------------------------ collectives by name
# nccl-tests binaries and NCCL API names: all_reduce_perf, allreduce, AllReduce, sendrecv...
_OP_ALIASES = {op.replace("_", ""): op for op in OPS}


def normalise_op(name: str) -> str | None:
    """``"all_reduce_perf"``, ``"allreduce"``, ``"All-Reduce"`` -> ``"all_reduce"``; else None."""
    key = name.strip().lower()
    key = key[: -len("_perf")] if key.endswith("_perf") else key
    return _OP_ALIASES.get(key.replace("_", "").replace("-", ""))


class OpType(click.ParamType):
    """A collective name, nccl-tests spellings accepted."""

    name = "op"

    def convert(self, value, param, ctx):
        op = normalise_op(str(value))
        if op is None:
            self.fail(f"unknown collective {value!r}; choose from {', '.join(OPS)} "
                      f"(nccl-tests names such as all_reduce_perf or sendrecv also work)",
                      param, ctx)
        return op


class SizeType(click.ParamType):
    """A positive byte count with an optional binary prefix: 8, 64K, 1M, 8G."""

    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            size = value
        else:
            text = str(value).strip()
            if text.startswith("-"):
                self.fail(f"{text!r} is negative; sizes are positive byte counts "
                          f"such as 8, 64K, 1M or 8G", param, ctx)
            try:
                size = parse_size(text)
            except UnitError as exc:
                self.fail(str(exc), param, ctx)
        if size <= 0:
            self.fail(f"size must be positive, got {value!r}", param, ctx)
        return size


# ------------------------------------------------------------------------- rank specs
_ITEM = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_ranks(spec: str, n: int, option: str = "--ranks") -> list[int]:
    """Ranks named by ``spec`` (``"0-7"``, ``"0,8,16"``, ``"0-3,8-11"``), in the order given.

    :param n: GPUs in the cluster; valid ranks are ``0 .. n-1``.
    :raises ConfigError: (source ``option``) for an unreadable item, a reversed range, a
        rank outside the cluster, or a rank named twice.
    """
    valid = f"valid ranks are 0-{n - 1} ({n} GPUs)" if n > 1 else "the only valid rank is 0"
    if not spec or not spec.strip():
        raise ConfigError(f"empty rank list; {valid}", source=option)
    ranks: list[int] = []
    for item in spec.split(","):
        m = _ITEM.match(item)
        if not m:
            raise ConfigError(f"cannot read {item.strip()!r} in {spec!r}; write ranks like "
                              f"0-7, 0,8,16 or 0-3,8-11", source=option)
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ConfigError(f"range {item.strip()!r} runs backwards; write {hi}-{lo}",
                              source=option)
        if hi >= n:
            raise ConfigError(f"rank {hi} is outside the cluster; {valid}", source=option)
        ranks.extend(range(lo, hi + 1))
    dup = [r for r, c in Counter(ranks).items() if c > 1]
    if dup:
        raise ConfigError(f"rank {dup[0]} is named more than once in {spec!r}", source=option)
    return ranks


def format_ranks(ranks: list[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3,8"`` (runs of consecutive ranks collapsed)."""
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(parts)


# ----------------------------------------------------------------------- result tables
COLUMNS = ("size_bytes", "count", "type", "time_us", "algbw_GBps", "busbw_GBps", "algorithm",
           "protocol")
FLOAT_BYTES = 4
_PER_RANK_COUNT = ("all_gather", "reduce_scatter", "all_to_all")


def element_count(op: str, size_bytes: int, n_ranks: int) -> int:
    """The ``count`` column of nccl-tests for a float buffer of ``size_bytes``.

    As nccl-tests prints it: elements per rank for all_gather, reduce_scatter and
    all_to_all (their size is the whole gathered buffer), else elements in the buffer.
    """
    if op in _PER_RANK_COUNT:
        return size_bytes // (FLOAT_BYTES * n_ranks)
    return size_bytes // FLOAT_BYTES


def result_row(res) -> dict:
    """One CollectiveResult as a row of :data:`COLUMNS` (GB/s = 1e9 bytes/s)."""
    return {
        "size_bytes": res.size_bytes,
        "count": element_count(res.op, res.size_bytes, res.n_ranks),
        "type": "float",
        "time_us": res.time_s * 1e6,
        "algbw_GBps": res.algbw_bytes_per_s / 1e9,
        "busbw_GBps": res.busbw_bytes_per_s / 1e9,
        "algorithm": res.algorithm,
        "protocol": res.protocol,
    }


def render_rows(rows: list[dict], fmt: str, header: list[str]) -> str:
    """Rows as an nccl-tests table (with ``# header`` lines), CSV, or a JSON list."""
    if fmt == "json":
        return json.dumps(rows, indent=1)
    if fmt == "csv":
        import pandas as pd
        return pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(index=False).rstrip("\n")
    lines = [f"# {h}" if h else "#" for h in header]
    lines.append("#")
    lines.append(f"#{'size':>11} {'count':>13} {'type':>6} {'time':>10} {'algbw':>8} "
                 f"{'busbw':>8}  {'algorithm':>9} {'protocol':>8}")
    lines.append(f"#{'(B)':>11} {'(elements)':>13} {'':>6} {'(us)':>10} {'(GB/s)':>8} "
                 f"{'(GB/s)':>8}")
    for r in rows:
        lines.append(f"{r['size_bytes']:>12} {r['count']:>13} {r['type']:>6} "
                     f"{r['time_us']:>10.2f} {r['algbw_GBps']:>8.2f} {r['busbw_GBps']:>8.2f}  "
                     f"{r['algorithm']:>9} {r['protocol']:>8}")
    avg = sum(r["busbw_GBps"] for r in rows) / len(rows) if rows else 0.0
    lines.append(f"# Avg bus bandwidth    : {avg:g}")
    return "\n".join(lines)


def describe_sizes(sizes: list[int]) -> str:
    n = len(sizes)
    return f"{format_size(sizes[0])} .. {format_size(sizes[-1])} ({n} size{'s' * (n != 1)})"


def sweep_length(min_bytes: int, max_bytes: int, step_factor: float) -> int:
    """How many sizes ``size_sweep`` would produce (without building them)."""
    if math.isinf(step_factor):
        return 1
    return int(math.log(max_bytes / min_bytes) / math.log(step_factor) + 1e-9) + 1


# ------------------------------------------------------------------- topology summary
def _gbps(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:,.1f} GB/s"


def topology_summary(G: nx.Graph, path: Path) -> list[str]:
    """Lines describing a cluster graph: servers, devices, switches, links, leaf ratio."""
    kinds = Counter(d.get("kind") for _, d in G.nodes(data=True))
    nodes = G.graph.get("nodes", len({d["server"] for _, d in G.nodes(data=True)
                                      if d.get("kind") == "gpu"}))
    lines = [f"topology: {G.graph.get('name', path.stem)} ({path})"]
    desc = _description(path)
    if desc:
        lines.append(f"description: {desc}")
    lines += [
        f"servers: {nodes}",
        f"GPUs: {kinds.get('gpu', 0)} ({G.graph.get('gpus_per_node', '?')} per server, "
        f"{G.graph.get('gpu', '?')})",
        f"NICs: {kinds.get('nic', 0)}",
        f"NVSwitch fabrics: {kinds.get('nvswitch', 0)}, PCIe switches: "
        f"{kinds.get('pcie_switch', 0)}, CPUs: {kinds.get('cpu', 0)}",
    ]
    tiers = Counter(d.get("tier", "?") for _, d in G.nodes(data=True)
                    if d.get("kind") == "switch")
    order = {"leaf": 0, "spine": 1, "single": 2}
    tier_text = ", ".join(f"{t} {c}" for t, c in sorted(tiers.items(),
                                                          key=lambda x: order.get(x[0], 9)))
    lines.append(f"network switches: {sum(tiers.values())}" + (f" ({tier_text})" if tiers
                                                                else ""))
    links: dict[tuple, list[float]] = {}
    for _, _, d in G.edges(data=True):
        links.setdefault((d.get("link_type", "?"), d.get("link_class", "?")), []).append(
            d["bw_bytes_per_s"])
    lines.append("links (bandwidth per direction):")
    lines.append(f"  {'link_type':<16} {'class':<7} {'count':>6} {'total':>16}")
    for (ltype, lclass), bws in sorted(links.items(), key=lambda x: (x[0][1], x[0][0])):
        lines.append(f"  {ltype:<16} {lclass:<7} {len(bws):>6} {_gbps(sum(bws)):>16}")
    per_leaf = leaf_bandwidth(G)
    if per_leaf:
        up = sum(u for u, _ in per_leaf.values())
        down = sum(d for _, d in per_leaf.values())
        text = f"{up / down:.2f}" if down else "n/a (no downlinks)"
        ratios = [u / d for u, d in per_leaf.values() if d]
        worst = f", lowest leaf {min(ratios):.2f}" if ratios and min(ratios) < \
            (up / down if down else 0) - 1e-9 else ""
        lines.append(f"leaf uplink/downlink ratio: {text} (uplinks {_gbps(up)}, downlinks "
                     f"{_gbps(down)} over {len(per_leaf)} leaves{worst})")
    return lines


def leaf_bandwidth(G: nx.Graph) -> dict[str, tuple[float, float]]:
    """Per leaf switch: (uplink, downlink) bandwidth per direction; empty without leaves.

    Uplinks go from a leaf to another switch, downlinks to anything else (NICs). Only
    cabled ports count, so a partly filled leaf shows a ratio above its design ratio.
    """
    out = {}
    for leaf, attrs in G.nodes(data=True):
        if attrs.get("kind") != "switch" or attrs.get("tier") != "leaf":
            continue
        up = down = 0.0
        for nbr, d in G[leaf].items():
            if G.nodes[nbr].get("kind") == "switch":
                up += d["bw_bytes_per_s"]
            else:
                down += d["bw_bytes_per_s"]
        out[leaf] = (up, down)
    return out


def _description(path: Path) -> str:
    """The file's ``description`` (already validated by the loader), or ""."""
    import yaml
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return ""
    return str(data.get("description", "")) if isinstance(data, dict) else ""
