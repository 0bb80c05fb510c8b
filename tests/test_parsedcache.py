"""The package's data files' parsed values kept beside them as Python keeps bytecode
(simulator/parsedcache.py, start-up in docs/speed.md): read back exactly as parsed, used
only for the very text they came from, written only where bytecode may be."""

from __future__ import annotations

import marshal
import sys
from pathlib import Path

import pytest

from simulator import yamlio
from simulator.parsedcache import cache_path, parsed
from simulator.yamlio import load_yaml, read_yaml

DATA = Path(yamlio.__file__).resolve().parent / "data"


@pytest.fixture
def cache_dir(monkeypatch, tmp_path) -> Path:
    """An empty cache folder (``PYTHONPYCACHEPREFIX``) that may be written."""
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "prefix"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return tmp_path / "prefix"


def same(a, b) -> bool:
    """Equal with the same types all the way down (1 is not 1.0, a list not a tuple)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    return a == b


def test_every_shipped_data_file_reads_back_as_parsed(cache_dir):
    files = sorted(DATA.rglob("*.yaml"))
    assert len(files) > 30
    for path in files:
        fresh = load_yaml(path.read_text(), str(path), shipped=True)
        first = read_yaml(path)                     # parsed, and stored
        assert cache_path(str(path)).is_file(), path
        again = read_yaml(path)                     # from the cache
        assert same(first, fresh) and same(again, fresh), path


def test_a_cached_file_is_not_parsed_again(cache_dir, monkeypatch):
    first = read_yaml(DATA / "nccl.yaml")
    monkeypatch.setattr(yamlio, "load_yaml", None)  # any parse fails
    assert read_yaml(DATA / "nccl.yaml") == first


def test_values_of_another_text_are_not_used(cache_dir, tmp_path):
    source = str(tmp_path / "x.yaml")
    assert parsed(source, "a: 1\n", lambda: {"a": 1}) == {"a": 1}
    assert parsed(source, "a: 1\n", lambda: pytest.fail("parsed again")) == {"a": 1}
    assert parsed(source, "a: 2\n", lambda: {"a": 2}) == {"a": 2}     # the text changed
    assert marshal.loads(cache_path(source).read_bytes())[1] == {"a": 2}


def test_nothing_is_written_where_bytecode_may_not_be(cache_dir, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    source = str(tmp_path / "x.yaml")
    assert parsed(source, "a: 1\n", lambda: {"a": 1}) == {"a": 1}
    assert not cache_path(source).exists()
    assert not cache_dir.exists()


def test_an_unreadable_cache_or_unmarshallable_values_only_cost_a_parse(cache_dir, tmp_path):
    source = str(tmp_path / "x.yaml")
    where = cache_path(source)
    where.parent.mkdir(parents=True)
    where.write_bytes(b"not marshal data")
    assert parsed(source, "a: 1\n", lambda: {"a": 1}) == {"a": 1}
    assert marshal.loads(where.read_bytes())[1] == {"a": 1}            # rewritten
    odd = object()
    assert parsed(source, "b: 1\n", lambda: {"b": odd})["b"] is odd    # not cached
    assert marshal.loads(where.read_bytes())[1] == {"a": 1}


def test_an_unwritable_folder_is_left_as_it_is(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(sys, "pycache_prefix", str(blocker))           # a file, not a folder
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert parsed(str(tmp_path / "x.yaml"), "a: 1\n", lambda: {"a": 1}) == {"a": 1}


def test_files_people_write_are_never_cached(cache_dir, tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("x: 1\n")
    assert read_yaml(mine) == {"x": 1}
    # (the folder may hold bytecode: PyYAML's side, simulator.yamlparse, loads on a first parse)
    assert not list(cache_dir.rglob("*.marshal"))


def test_the_cache_sits_where_python_keeps_bytecode(monkeypatch):
    monkeypatch.setattr(sys, "pycache_prefix", None)
    tag = sys.implementation.cache_tag
    assert cache_path(str(DATA / "gpus.yaml")) == DATA / "__pycache__" / f"gpus.yaml.{tag}.marshal"


def test_shipped_scenarios_and_topologies_are_kept_as_parsed(cache_dir):
    """The scenarios and topologies the package ships take the same path, parsed as files
    people write are (the pure-Python parser): every one reads back exactly as parsed."""
    root = DATA.parents[1]
    files = sorted([*(root / "scenarios").rglob("*.yaml"), *(root / "topologies").glob("*.yaml")])
    assert len(files) > 50
    for path in files:
        fresh = load_yaml(path.read_text(), str(path))
        assert same(read_yaml(path), fresh) and same(read_yaml(path), fresh), path
        assert cache_path(str(path)).is_file(), path


def test_a_fresh_copy_is_deep_and_keeps_every_type():
    import datetime
    from collections import OrderedDict

    from simulator.parsedcache import fresh_copy
    data = {"b": [1, 1.0, True, None, "x", {"c": (2, 3)}], "a": {"d": [1e300]}}
    copied = fresh_copy(data)
    assert same(copied, data) and list(copied) == ["b", "a"]
    copied["b"][5]["c"] = 0                        # the copy shares nothing with the data
    assert data["b"][5]["c"] == (2, 3)
    odd = {"when": datetime.date(2026, 12, 6), "kind": OrderedDict(x=1)}  # marshal cannot:
    again = fresh_copy(odd)                                               # deepcopy does
    assert again == odd and type(again["kind"]) is OrderedDict and again["kind"] is not odd["kind"]


def test_each_reader_of_a_data_file_gets_its_own_copy():
    from simulator.constants import read_data
    first = read_data("nccl.yaml")
    first["pxn_since"] = "changed"
    assert read_data("nccl.yaml")["pxn_since"] != "changed"
