"""Hostile Chakra files (issue 42): every field of a ``.et`` file is checked where it is
read, the world is bounded, and each refusal is one line naming the file and the field."""

from __future__ import annotations

import json
import shutil

import pytest

from simulator.errors import ConfigError
from simulator.importers.chakra import TRACE_ATTR, decode, encode, write_chakra
from simulator.importers.chakra_pb import METADATA, NODE
from simulator.importers.chakra_read import read_chakra
from simulator.pipeline import build_setup
from simulator.scenario import load_scenario, resolve_scenario
from test_cli import run_main

COMP, COLL = 4, 7                        # NodeType numbers (et_def.proto)


def node(i: int, kind: int, deps=(), **attrs):
    """A Node; ``attrs``: name -> (kind, value), e.g. comm_size=("int64", 8)."""
    n = NODE(id=i, name=f"n{i}", type=kind, data_deps=list(deps))
    for name, (vkind, value) in attrs.items():
        setattr(n.attr.add(name=name), f"{vkind}_val", value)
    return n


def coll(i: int, ctype: int = 0, size=("int64", 8), **more):
    return node(i, COLL, comm_type=("int64", ctype), comm_size=size, **more)


def foreign(folder, ranks: list[list], name: str = "f") -> list:
    """One plain Chakra file per rank: ``name.<rank>.et``."""
    paths = []
    for r, nodes in enumerate(ranks):
        p = folder / f"{name}.{r}.et"
        p.write_bytes(encode([METADATA(version="0.0.4"), *nodes]))
        paths.append(p)
    return paths


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    """ResNet-50 DDP on 2 GPUs as clustersim writes it: two .et files."""
    path = resolve_scenario("resnet50-ddp-8gpu")
    setup = build_setup(load_scenario(path, ["cluster.gpus=2"]), str(path))
    return write_chakra(setup.trace, tmp_path_factory.mktemp("et") / "r")


def refused(paths, *words, field=None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        read_chakra(paths)
    exc = info.value
    assert exc.source and any(str(p) in exc.source for p in paths), str(exc)
    for w in words:
        assert w in str(exc), str(exc)
    if field is not None:
        assert exc.field == field, str(exc)
    assert "\n" not in str(exc) and len(str(exc)) < 400
    return exc


def test_unknown_node_and_collective_types(tmp_path):
    refused(foreign(tmp_path, [[node(0, 99)]], "t"), "99", field="node 0.type")
    refused(foreign(tmp_path, [[coll(0, 999)]], "c"), "999", field="node 0.comm_type")


def test_a_rank_in_the_file_name_outside_the_files_given(tmp_path):
    one = foreign(tmp_path, [[node(0, COMP, num_ops=("int64", 1))]], "x")[0]
    far = tmp_path / "x.1000000000.et"
    shutil.copy(one, far)
    refused([one, far], "1000000000", "rank")
    refused([far], "1000000000")                 # a lone file is rank 0..0


def test_ranks_whose_collectives_differ_are_refused(tmp_path):
    kinds = foreign(tmp_path, [[coll(0, 0)], [coll(0, 2)]], "k")
    refused(kinds, "all_gather", "all_reduce")
    counts = foreign(tmp_path, [[coll(0)], [coll(0), coll(1)]], "n")
    refused(counts, "collective")


def test_a_file_given_twice(tmp_path, ours):
    refused([ours[0], ours[0]], "twice")
    plain = foreign(tmp_path, [[coll(0)], [coll(0)]], "p")
    refused([plain[0], plain[0]], "twice")


@pytest.mark.parametrize("size", [("double", 1e300), ("int64", 2 ** 62), ("int64", -1),
                                  ("string", "8"), ("double", float("nan"))])
def test_collective_sizes_out_of_range(tmp_path, size):
    refused(foreign(tmp_path, [[coll(0, size=size)]], "s"), field="node 0.comm_size")


def test_a_file_with_no_nodes(tmp_path):
    refused(foreign(tmp_path, [[]], "e"), "no nodes")


def test_a_dependency_cycle_names_the_file_and_a_node(tmp_path):
    paths = foreign(tmp_path, [[node(0, COMP, deps=[1]), node(1, COMP, deps=[0])]], "cy")
    refused(paths, "cycle", "node 0")


def test_duplicate_node_ids(tmp_path):
    refused(foreign(tmp_path, [[node(3, COMP), node(3, COMP)]], "d"), "twice", field="node 3.id")


def _with_whole(path, out, change):
    meta, nodes = decode(path.read_bytes(), str(path))
    for a in meta.attr:
        if a.name == TRACE_ATTR:
            whole = json.loads(a.string_val)
            change(whole)
            a.string_val = json.dumps(whole)
    out.write_bytes(encode([meta, *nodes]))
    return out


def test_metadata_world_size_of_a_billion(tmp_path, ours):
    bad = _with_whole(ours[0], tmp_path / "w.0.et", lambda w: w.update(world_size=10 ** 9))
    refused([bad], "1,000,000,000")


def test_a_bit_flip_in_our_json_names_the_file(tmp_path, ours):
    meta, nodes = decode(ours[0].read_bytes(), str(ours[0]))
    for a in meta.attr:
        if a.name == TRACE_ATTR:
            a.string_val = a.string_val[:40] + "}" + a.string_val[41:]
    bad = tmp_path / "b.0.et"
    bad.write_bytes(encode([meta, *nodes]))
    refused([bad, ours[1]], "JSON", field=f"GlobalMetadata.{TRACE_ATTR}")


def test_files_of_two_different_traces(tmp_path, ours):
    other = _with_whole(ours[1], tmp_path / "o.1.et",
                        lambda w: w["meta"].update(model="something else"))
    refused([ours[0], other], "differ")


def test_cli_one_line_exit_2(capsys, tmp_path):
    paths = foreign(tmp_path, [[node(0, 99)]], "t")
    code, out, err = run_main(capsys, "import", "chakra", str(paths[0]), "-o",
                              str(tmp_path / "o.json"))
    assert code == 2 and err.count("\n") == 1 and str(paths[0]) in err
