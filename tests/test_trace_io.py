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
    return Trace(2, [RankClass("all", (0, 1), ops)], {"w": Communicator("w", ((0, 1),))},
                 {"model": "toy", "static_memory_bytes": {"all": 5}})


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
