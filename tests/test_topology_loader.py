"""Topology YAML files: the shipped ones load, overrides work, mistakes name file and field."""

from collections import Counter
from pathlib import Path

import pytest
import yaml

from simulator.errors import ConfigError
from simulator.topology import (check_cluster, load_topology, resolve_topology,
                                shipped_topologies, topology_from_dict)

REPO = Path(__file__).resolve().parents[1]
SHIPPED = ["dgx-a100", "dgx-a100-superpod", "a100-roce-leaf-spine", "hgx-a100-pcie", "aws-p4d"]


def gpu_count(G):
    return Counter(kind for _, kind in G.nodes(data="kind"))["gpu"]


def write(tmp_path, text, name="topo.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


GOOD = """\
name: t
generator: leaf_spine
params:
  nodes: 2
  node: {type: dgx_a100, nics: 8, nic: ib-hdr}
"""


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_topology_loads(name):
    path = resolve_topology(name)
    assert path == REPO / "topologies" / f"{name}.yaml"
    raw = yaml.safe_load(path.read_text())
    assert raw["description"] and raw["source"]
    G = load_topology(path)
    check_cluster(G)
    assert G.graph["name"] == name
    assert gpu_count(G) == G.graph["nodes"] * G.graph["gpus_per_node"]


def test_shipped_names_are_listed():
    assert set(SHIPPED) <= set(shipped_topologies())


@pytest.mark.parametrize("name, gpus, nics_per_node", [
    ("dgx-a100", 8, 8), ("dgx-a100-superpod", 32, 8), ("a100-roce-leaf-spine", 16, 16),
    ("hgx-a100-pcie", 4, 1), ("aws-p4d", 16, 4)])
def test_shipped_sizes(name, gpus, nics_per_node):
    G = load_topology(resolve_topology(name))
    assert gpu_count(G) == gpus
    nics = Counter(kind for _, kind in G.nodes(data="kind"))["nic"]
    assert nics == nics_per_node * G.graph["nodes"]


def test_nodes_override_scales_superpod():
    G = load_topology(resolve_topology("dgx-a100-superpod"), nodes=64)
    assert gpu_count(G) == 512 and G.graph["nodes"] == 64
    leaves = [n for n, t in G.nodes(data="tier") if t == "leaf"]
    assert len(leaves) == 8 * 4  # 64 nodes / 20 per scalable unit -> 4 groups x 8 rails


def test_resolve_accepts_paths_and_suffix_from_another_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_topology("dgx-a100.yaml") == REPO / "topologies" / "dgx-a100.yaml"
    path = write(tmp_path, GOOD, "mine.yaml")
    assert resolve_topology(str(path)) == path
    assert resolve_topology("mine.yaml") == Path("mine.yaml")


def test_resolve_unknown_name_lists_shipped():
    with pytest.raises(ConfigError, match=r"^topology: no topology file .*'nope'.*dgx-a100"):
        resolve_topology("nope")


def test_topology_from_dict():
    G = topology_from_dict(yaml.safe_load(GOOD))
    assert G.graph["name"] == "t" and gpu_count(G) == 16


@pytest.mark.parametrize("text, field, message", [
    (GOOD.replace("name: t", "name: t\nflavour: x\ncolour: y"), "flavour",
     r"unknown key\(s\) 'flavour', 'colour'; valid: name"),
    (GOOD.replace("leaf_spine", "fat_tree"), "generator",
     r"unknown generator 'fat_tree'; valid: .*rail_optimized"),
    (GOOD.replace("nics: 8,", "gpu: V100, nics: 8,"), r"params\.node\.gpu",
     r"unknown GPU 'V100'; valid: .*A100-SXM4-80GB"),
    (GOOD.replace("nics: 8", "nics: 3"), r"params\.node\.nics", "must be one of"),
    (GOOD.replace("nodes: 2", "nodes: 0"), r"params\.nodes", "must be >= 1, got 0"),
    (GOOD + "  oversubscription: -2\n", r"params\.oversubscription", "must be > 0"),
    (GOOD + "  racks: 2\n", r"params\.racks", r"unknown parameter\(s\) 'racks'"),
    (GOOD + "  uplink: 400 Gb/s\n", r"params\.uplink", "unknown link type '400 Gb/s'"),
    (GOOD.replace("type: dgx_a100", "type: dgx_b200"), r"params\.node\.type",
     "must be one of dgx_a100, pcie"),
    (GOOD.replace("generator: leaf_spine\n", ""), "generator", "missing required key"),
    (GOOD.replace("name: t", "name: [t]"), "name",
     r"input should be a valid string, got \['t'\]"),
])
def test_bad_file_names_file_and_field(tmp_path, text, field, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"topo\.yaml: {field}: {message}") as info:
        load_topology(path)
    assert "\n" not in str(info.value)
    assert info.value.source == str(path)


def test_malformed_yaml_says_the_line(tmp_path):
    path = write(tmp_path, "name: t\ngenerator: leaf_spine\nparams: {nodes: 2\n  node: [\n")
    with pytest.raises(ConfigError, match=r"topo\.yaml: malformed YAML at line \d+"):
        load_topology(path)


@pytest.mark.parametrize("text, message", [
    ("- a\n- b\n", "top level must be a mapping"), ("", "file is empty")])
def test_not_a_mapping(tmp_path, text, message):
    with pytest.raises(ConfigError, match=rf"topo\.yaml: {message}"):
        load_topology(write(tmp_path, text))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"absent\.yaml: cannot read topology file"):
        load_topology(tmp_path / "absent.yaml")


def test_nodes_override_on_single_node_topology():
    with pytest.raises(ConfigError, match=r"dgx-a100\.yaml: --nodes: .*single server"):
        load_topology(resolve_topology("dgx-a100"), nodes=4)


@pytest.mark.parametrize("nodes", [0, -3])
def test_bad_nodes_override_names_the_option(nodes):
    with pytest.raises(ConfigError, match=r"superpod\.yaml: --nodes: must be >= 1"):
        load_topology(resolve_topology("dgx-a100-superpod"), nodes=nodes)


def test_absurd_node_count_is_refused_before_building():
    from simulator.errors import ConfigError
    from simulator.topology.args import MAX_NODES
    from simulator.topology.loader import load_topology, resolve_topology
    with pytest.raises(ConfigError, match=r"--nodes: must be <= "):
        load_topology(resolve_topology("dgx-a100-superpod"), nodes=MAX_NODES + 1)


def _superpod_with_links(links):
    import yaml as _yaml
    from simulator.topology.loader import resolve_topology
    data = _yaml.safe_load(resolve_topology("dgx-a100-superpod").read_text())
    data["links"] = links
    return data


def test_link_override_changes_every_link_of_that_type():
    from simulator.topology.loader import topology_from_dict
    G = topology_from_dict(_superpod_with_links({"ib-hdr": {"bw": "400 Gb/s",
                                                            "latency": "2 us"}}))
    ib = [d for _, _, d in G.edges(data=True) if d["link_type"] == "ib-hdr"]
    assert ib and all(d["latency_s"] == 2e-6 for d in ib)
    assert all(d["bw_bytes_per_s"] == pytest.approx(50e9 * d["lanes"]) for d in ib)
    cables = [d for d in ib if d["lanes"] == 1.0]          # NIC-leaf links
    assert cables and all(d["bw_bytes_per_s"] == 50e9 for d in cables)


@pytest.mark.parametrize("oversub", [1.0, 2.0, 4.0])
def test_link_override_keeps_the_oversubscription(oversub):
    """A per-link what-if bandwidth scales aggregated uplinks with the downlinks."""
    from simulator.topology.loader import topology_from_dict

    def leaf_ratio(G):
        leaf = next(n for n, d in G.nodes(data=True) if d.get("tier") == "leaf")
        down = up = 0.0
        for nb, d in G.adj[leaf].items():
            if G.nodes[nb].get("tier") == "spine":
                up += d["bw_bytes_per_s"]
            else:
                down += d["bw_bytes_per_s"]
        return down, up

    data = _superpod_with_links({})
    data["params"]["oversubscription"] = oversub
    base_down, base_up = leaf_ratio(topology_from_dict(data))
    G = topology_from_dict(_superpod_with_links({"ib-hdr": {"bw": "100 Gb/s"}}) | {
        "params": data["params"]})
    down, up = leaf_ratio(G)
    assert down == pytest.approx(base_down / 2) and up == pytest.approx(base_up / 2)
    assert down / up == pytest.approx(base_down / base_up)


@pytest.mark.parametrize("links, field, message", [
    ({"ib-hdr": {"bw": 400}}, "links.ib-hdr.bw", "needs a unit"),
    ({"ib-hdr": {"bw": "-5 GB/s"}}, "links.ib-hdr.bw", "cannot read bandwidth"),
    ({"ib-hdr": {"bw": "0 GB/s"}}, "links.ib-hdr.bw", "must be > 0"),
    ({"ib-hdr": {"latency": "3"}}, "links.ib-hdr.latency", "cannot read time"),
    ({"roce-400": {"bw": "1 GB/s"}}, "links.roce-400", "no link of type"),
    ({"ib-hdr": {"speed": "1 GB/s"}}, "links.ib-hdr.speed", "unknown key"),
])
def test_bad_link_override_names_file_and_field(links, field, message):
    from simulator.errors import ConfigError
    from simulator.topology.loader import topology_from_dict
    with pytest.raises(ConfigError, match=rf"x\.yaml: {field}: .*{message}"):
        topology_from_dict(_superpod_with_links(links), source="x.yaml")
