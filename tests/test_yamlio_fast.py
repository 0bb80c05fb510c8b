"""The package's own data files are parsed by libyaml's C parser (start-up, docs/speed.md):
they read exactly as with the pure-Python parser, the limits and key checks still apply,
an error is worded as the pure-Python parser words it, and files people write never take
that path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator import yamlio, yamlparse
from simulator.errors import ConfigError
from simulator.yamlio import load_yaml, read_yaml

pytestmark = pytest.mark.skipif(yamlparse._FastLoader is None, reason="PyYAML without libyaml")
DATA = Path(yamlparse.__file__).resolve().parent / "data"
# libyaml takes a tab after a flow mapping's brace; PyYAML refuses it ("found character '\t'
# that cannot start any token")
LIBYAML_ONLY = "cluster: {\ttopology: dgx-a100}\n"


def test_every_shipped_data_file_reads_the_same_both_ways():
    files = sorted(DATA.rglob("*.yaml"))
    assert len(files) > 30
    for path in files:
        text = path.read_text()
        assert yaml.load(text, Loader=yamlparse._FastLoader) == \
            yaml.load(text, Loader=yamlparse._UniqueKeyLoader), path


@pytest.fixture
def fast_loads(monkeypatch, tmp_path) -> list:
    """How many documents the C parser has read (one entry each); parsed values kept
    beside the files (simulator.parsedcache) neither read nor written."""
    import sys
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    seen = []

    class Counting(yamlparse._FastLoader):
        def __init__(self, stream):
            seen.append(1)
            super().__init__(stream)
    monkeypatch.setattr(yamlparse, "_FastLoader", Counting)
    return seen


def test_shipped_data_takes_the_c_parser_and_files_people_write_do_not(fast_loads, tmp_path):
    assert read_yaml(DATA / "gpus.yaml") and len(fast_loads) == 1
    (tmp_path / "mine.yaml").write_text("x: 1\n")
    assert read_yaml(tmp_path / "mine.yaml") == {"x": 1} and len(fast_loads) == 1


def test_the_nccl_constants_take_the_c_parser(fast_loads, monkeypatch):
    """nccl.yaml, calibration.yaml and variability.yaml are read at every start
    (constants.read_data): by this parser, not PyYAML's pure-Python safe_load (50-60 ms of
    every process before; docs/speed.md)."""
    from simulator import constants
    monkeypatch.setattr(yaml, "safe_load", None)        # any call fails
    constants._parsed.cache_clear()
    try:
        assert constants.read_data("calibration.yaml") and len(fast_loads) == 1
    finally:
        constants._parsed.cache_clear()


def test_a_file_people_write_is_refused_as_before_where_libyaml_would_take_it(tmp_path):
    assert yaml.load(LIBYAML_ONLY, Loader=yamlparse._FastLoader) == {
        "cluster": {"topology": "dgx-a100"}}
    (tmp_path / "s.yaml").write_text(LIBYAML_ONLY)
    with pytest.raises(ConfigError, match=r"s\.yaml: malformed YAML at line 1: found "
                                          r"character '\\t' that cannot start any token"):
        read_yaml(tmp_path / "s.yaml")


@pytest.mark.parametrize("text", ["a: b: c\n", "x: [1,\n", "x: 1\nx: 2\n", "? [a]\n: 1\n",
                                  "x: .inf\n"])
def test_an_error_reads_the_same_from_either_parser(text):
    def message(shipped: bool) -> str:
        with pytest.raises(ConfigError) as exc:
            load_yaml(text, "f.yaml", shipped=shipped)
        return str(exc.value)
    assert message(True) == message(False)


def test_the_limits_hold_in_the_c_parser_itself(monkeypatch):
    monkeypatch.setenv("CLUSTERSIM_MAX_YAML_DEPTH", "5")
    deep = "x: " + "[" * 8 + "1" + "]" * 8 + "\n"
    with pytest.raises(yamlparse._Refused):
        yaml.load(deep, Loader=yamlparse._FastLoader)
    monkeypatch.setenv("CLUSTERSIM_MAX_YAML_NODES", "50")
    bomb = "a: &a [1, 2, 3, 4, 5, 6, 7, 8]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
    with pytest.raises(yamlparse._Refused):
        yaml.load(bomb, Loader=yamlparse._FastLoader)
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_yaml(deep, "f.yaml", shipped=True)
