"""Shared fixtures: tiny hand-built clusters whose answers can be worked out on paper."""

import networkx as nx
import pytest
import yaml

from simulator.cluster import Cluster
from simulator.constants import load_constants
from simulator.collectives.model import CollectiveModel
from simulator.hardware import link_spec

GB = 1e9


def star_graph(servers: int, nic_bw: float = 10 * GB, leaves: int = 1,
               uplink_bw: float | None = None, latency_s: float | None = None) -> nx.Graph:
    """``servers`` one-GPU servers; GPU-NIC at 100 GB/s, NIC-leaf at ``nic_bw``.

    With ``leaves`` > 1, servers are split evenly over leaves joined by one spine with
    ``uplink_bw`` per leaf. Links have their catalog latency unless ``latency_s`` is given
    (a latency what-if).
    """
    pcie_s = link_spec("pcie-gen4-x16").latency_s if latency_s is None else latency_s
    net_s = link_spec("ib-hdr").latency_s if latency_s is None else latency_s
    G = nx.Graph(name="star", gpu="A100-SXM4-80GB", gpus_per_node=1, nodes=servers)
    per_leaf = servers // leaves
    for s in range(servers):
        common = dict(server=s, template="star")
        G.add_node(f"n{s}.gpu0", kind="gpu", local="gpu0", index=0, rank=s, **common)
        G.add_node(f"n{s}.nic0", kind="nic", local="nic0", index=0, **common)
        G.add_edge(f"n{s}.gpu0", f"n{s}.nic0", bw_bytes_per_s=100 * GB, latency_s=pcie_s,
                   link_type="pcie-gen4-x16", link_class="pcie")
        leaf = f"leaf.g{s // per_leaf}"
        G.add_node(leaf, kind="switch", tier="leaf")
        G.add_edge(f"n{s}.nic0", leaf, bw_bytes_per_s=nic_bw, latency_s=net_s,
                   link_type="ib-hdr", link_class="net")
    if leaves > 1:
        G.add_node("spine.0", kind="switch", tier="spine")
        for g in range(leaves):
            G.add_edge(f"leaf.g{g}", "spine.0", bw_bytes_per_s=uplink_bw, latency_s=net_s,
                       link_type="ib-hdr", link_class="net")
    return G


@pytest.fixture
def ideal_constants():
    """Shipped NCCL constants with every link at 100% of nominal bandwidth, no protocol
    calibration and no one-GPU-per-node discount: the closed forms hold exactly."""
    return load_constants().replace(
        link_efficiency={}, ppn1_bw_factor=1.0,
        protocol_bw_efficiency={"LL": 1.0, "LL128": 1.0, "Simple": 1.0},
        protocol_latency_factor={"LL": 1.0, "LL128": 1.0, "Simple": 1.0})


def make_model(G, constants, **kw):
    cluster = Cluster(G, link_efficiency=constants.link_efficiency, **kw)
    return CollectiveModel(cluster, constants)


def edit_cases_yaml(root, fn):
    """Apply ``fn`` to the mapping in ``root/cases.yaml`` (a test's copy) and save it."""
    path = root / "cases.yaml"
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def up_down_blocks(n: int, params_each: int):
    """``n`` two-weight layers ("up" then "down", ``params_each`` each) whose kernels name
    their weights; backward computes down's gradients before up's, as autograd does."""
    from simulator.models.ops import LayerCost, OpCost
    fwd = tuple(OpCost(w, "matmul", 2e9, 1e6, weight=w, params=params_each)
                for w in ("up", "down"))
    bwd = tuple(OpCost(f"{w}.{k}", "matmul", 2e9, 1e6, weight=w)
                for w in ("down", "up") for k in ("dgrad", "wgrad"))
    return [LayerCost(f"b{i}", "mlp", 2 * params_each, fwd, bwd, 1000, 100) for i in range(n)]


def known_miss_param(*values, reason: str | None, id: str):
    """``pytest.param(*values)``, a strict xfail when ``reason`` (the case's record in
    validation/known_misses.yaml) is set: a recorded miss that starts passing fails."""
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(*values, marks=marks, id=id)
