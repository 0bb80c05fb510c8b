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


@pytest.mark.parametrize("text, value", [("1e300", 1e300), ("3e-4", 3e-4), ("-2E9", -2e9),
                                         ("1.5e3", 1500.0), ("1.0e+3", 1000.0)])
def test_exponent_without_dot_or_sign_is_a_number(tmp_path, text, value):
    """YAML 1.1 reads 1e300 as a string; people (and YAML 1.2, JSON) mean the number."""
    (tmp_path / "a.yaml").write_text(f"x: {text}\n")
    assert read_yaml(tmp_path / "a.yaml") == {"x": value}


def test_a_string_that_looks_like_an_exponent_is_written_back_quoted(tmp_path):
    from simulator.yamlio import write_yaml
    write_yaml(tmp_path / "b.yaml", {"name": "1e5", "n": 1e5})
    assert read_yaml(tmp_path / "b.yaml") == {"name": "1e5", "n": 1e5}


def test_set_reads_an_exponent_as_the_number(capsys):
    """`--set cluster.power_cap_w=1e300` is refused for its size, not as text."""
    from simulator.cli import main
    with pytest.raises(SystemExit) as exc:
        main(["run", "quickstart", "--set", "cluster.power_cap_w=1e300"])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert "1e+300 W is above" in err and "power_cap_w" in err, err
