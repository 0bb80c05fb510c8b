"""`clustersim topology`: summarise a topology (servers, GPUs, NICs, switches, links,
leaf uplink/downlink ratio)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .common import DEFAULT_TOPOLOGY, load_topology_arg

if TYPE_CHECKING:           # networkx loads only when the command runs
    import networkx as nx


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
    wt = max([16, *(len(t) for t, _ in links)])      # wider only for long names
    wc = max([7, *(len(c) for _, c in links)])       # (infinity-fabric-3, infinity_fabric)
    lines.append(f"  {'link_type':<{wt}} {'class':<{wc}} {'count':>6} {'total':>16}")
    for (ltype, lclass), bws in sorted(links.items(), key=lambda x: (x[0][1], x[0][0])):
        lines.append(f"  {ltype:<{wt}} {lclass:<{wc}} {len(bws):>6} {_gbps(sum(bws)):>16}")
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


# ---------------------------------------------------------------------------- command
def register(cli: click.Group) -> None:
    """Add ``topology`` to the ``clustersim`` group."""

    @cli.command("topology")
    @click.argument("topology", default=DEFAULT_TOPOLOGY, metavar="[FILE|NAME]")
    @click.option("--nodes", type=click.IntRange(min=1), default=None, metavar="N",
                  help="Number of servers (multi-node topologies only).")
    def topology_cmd(topology, nodes) -> None:
        """Summarise a topology: servers, GPUs, NICs, switches, links, leaf ratio.

        FILE|NAME is a topology YAML file or a shipped name [default: dgx-a100].
        """
        path, G = load_topology_arg(topology, nodes, "TOPOLOGY")
        click.echo("\n".join(topology_summary(G, path)))
