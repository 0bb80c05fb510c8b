"""The on-disk trace: round trip, and clear errors for broken files."""

import gzip
import json

import pytest

from simulator.errors import ConfigError
from simulator.trace import Communicator, Op, RankClass, Trace
from simulator.trace.io import read_trace, trace_to_dict, write_trace


def sample():
    ops = [Op(0, "compute", "compute", "mm", flops=1e9, op_class="matmul",
              mem_alloc_bytes=10),
           Op(1, "comm", "collective", "ar", collective="all_reduce", size_bytes=64,
              comm="w", deps=(0,), attrs={"bucket": 0})]
    return Trace(2, [RankClass("all", (0, 1), ops, static_memory_bytes=5)],
                 {"w": Communicator("w", ((0, 1),))}, {"model": "toy"})


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_round_trip(tmp_path, name):
    path = write_trace(sample(), tmp_path / name)
    back = read_trace(path)
    assert trace_to_dict(back) == trace_to_dict(sample())
    assert back.classes[0].ops[1].deps == (0,)


def test_never_overwrites(tmp_path):
    path = write_trace(sample(), tmp_path / "t.json")
    with pytest.raises(ConfigError, match="refusing to overwrite"):
        write_trace(sample(), path)


def test_truncated_and_corrupt_files_are_one_clear_error(tmp_path):
    good = json.dumps(trace_to_dict(sample()))
    (tmp_path / "cut.json").write_text(good[: len(good) // 2])
    with pytest.raises(ConfigError, match=r"cut\.json: corrupt or truncated JSON"):
        read_trace(tmp_path / "cut.json")
    raw = gzip.compress(good.encode())
    (tmp_path / "cut.json.gz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ConfigError, match=r"cut\.json\.gz: .*truncated"):
        read_trace(tmp_path / "cut.json.gz")
    with pytest.raises(ConfigError, match="no such file"):
        read_trace(tmp_path / "missing.json")


def test_unknown_fields_and_broken_contract_are_named(tmp_path):
    d = trace_to_dict(sample())
    d["classes"][0]["ops"][0]["flopz"] = 1
    (tmp_path / "a.json").write_text(json.dumps(d))
    with pytest.raises(ConfigError, match=r"classes\[all\]\.ops\[0\]: unknown op field.*flopz"):
        read_trace(tmp_path / "a.json")
    d = trace_to_dict(sample())
    d["classes"][0]["ops"][1]["comm"] = "nope"
    (tmp_path / "b.json").write_text(json.dumps(d))
    with pytest.raises(ConfigError, match="unknown communicator"):
        read_trace(tmp_path / "b.json")
    (tmp_path / "c.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ConfigError, match="format: not a clustersim-trace"):
        read_trace(tmp_path / "c.json")


def test_static_memory_is_written_on_the_class():
    d = trace_to_dict(sample())
    assert d["classes"][0]["static_memory_bytes"] == 5 and "static_memory_bytes" not in d["meta"]


def test_an_old_file_with_static_memory_in_meta_is_read_onto_the_classes(tmp_path):
    # the form written before static memory moved onto the classes
    d = trace_to_dict(sample())
    del d["classes"][0]["static_memory_bytes"]
    d["meta"]["static_memory_bytes"] = {"all": 5}
    (tmp_path / "old.json").write_text(json.dumps(d))
    back = read_trace(tmp_path / "old.json")
    assert back.classes[0].static_memory_bytes == 5 and back.meta == {"model": "toy"}
    assert trace_to_dict(back) == trace_to_dict(sample())


def test_static_memory_in_both_places_or_for_an_unknown_class_is_named(tmp_path):
    d = trace_to_dict(sample())
    d["meta"]["static_memory_bytes"] = {"all": 5}
    (tmp_path / "both.json").write_text(json.dumps(d))
    with pytest.raises(ConfigError, match=r"both\.json: classes\[all\]\.static_memory_bytes: "
                                          r"static memory given twice"):
        read_trace(tmp_path / "both.json")
    del d["classes"][0]["static_memory_bytes"]
    d["meta"]["static_memory_bytes"] = {"all": 5, "gone": 1}
    (tmp_path / "unknown.json").write_text(json.dumps(d))
    with pytest.raises(ConfigError, match=r"meta\.static_memory_bytes: names rank class\(es\) "
                                          r"'gone'"):
        read_trace(tmp_path / "unknown.json")
    d = trace_to_dict(sample())
    d["classes"][0]["static_memory_bytes"] = -1
    (tmp_path / "neg.json").write_text(json.dumps(d))
    with pytest.raises(ConfigError, match=r"neg\.json: classes\[all\]\.static_memory_bytes: "
                                          r"rank class all: must be >= 0, got -1"):
        read_trace(tmp_path / "neg.json")
