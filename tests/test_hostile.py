"""Issue 19's hostile and broken inputs, each the exact input that failed before: a
traceback, a hang, a MemoryError, a silent acceptance. Each must now end as one line on
stderr naming the file (and the field), exit 2."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path

import pytest

from importer_fixtures import X, document, gloo_step
from test_cli import run_main

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = (ROOT / "scenarios" / "quickstart.yaml").read_text()
KINETO = ROOT / "validation" / "traces" / "captured" / "torch-ddp-2r-1gbit" / \
    "rank0.pt.trace.json.gz"
XPLANE = ROOT / "validation" / "traces" / "captured" / "tf-mwms-2r-1gbit" / \
    "worker0.xplane.pb.gz"


def refused(capsys, *args) -> str:
    """The one error line of ``clustersim ARGS`` (exit 2)."""
    code, out, err = run_main(capsys, *args)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("clustersim: error: "), err
    return err.strip()


def scenario(tmp_path, text: str | bytes) -> str:
    path = tmp_path / "s.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


# --------------------------------------------------------------- encoding and structure
@pytest.mark.parametrize("data, words", [
    (bytes(range(256)) * 40, "binary (it holds NUL bytes), not UTF-8 text"),               # UnicodeDecodeError
    (QUICKSTART.encode("utf-16"), "UTF-16 or UTF-32 text; save it as UTF-8"),
    (QUICKSTART.replace("Llama-2-7B", "Llama\xff").encode("latin-1"),
     "not UTF-8 text: byte 0xff at line 1, column 31"),     # "# The README's main job: Llama"
])
def test_undecodable_scenario_files(capsys, tmp_path, data, words):
    path = scenario(tmp_path, data)
    assert refused(capsys, "run", path) == \
        f"clustersim: error: {path}: scenario file is {words}".strip()


def test_a_list_or_mapping_used_as_a_key(capsys, tmp_path):
    # TypeError: unhashable type in yamlparse._construct_unique / strategies.parse_strategy
    path = scenario(tmp_path, QUICKSTART + "? [a, b]\n: 1\n")
    line = QUICKSTART.count("\n") + 1
    assert f"a key at line {line} is a list; keys must be names or numbers" in \
        refused(capsys, "run", path)
    path = scenario(tmp_path, QUICKSTART.replace("strategy: {name: fsdp,",
                                                 "strategy: {? {a: 1} : x, name: fsdp,"))
    assert "a key at line 7 is a dict" in refused(capsys, "run", path)


def test_deep_nesting_and_the_billion_laughs(capsys, tmp_path):
    deep = QUICKSTART.replace('description: "', "description: " + "[" * 20000 + "]" * 20000
                              + '\n#"')                             # RecursionError
    assert "nested too deeply; the limit is 64" in refused(capsys, "run", scenario(tmp_path, deep))
    lol = "lol:\n  a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"  {chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n"
        for i in range(8))
    bomb = QUICKSTART.replace('description: "Llama-2-7B, FSDP FULL_SHARD, bf16, flash '
                              'attention, one DGX A100 80GB"\n', "") + lol + "description: *i\n"
    err = refused(capsys, "run", scenario(tmp_path, bomb))                # ran past 120 s
    assert "too many values once aliases are expanded" in err and "CLUSTERSIM_MAX_YAML_NODES" in err
    err = refused(capsys, "run", scenario(tmp_path, QUICKSTART + "x: &r [*r]\n"))
    assert "an alias inside the value it names" in err


def test_an_unknown_key_holding_a_huge_list_is_refused_at_once(capsys, tmp_path):
    big = QUICKSTART + "junk: [" + ",".join(["12345678"] * 200_000) + "]\n"   # 1.8 MB
    err = refused(capsys, "run", scenario(tmp_path, big))
    assert "scenario file is larger than 1,048,576 bytes" in err
    assert "CLUSTERSIM_MAX_YAML_BYTES" in err


def test_fifos_and_devices_are_refused_before_reading(capsys, tmp_path):
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)                                           # blocked forever
    assert refused(capsys, "import", "pytorch", str(fifo), "-o", str(tmp_path / "o.json")) == \
        f"clustersim: error: {fifo}: cannot read trace file: a FIFO (named pipe), not a " \
        f"regular file"
    assert "a device, not a regular file" in refused(
        capsys, "import", "pytorch", "/dev/zero", "-o", str(tmp_path / "o.json"))
    os.mkfifo(tmp_path / "t.yaml")
    assert "a FIFO (named pipe)" in refused(capsys, "topology", str(tmp_path / "t.yaml"))


# -------------------------------------------------------------------------- numbers
@pytest.mark.parametrize("setting, words", [
    ("simulation.stragglers={3: .nan}", "--set simulation.stragglers.3: must be a finite "
                                        "number, got nan"),                    # succeeded
    ("simulation.stragglers={3: .inf}", "--set simulation.stragglers.3: must be a finite "
                                        "number, got inf"),                    # hung
    ("simulation.overlap_slowdown=.inf", "--set simulation.overlap_slowdown: must be a "
                                         "finite number"),                     # hung
    ("simulation.overlap_slowdown=1.0e+300", "less than or equal to 1000"),
    ("simulation.stragglers={3: 1.0e+300}", "must be > 0 and <= 1000"),
    ("training.micro_batch=true", "--set training.micro_batch: Input should be a valid "
                                  "integer (got True)"),                        # ran as 1
    ("cluster.links={nvlink3: {bw: .inf}}", "must be a finite number, got inf"),
    ("cluster.links={nvlink3: {latency: .nan}}", "must be a finite number, got nan"),
])
def test_numbers_out_of_range_for_their_field(capsys, setting, words):
    err = refused(capsys, "run", "quickstart", "--set", setting)
    assert words in err and "quickstart.yaml" in err, err


def test_a_straggler_outside_the_cluster_names_the_file(capsys):
    err = refused(capsys, "run", "resnet50-tf-multiworker-32gpu", "--set",
                  "simulation.stragglers={1000000000000: 1.5}")
    assert err.endswith("resnet50-tf-multiworker-32gpu.yaml: --set simulation.stragglers: rank "
                        "1000000000000 is outside the world of 32 ranks"), err
    assert "ranks count from 0" in refused(capsys, "run", "quickstart", "--set",
                                           "simulation.stragglers={-1: 2}")


def test_an_overlap_slowdown_of_inf_in_the_file(capsys, tmp_path):
    path = scenario(tmp_path, QUICKSTART.replace("overlap_slowdown: 0.0",
                                                 "overlap_slowdown: .inf"))
    assert refused(capsys, "run", path) == (f"clustersim: error: {path}: "
                                            f"simulation.overlap_slowdown: must be a finite "
                                            f"number, got inf")


@pytest.mark.parametrize("factor", ["inf", "nan", "-inf", "1", "0.5"])
def test_collective_step_factor_must_be_finite_and_above_1(capsys, factor):
    # -f inf succeeded; -f nan raised in sweep_length
    err = refused(capsys, "collective", "all_reduce", "-f", factor)
    assert f"must be a finite number > 1, got '{factor}'" in err


# ------------------------------------------------------------------------ topologies
def test_a_generator_missing_a_required_parameter(capsys, tmp_path):
    path = tmp_path / "t.yaml"                                     # TypeError from the call
    path.write_text("name: x\ngenerator: rail_optimized\nparams: {nodes: 4, nodes_per_leaf: 20}\n")
    assert refused(capsys, "topology", str(path)) == \
        f"clustersim: error: {path}: params.node: missing parameter(s) 'node' for rail_optimized"


# --------------------------------------------------------------------------- traces
def _gz(path: Path, parts) -> Path:
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(path, "wb") as fh:
        for part in parts:
            fh.write(c.compress(part))
        fh.write(c.flush())
    return path


def _import(capsys, tmp_path, path, kind="pytorch", *more) -> str:
    return refused(capsys, "import", kind, str(path), "-o", str(tmp_path / "o.json"), *more)


def test_gzip_bombs_are_refused_early(capsys, tmp_path):
    # 80 MiB of zeros in ~80 KB (the 10 GiB one raised MemoryError)
    zeros = _gz(tmp_path / "z.xplane.pb.gz", (b"\0" * (1 << 20) for _ in range(80)))
    err = _import(capsys, tmp_path, zeros, "tensorflow")
    assert "(a decompression bomb?); the limit is 200 decompressed bytes per compressed " \
           "byte" in err and "CLUSTERSIM_MAX_TRACE_RATIO" in err
    # a 1 GiB event name ran past the timeout: refused at the first 1 MiB without a quote
    name = _gz(tmp_path / "n.json.gz", [b'{"traceEvents": [{"ph": "X", "name": "',
                                        b"a" * (2 << 20), b'"}]}'])
    assert "more than 1,048,576 bytes without a quote" in _import(capsys, tmp_path, name)


def test_json_nested_100k_deep(capsys, tmp_path):
    path = tmp_path / "t.json"                                              # MemoryError
    path.write_text('{"traceEvents": [{"ph": "X", "args": ' + "[" * 100_000 + "]" * 100_000
                    + "}]}")
    assert "JSON nested too deeply; the limit is 32" in _import(capsys, tmp_path, path)


def test_too_many_events_and_the_option_that_raises_the_limit(capsys, tmp_path):
    doc = gloo_step(0)                                       # 10 million ran past 120 s
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    n = len(doc["traceEvents"])
    err = _import(capsys, tmp_path, path, "pytorch", "--max-events", str(n - 1))
    assert err.endswith(f"more than {n - 1:,} events; the limit is {n - 1:,} events in a trace "
                        f"file (raise it with CLUSTERSIM_MAX_TRACE_EVENTS=N)"), err
    code, out, err = run_main(capsys, "import", "pytorch", str(path), "-o",
                              str(tmp_path / "o.json"), "--max-events", str(n))
    assert code == 0, err


def _kineto(**changes) -> dict:
    doc = json.loads(gzip.decompress(KINETO.read_bytes()))
    for key, value in changes.items():
        if key in ("rank", "world_size"):
            doc["distributedInfo"][key] = value
        elif key in ("distributedInfo", "deviceProperties"):
            doc[key] = value
        else:
            for e in doc["traceEvents"]:
                if e.get("cat") == "cpu_op":
                    e[key] = value
    return doc


def _first_cpu_op() -> int:
    events = json.loads(gzip.decompress(KINETO.read_bytes()))["traceEvents"]
    return next(i for i, e in enumerate(events) if e.get("cat") == "cpu_op")


@pytest.mark.parametrize("changes, words", [
    ({"args": [1, 2]}, "{e}.args: must be a mapping, got [1, 2]"),         # silent before
    ({"args": "x"}, "{e}.args: must be a mapping, got 'x'"),
    ({"pid": [1]}, None),                                    # pid of a cpu_op is not read
    ({"tid": [1]}, "{e}.tid: must be a string or a number (an id), got [1]"),
    ({"ts": "abc"}, "{e}.ts: must be a finite number, got 'abc'"),        # read as 0
    ({"dur": [5]}, "{e}.dur: must be a finite number, got [5]"),
    ({"name": {"a": 1}}, "{e}.name: must be a string, got {'a': 1}"),
    ({"distributedInfo": "x"}, "distributedInfo: must be a mapping, got str"),
    ({"deviceProperties": "x"}, "deviceProperties: must be a list of mappings"),
    ({"rank": "x"}, "distributedInfo.rank: must be a whole number >= 0, got 'x'"),
    ({"world_size": -1}, "distributedInfo.world_size: must be a whole number >= 1, got -1"),
    ({"rank": 7}, "distributedInfo.rank: rank 7 is outside the world of 2 ranks"),
    # found by the campaign: MemoryError in assemble._ranks (set(range(world)))
    ({"world_size": 2 ** 31}, "distributedInfo.world_size: must be at most 1,048,576 ranks, "
                              "got 2,147,483,648"),
])
def test_fields_of_the_wrong_type(capsys, tmp_path, changes, words):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_kineto(**changes)))
    if words is None:
        code, _, err = run_main(capsys, "import", "pytorch", str(path), "-o",
                                str(tmp_path / "o.json"))
        assert code == 0, err
        return
    err = _import(capsys, tmp_path, path)
    assert err == f"clustersim: error: {path}: " + words.replace(
        "{e}", f"traceEvents[{_first_cpu_op()}]")


def test_an_infinite_duration_is_refused(capsys, tmp_path):
    doc = document([X("aten::mm", "cpu_op", 0, 12345)])
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc).replace("12345", "1e999"))      # a float past the range
    assert _import(capsys, tmp_path, path).endswith(
        "corrupt JSON (parse error: numeric (floating point) overflow)")


def test_each_importer_refuses_the_other_format_by_name(capsys, tmp_path):
    err = _import(capsys, tmp_path, KINETO, "tensorflow")     # imported silently before
    assert "not a TensorFlow trace: it is a PyTorch profiler (Kineto) trace: import it " \
           "with 'clustersim import pytorch'" in err
    err = _import(capsys, tmp_path, XPLANE, "pytorch")
    assert err.endswith("not a PyTorch trace: it is a TensorFlow profile (XSpace, "
                        "*.xplane.pb): import it with 'clustersim import tensorflow'")


def test_a_trace_file_for_replay_is_bounded_too(capsys, tmp_path, monkeypatch):
    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    assert "a FIFO (named pipe)" in refused(capsys, "replay", str(fifo))
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert "nested too deeply" in refused(capsys, "replay", str(path))
    monkeypatch.setenv("CLUSTERSIM_MAX_TRACE_FILE_BYTES", "10")
    path.write_text("[" + " " * 10 + "]")
    assert "more than 10 bytes (decompressed)" in refused(capsys, "replay", str(path))


# ------------------------------------------------------------------ one line, always
def test_a_multi_line_message_is_one_line_that_starts_with_where(capsys, tmp_path):
    # a YAML error whose message spans lines (the scanner's context and problem)
    path = scenario(tmp_path, "name: x\nmodel: 'unclosed\n\n")
    err = refused(capsys, "run", path)
    assert err.startswith(f"clustersim: error: {path}: malformed YAML at line"), err


# -------------------------------------------------------------------------- catalogs
@pytest.mark.parametrize("bw, latency, words", [
    ("1e999 GB/s", "1 us", "nv.bw: must be > 0 and finite, got inf"),
    ("25 GB/s", "1e999 us", "nv.latency: must be >= 0 and finite, got inf"),
])
def test_a_catalog_number_past_the_float_range(tmp_path, bw, latency, words):
    from simulator.errors import ConfigError
    from simulator.hardware import load_link_table
    path = tmp_path / "links.yaml"
    path.write_text(f"nv: {{bw: {bw}, latency: {latency}, link_class: nvlink, source: x}}\n")
    with pytest.raises(ConfigError) as exc:
        load_link_table(path)
    assert str(exc.value) == f"{path}: {words}"


# --------------------------------------------- found by the campaign of the closing note
def test_a_name_too_long_for_the_system(capsys, tmp_path):
    # OSError: [Errno 36] File name too long from Path.is_file (model: 'AAAA...' x 5000)
    path = scenario(tmp_path, QUICKSTART.replace("model: llama-2-7b", "model: " + "A" * 5000))
    assert refused(capsys, "run", path) == (f"clustersim: error: {path}: model: path too long "
                                            f"(5,000 bytes; at most 4,096, 255 per name)")
    assert "cluster.topology: path too long" in refused(
        capsys, "run", "quickstart", "--set", "cluster.topology=" + "B" * 300)


@pytest.mark.parametrize("name", ["[[[[1]]]]", "{a: 1}"])
def test_a_strategy_name_that_is_a_list_or_mapping(capsys, name):
    # TypeError: unhashable type in strategies.parse_strategy
    err = refused(capsys, "run", "quickstart", "--set", f"strategy.name={name}")
    assert "strategy.name: unknown strategy" in err, err


def test_a_server_type_that_is_a_list(capsys, tmp_path):
    # TypeError: unhashable type in topology.servers.server_layout (campaign case topo-0458)
    path = tmp_path / "t.yaml"
    path.write_text("name: x\ngenerator: leaf_spine\nparams:\n  nodes: 2\n"
                    "  node: {type: [[[[1]]]], gpu: A100-SXM4-40GB, nics: 16, nic: roce-100}\n")
    assert "params.node.type: must be one of" in refused(capsys, "topology", str(path))
