"""Each input limit of docs/inputs.md at its boundary: the limit itself passes, one more is
refused with a line that names the limit and how to raise it; the environment variable
(or option) moves it."""

from __future__ import annotations

import json
import zlib

import pytest

from simulator.errors import ConfigError
from simulator.importers.jsonstream import read_chrome_trace
from simulator.inputs import LIMITS, limit, limit_set, read_bytes
from simulator.yamlio import load_yaml, parse_value, read_yaml


def test_every_limit_has_its_documented_default_and_variable():
    text = (__import__("pathlib").Path(__file__).resolve().parents[1] / "docs" /
            "inputs.md").read_text()
    for lim in LIMITS.values():
        assert f"`{lim.env}`" in text, lim.env
    assert limit("yaml_bytes") == 1 << 20 and limit("trace_events") == 1_000_000


def test_an_unreadable_limit_variable_is_one_error(monkeypatch):
    monkeypatch.setenv("CLUSTERSIM_MAX_YAML_DEPTH", "lots")
    with pytest.raises(ConfigError, match="CLUSTERSIM_MAX_YAML_DEPTH: cannot read 'lots'"):
        limit("yaml_depth")
    monkeypatch.setenv("CLUSTERSIM_MAX_YAML_DEPTH", "0")
    with pytest.raises(ConfigError, match="must be > 0"):
        limit("yaml_depth")
    monkeypatch.setenv("CLUSTERSIM_MAX_YAML_DEPTH", "2K")
    assert limit("yaml_depth") == 2048


def test_yaml_bytes(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTERSIM_MAX_YAML_BYTES", "100")
    path = tmp_path / "a.yaml"
    path.write_text("a: " + "x" * 96 + "\n")                 # 100 bytes
    assert read_yaml(path) == {"a": "x" * 96}
    path.write_text("a: " + "x" * 97 + "\n")
    with pytest.raises(ConfigError, match=r"larger than 100 bytes; the limit is 100 bytes in "
                                          r"a YAML file \(raise it with CLUSTERSIM_MAX_YAML_BYTES"):
        read_bytes(path)


def _nested(levels: int) -> str:
    """A document ``levels`` deep: levels - 1 lists around a scalar (each a node)."""
    return "[" * (levels - 1) + "1" + "]" * (levels - 1)


def test_yaml_depth(monkeypatch):
    load_yaml(_nested(64), "d.yaml")
    with pytest.raises(ConfigError, match="nested too deeply; the limit is 64 levels"):
        load_yaml(_nested(65), "d.yaml")
    monkeypatch.setenv("CLUSTERSIM_MAX_YAML_DEPTH", "65")
    load_yaml(_nested(65), "d.yaml")


def test_yaml_nodes_count_aliases_expanded(monkeypatch):
    monkeypatch.setenv("CLUSTERSIM_MAX_YAML_NODES", "13")
    # a: list of 3 (4 nodes) + b: 2 aliases of it (1 + 2 x 4) + root + 2 keys = 1+2+4+9 = 16
    text = "a: &a [1, 2, 3]\nb: [*a, *a]\n"
    with pytest.raises(ConfigError, match="too many values once aliases are expanded"):
        load_yaml(text, "n.yaml")
    monkeypatch.setenv("CLUSTERSIM_MAX_YAML_NODES", "16")
    assert load_yaml(text, "n.yaml") == {"a": [1, 2, 3], "b": [[1, 2, 3], [1, 2, 3]]}
    monkeypatch.setenv("CLUSTERSIM_MAX_YAML_NODES", "15")
    with pytest.raises(ConfigError, match="CLUSTERSIM_MAX_YAML_NODES"):
        load_yaml(text, "n.yaml")


def test_set_values_pass_the_same_checks():
    assert parse_value("{a: [1}", "s.yaml", "--set x") == "{a: [1}"     # not YAML: a string
    assert parse_value("3", "s.yaml", "--set x") == 3
    with pytest.raises(ConfigError, match=r"s.yaml: --set x\.3: must be a finite number"):
        parse_value("{3: .nan}", "s.yaml", "--set x")
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_value(_nested(100), "s.yaml", "--set x")
    with pytest.raises(ConfigError, match="is a list"):
        parse_value("{[a]: 1}", "s.yaml", "--set x")


def _trace(tmp_path, events, name="t.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_trace_events(tmp_path, monkeypatch):
    path = _trace(tmp_path, [{"ph": "X", "name": str(i)} for i in range(5)])
    seen = []
    monkeypatch.setenv("CLUSTERSIM_MAX_TRACE_EVENTS", "5")
    read_chrome_trace(path, seen.append)
    assert len(seen) == 5
    monkeypatch.setenv("CLUSTERSIM_MAX_TRACE_EVENTS", "4")
    with pytest.raises(ConfigError, match="more than 4 events; the limit is 4 events"):
        read_chrome_trace(path, seen.append)
    with limit_set("trace_events", 5):                      # import --max-events wins
        read_chrome_trace(path, seen.append)
    assert limit("trace_events") == 4                       # and only inside its block


def test_trace_depth(tmp_path, monkeypatch):
    # top map 1, traceEvents 2, the event 3, args 4, then lists 5..
    def deep(lists):
        return [{"ph": "X", "args": {"x": json.loads("[" * lists + "]" * lists)}}]
    read_chrome_trace(_trace(tmp_path, deep(28)), lambda e: None)
    with pytest.raises(ConfigError, match="JSON nested too deeply; the limit is 32 levels"):
        read_chrome_trace(_trace(tmp_path, deep(29)), lambda e: None)
    monkeypatch.setenv("CLUSTERSIM_MAX_TRACE_DEPTH", "33")
    read_chrome_trace(_trace(tmp_path, deep(29)), lambda e: None)


def test_trace_string(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTERSIM_MAX_TRACE_STRING", "1000")
    read_chrome_trace(_trace(tmp_path, [{"ph": "X", "name": "a" * 1000}]), lambda e: None)
    with pytest.raises(ConfigError, match="a string of 1,001 characters; the limit is 1,000"):
        read_chrome_trace(_trace(tmp_path, [{"ph": "X", "name": "a" * 1001}]), lambda e: None)
    with pytest.raises(ConfigError, match="a key of 1,001 characters"):
        read_chrome_trace(_trace(tmp_path, [{"a" * 1001: 1}]), lambda e: None)


def test_trace_string_without_quotes_is_caught_as_it_streams(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTERSIM_MAX_TRACE_STRING", "1000")
    path = tmp_path / "n.json"
    path.write_text('{"traceEvents": [' + ",".join(["1"] * 600) + "]}")   # 1,199 bytes
    with pytest.raises(ConfigError, match="more than 1,000 bytes without a quote"):
        read_chrome_trace(path, lambda e: None)


def _gz(path, data: bytes):
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    path.write_bytes(c.compress(data) + c.flush())
    return path


def test_trace_bytes_decompressed(tmp_path, monkeypatch):
    doc = json.dumps({"traceEvents": [{"ph": "X", "name": "n", "ts": 1}]}).encode()
    path = _gz(tmp_path / "t.json.gz", doc)
    monkeypatch.setenv("CLUSTERSIM_MAX_TRACE_BYTES", str(len(doc)))
    read_chrome_trace(path, lambda e: None)
    monkeypatch.setenv("CLUSTERSIM_MAX_TRACE_BYTES", str(len(doc) - 1))
    with pytest.raises(ConfigError, match=rf"more than {len(doc) - 1} bytes \(decompressed\)"):
        read_chrome_trace(path, lambda e: None)


def test_trace_ratio_applies_after_64_mib(tmp_path, monkeypatch):
    # 65 MiB of whitespace (cheap to parse) packs ~1000x
    body = b'{"pad": ' + b" " * (65 << 20) + b'1, "traceEvents": []}'
    path = _gz(tmp_path / "pad.json.gz", body)
    monkeypatch.setenv("CLUSTERSIM_MAX_TRACE_STRING", str(100 << 20))     # no quote for long
    with pytest.raises(ConfigError, match="decompression bomb"):
        read_chrome_trace(path, lambda e: None)
    monkeypatch.setenv("CLUSTERSIM_MAX_TRACE_RATIO", "100000")
    read_chrome_trace(path, lambda e: None)
    small = _gz(tmp_path / "small.json.gz", b'{"pad": ' + b" " * (1 << 20) + b'1, '
                b'"traceEvents": []}')
    monkeypatch.delenv("CLUSTERSIM_MAX_TRACE_RATIO")
    read_chrome_trace(small, lambda e: None)               # same ratio, under 64 MiB: fine
