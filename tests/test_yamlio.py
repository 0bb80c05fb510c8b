"""Every user YAML file is read one way: missing, malformed and duplicate keys."""

import pytest

from simulator.errors import ConfigError
from simulator.scenario import load_scenario
from simulator.topology.loader import load_topology
from simulator.yamlio import read_yaml


def test_reads_a_document(tmp_path):
    (tmp_path / "a.yaml").write_text("x: 1\ny: [2, 3]\n")
    assert read_yaml(tmp_path / "a.yaml") == {"x": 1, "y": [2, 3]}


def test_missing_malformed_and_duplicate_key(tmp_path):
    with pytest.raises(ConfigError, match=r"no\.yaml: cannot read scenario file"):
        read_yaml(tmp_path / "no.yaml", "scenario file")
    (tmp_path / "bad.yaml").write_text("x: [1,\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: malformed YAML at line 2"):
        read_yaml(tmp_path / "bad.yaml")
    (tmp_path / "dup.yaml").write_text("x: 1\nx: 2\n")
    with pytest.raises(ConfigError, match=r"dup\.yaml: x: duplicate key 'x' at line 2"):
        read_yaml(tmp_path / "dup.yaml")


def test_topology_and_scenario_files_refuse_a_repeated_key(tmp_path):
    topo = tmp_path / "t.yaml"
    topo.write_text("name: t\ngenerator: dgx_a100_node\ngenerator: pcie_node\n")
    with pytest.raises(ConfigError, match=r"t\.yaml: generator: duplicate key"):
        load_topology(topo)
    scn = tmp_path / "s.yaml"
    scn.write_text("name: s\nmodel: llama-2-7b\nmodel: gpt3-175b\n")
    with pytest.raises(ConfigError, match=r"s\.yaml: model: duplicate key"):
        load_scenario(scn)
