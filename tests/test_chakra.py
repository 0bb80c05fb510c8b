"""Chakra execution traces (ASTRA-sim's workload format): a generated Trace exported with
`clustersim trace --format chakra` reads back unchanged; the files hold what a Chakra
consumer reads (node types, comm_type/comm_size, stream order as ctrl_deps), so a reader
that knows only the standard fields replays the same step; and the schema built in code
has the field numbers of the published et_def.proto."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.importers.chakra import OP_ATTR, decode, encode, write_chakra
from simulator.importers.chakra_pb import ATTR, COLLECTIVE_TYPES, METADATA, NODE, NODE_TYPES
from simulator.importers.chakra_read import attrs, read_chakra
from simulator.models import load_model
from simulator.models.costs import layer_costs
from simulator.pipeline import build_setup, run_setup
from simulator.strategies import FSDPConfig, World
from simulator.strategies.fsdp import fsdp as fsdp_trace
from simulator.scenario import load_scenario, resolve_scenario
from simulator.trace.io import trace_to_dict
from test_cli import run_main

# The published schema (mlcommons/chakra, schema/protobuf/et_def.proto), field by field.
PUBLISHED_NODE = {"id": 1, "name": 2, "type": 3, "ctrl_deps": 4, "data_deps": 5,
                  "start_time_micros": 6, "duration_micros": 7, "inputs": 8, "outputs": 9,
                  "attr": 10}
PUBLISHED_METADATA = {"version": 1, "attr": 2}
PUBLISHED_ATTR = {"name": 1, "doc_string": 2, "double_val": 3, "double_list": 4,
                  "float_val": 5, "int32_val": 7, "int64_val": 9, "int64_list": 10,
                  "uint32_val": 11, "uint64_val": 13, "sint64_val": 17, "fixed64_val": 21,
                  "sfixed64_val": 25, "bool_val": 27, "bool_list": 28, "string_val": 29,
                  "string_list": 30, "bytes_val": 31, "bytes_list": 32}
PUBLISHED_NODE_TYPES = {"INVALID_NODE": 0, "METADATA_NODE": 1, "MEM_LOAD_NODE": 2,
                        "MEM_STORE_NODE": 3, "COMP_NODE": 4, "COMM_SEND_NODE": 5,
                        "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7, "STORAGE_NODE": 8,
                        "BATCH_NODE": 9, "CHECKPOINT_NODE": 10}
PUBLISHED_COLLECTIVES = {"ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3,
                         "SCATTER": 4, "BROADCAST": 5, "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7,
                         "REDUCE_SCATTER_BLOCK": 8, "BARRIER": 9}


def _setup(name: str):
    path = resolve_scenario(name)
    return build_setup(load_scenario(path, []), str(path))


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory):
    """Quickstart (FSDP on one DGX A100) exported: (setup, files)."""
    setup = _setup("quickstart")
    return setup, write_chakra(setup.trace, tmp_path_factory.mktemp("et") / "qs")


def test_schema_has_the_published_field_numbers():
    def numbers(message):
        return {f.name: f.number for f in message.DESCRIPTOR.fields}
    assert numbers(NODE) == PUBLISHED_NODE
    assert numbers(METADATA) == PUBLISHED_METADATA
    assert PUBLISHED_ATTR.items() <= numbers(ATTR).items() and len(numbers(ATTR)) == 32
    assert all(f.containing_oneof is not None for f in ATTR.DESCRIPTOR.fields if f.number > 2)
    enums = NODE.DESCRIPTOR.file.enum_types_by_name
    assert {v.name: v.number for v in enums["NodeType"].values} == PUBLISHED_NODE_TYPES
    assert {v.name: v.number for v in enums["CollectiveCommType"].values} == \
        PUBLISHED_COLLECTIVES
    assert list(NODE_TYPES) == list(PUBLISHED_NODE_TYPES)
    assert list(COLLECTIVE_TYPES) == list(PUBLISHED_COLLECTIVES)


@pytest.mark.parametrize("scenario", ["quickstart", "resnet50-tf-ps-4node"])
def test_a_generated_trace_round_trips(tmp_path, scenario):
    setup = _setup(scenario)
    files = write_chakra(setup.trace, tmp_path / "t")
    assert [f.name for f in files] == [f"t.{r}.et" for r in range(setup.trace.world_size)]
    assert trace_to_dict(read_chakra(files)) == trace_to_dict(setup.trace)


def test_the_files_hold_what_a_chakra_consumer_reads(fsdp):
    setup, files = fsdp
    meta, nodes = decode(files[3].read_bytes(), str(files[3]))
    assert meta.version == "0.0.4" and attrs(meta)["clustersim.rank"] == 3
    ops = setup.trace.classes[0].ops
    assert [n.id for n in nodes] == [op.id for op in ops]
    last = {}
    for op, node in zip(ops, nodes):
        a = attrs(node)
        assert list(node.data_deps) == list(op.deps)
        assert list(node.ctrl_deps) == ([last[op.stream]] if op.stream in last else [])
        last[op.stream] = op.id
        if op.kind == "collective":
            assert NODE_TYPES[node.type] == "COMM_COLL_NODE"
            assert COLLECTIVE_TYPES[a["comm_type"]] == op.collective.upper()
            assert a["comm_size"] == op.size_bytes and a["pg_name"] == op.comm
        elif op.kind == "compute":
            assert NODE_TYPES[node.type] == "COMP_NODE" and a["is_cpu_op"] is False
            assert a["num_ops"] == round(op.flops)
            assert a["tensor_size"] == round(op.bytes_accessed)
    assert {NODE_TYPES[n.type] for n in nodes} >= {"COMP_NODE", "COMM_COLL_NODE"}


def _plain(files, where: Path) -> list[Path]:
    """``files`` without clustersim's own attributes (a plain Chakra trace), in ``where``."""
    plain = []
    for f in files:
        meta, nodes = decode(f.read_bytes(), str(f))
        meta.ClearField("attr")
        for n in nodes:
            keep = [a for a in n.attr if a.name != OP_ATTR]
            n.ClearField("attr")
            n.attr.extend(keep)
        plain.append(where / f.name)
        plain[-1].write_bytes(encode([meta, *nodes]))
    return plain


def test_a_reader_of_the_standard_fields_replays_the_same_step(fsdp, tmp_path):
    """Strip clustersim's own attributes: what is left is a plain Chakra trace."""
    setup, files = fsdp
    trace = read_chakra(_plain(files, tmp_path))
    assert [c.ranks for c in trace.classes] == [(r,) for r in range(8)]
    ops = setup.trace.classes[0].ops
    got = trace.classes[5].ops
    assert sorted((o.kind, o.collective, o.size_bytes) for o in got) == \
        sorted((o.kind, o.collective, o.size_bytes) for o in ops)
    replayed = run_setup(dataclasses.replace(setup, trace=trace)).metrics.iteration_time_s
    assert replayed == pytest.approx(run_setup(setup).metrics.iteration_time_s, rel=1e-9)


def test_a_plain_reader_keeps_the_expert_groups(tmp_path):
    """The ``groups`` of a grouped GEMM (an MoE layer's experts) travel as a standard node
    attribute, so a reader of the standard fields times the experts as a grouped GEMM."""
    model = dataclasses.replace(load_model("qwen3-30b-a3b"), layers=2)
    trace = fsdp_trace(layer_costs(model, 1, 256, "bf16"), FSDPConfig(), World(2, 2))
    (tmp_path / "plain").mkdir()
    back = read_chakra(_plain(write_chakra(trace, tmp_path / "moe"), tmp_path / "plain"))

    def groups(t):
        return {o.name: o.attrs.get("groups") for o in t.classes[0].ops
                if o.name.startswith("moe_expert_gate_up")}
    assert groups(trace) and groups(back) == groups(trace)
    assert set(groups(trace).values()) == {128}


def test_bad_files_name_the_file(tmp_path):
    bad = tmp_path / "x.0.et"
    bad.write_bytes(b"\x05ab")
    with pytest.raises(ConfigError, match="truncated") as info:
        read_chakra([bad])
    assert info.value.source == str(bad)
    bad.write_bytes(b"")
    with pytest.raises(ConfigError, match="empty"):
        read_chakra([bad])


def test_cli_exports_and_imports_chakra(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(capsys, "trace", "resnet50-ddp-1gpu", "-o", "et/r",
                              "--format", "chakra")
    assert code == 0, err
    assert Path("et/r.0.et").is_file()
    code, out, err = run_main(capsys, "trace", "resnet50-ddp-1gpu", "-o", "et/r",
                              "--format", "chakra")
    assert code == 2 and "--overwrite" in err                    # never replaces silently
    code, out, err = run_main(capsys, "import", "chakra", "et/r.0.et", "-o", "back.json")
    assert code == 0, err
    assert "wrote back.json: 1 ranks" in out
    Path("junk.0.et").write_bytes(b"\x02\xff\xff")
    code, out, err = run_main(capsys, "import", "chakra", "junk.0.et", "-o", "j.json")
    assert code == 2 and err.count("\n") == 1 and "junk.0.et" in err


def test_hostile_chakra_files_are_refused_at_the_boundary(tmp_path, monkeypatch):
    # a message size that never ends (0x80 bytes forever) is refused at its 11th byte
    bad = tmp_path / "v.0.et"
    bad.write_bytes(b"\x80" * 4096)
    with pytest.raises(ConfigError, match="more than 10 bytes"):
        read_chakra([bad])
    # more nodes than the event cap: the metadata message, then three empty nodes, cap 2
    many = tmp_path / "n.0.et"
    many.write_bytes(b"\x00" * 4)
    monkeypatch.setenv("CLUSTERSIM_MAX_TRACE_EVENTS", "2")
    with pytest.raises(ConfigError, match="more than 2 nodes") as info:
        read_chakra([many])
    assert info.value.source == str(many)
    # a folder is not a trace file
    with pytest.raises(ConfigError) as info:
        read_chakra([tmp_path])
    assert info.value.source == str(tmp_path)
