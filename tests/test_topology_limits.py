"""The size limits of the topology generators hold wherever a value comes from.

Before, only ``--nodes`` was capped: a topology file with ``params.nodes: 100000`` took 51 s
and 2.7 GB to build, ``1000000`` ran past 60 s and 7.9 GB, and ``spines: 10000000`` past
60 s and 6.4 GB.
"""

from __future__ import annotations

import time

import pytest
import yaml

from simulator.cli import main
from simulator.errors import ConfigError
from simulator.topology.args import MAX_NODES, MAX_SPINES, MAX_SWITCH_LINKS, check_switch_links
from simulator.topology.fabrics import leaf_spine, rail_optimized
from simulator.topology.loader import load_topology, resolve_topology, topology_from_dict

NODE = {"type": "dgx_a100", "nics": 8}
CAP = rf"must be <= {MAX_NODES} servers \({MAX_NODES * 8:,} GPUs at 8 a server, about the largest"


def _superpod(tmp_path, **params):
    data = yaml.safe_load(resolve_topology("dgx-a100-superpod").read_text())
    data["params"].update(params)
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("nodes", [100_000, 1_000_000])
def test_params_nodes_in_a_topology_file_is_capped_within_a_second(tmp_path, nodes):
    path = _superpod(tmp_path, nodes=nodes)
    start = time.monotonic()
    with pytest.raises(ConfigError, match=rf"big\.yaml: params\.nodes: {CAP}.*got {nodes}$"):
        load_topology(path)
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("nodes", [100_000, 1_000_000])
def test_the_command_refuses_it_in_one_line(tmp_path, capsys, nodes):
    path = _superpod(tmp_path, nodes=nodes)
    start = time.monotonic()
    with pytest.raises(SystemExit) as exit_info:
        main(["topology", str(path)])
    assert time.monotonic() - start < 1.0
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert f"{path}: params.nodes: must be <= {MAX_NODES} servers" in err


def test_the_option_gets_the_same_check_and_message(tmp_path):
    path = resolve_topology("dgx-a100-superpod")
    with pytest.raises(ConfigError, match=rf"dgx-a100-superpod\.yaml: --nodes: {CAP}.*got "
                                          rf"{MAX_NODES + 1}$"):
        load_topology(path, nodes=MAX_NODES + 1)
    data = yaml.safe_load(path.read_text())
    with pytest.raises(ConfigError, match=rf"topology: --nodes: {CAP}"):   # a study point
        topology_from_dict(data, source="topology", nodes=100_000)


def test_a_scenario_cluster_nodes_is_capped(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--set", "cluster.topology=dgx-a100-superpod",
              "--set", "cluster.nodes=100000"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert f"must be <= {MAX_NODES} servers" in err and "100000" in err


def test_spines_are_capped_before_anything_is_built(tmp_path):
    path = _superpod(tmp_path, spines=10_000_000)
    start = time.monotonic()
    with pytest.raises(ConfigError, match=rf"big\.yaml: params\.spines: must be <= "
                                          rf"{MAX_SPINES}, got 10000000"):
        load_topology(path)
    assert time.monotonic() - start < 1.0


def test_leaf_spine_links_are_capped():
    check_switch_links(MAX_SWITCH_LINKS // 64, 64)               # exactly the limit
    with pytest.raises(ConfigError, match="spines: 16385 leaves x 64 spines is 1048640"):
        check_switch_links(MAX_SWITCH_LINKS // 64 + 1, 64)
    # rail-optimized: nics x ceil(nodes / nodes_per_leaf) leaves = 8 x 200 = 1600 leaves;
    # 1600 x 1024 spines = 1,638,400 > 2**20
    with pytest.raises(ConfigError, match="spines: 1600 leaves x 1024 spines"):
        rail_optimized(200, NODE, nodes_per_leaf=1, spines=1024)
    # leaf-spine: ceil(16384 / 1) = 16384 leaves; x 65 spines = 1,064,960 > 2**20
    with pytest.raises(ConfigError, match="spines: 16384 leaves x 65 spines"):
        leaf_spine(MAX_NODES, NODE, nodes_per_leaf=1, spines=65)


def test_oversubscription_must_be_finite(tmp_path):
    # refused at the input boundary (yamlio: no inf/nan in any file), naming the same field
    with pytest.raises(ConfigError, match=r"params\.oversubscription: must be a finite number, "
                                          r"got inf"):
        load_topology(_superpod(tmp_path, oversubscription=float("inf")))


def test_the_limits_are_documented():
    from pathlib import Path
    text = (Path(__file__).parents[1] / "docs" / "topology-conventions.md").read_text()
    for limit in (f"{MAX_NODES:,}", f"{MAX_SPINES:,}", f"{MAX_SWITCH_LINKS:,}"):
        assert limit in text


def test_a_131072_gpu_superpod_is_within_the_limits():
    # 16,384 DGX A100 (8 GPUs each) in SuperPOD units of 20, 8 rails, 8 spines: the size
    # bench_scale.py builds. Checked without building it (that takes ~10 s).
    assert MAX_NODES * 8 >= 131072
    check_switch_links(-(-16384 // 20) * 8, 8)     # 6,560 leaves x 8 spines
