"""Property-based fuzzing of the file readers of issue 42: Chakra files (protobuf mutation),
framework configs (DeepSpeed JSON, torchtitan TOML, Megatron arguments) and scenario values
(YAML tags, magnitudes). Each mutated input must read, or be refused with ONE
:class:`~simulator.errors.ConfigError` naming the file (the CLI prints it as one line,
exit 2); any other exception is the finding, and the test fails with the input.

The readers are called directly (no simulation), so the defaults run in seconds; the seed
is fixed (hypothesis derandomised) and ``CLUSTERSIM_FUZZ_EXAMPLES=N`` runs N cases per
target, ``CLUSTERSIM_FUZZ_SEED`` other ones (as in test_fuzz.py).
"""

from __future__ import annotations

import copy
import functools
import json
import tomllib
from pathlib import Path

from hypothesis import given, strategies as st  # the test extra

from simulator.errors import ConfigError
from simulator.importers.chakra import TRACE_ATTR, decode, encode, standard_only, write_chakra
from simulator.importers.chakra_read import read_chakra
from test_fuzz import damaged_bytes, fuzz_settings, mutated

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "scenarios/configs"


def refused_in_one_line(exc: ConfigError, names: list[str]) -> None:
    text = str(exc)
    assert "\n" not in text and len(text) < 1000, text
    assert exc.source and any(n in exc.source for n in names), text


# ---------------------------------------------------------------------------- Chakra
@functools.cache
def chakra_files() -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """ResNet-50 DDP on 2 GPUs as clustersim writes it, and stripped to the standard
    fields (a foreign Chakra trace): the bytes of each rank's file."""
    import tempfile
    from simulator.pipeline import build_setup
    from simulator.scenario import load_scenario, resolve_scenario
    path = resolve_scenario("resnet50-ddp-8gpu")
    setup = build_setup(load_scenario(path, ["cluster.gpus=2"]), str(path))
    with tempfile.TemporaryDirectory() as folder:
        ours = tuple(p.read_bytes() for p in write_chakra(setup.trace, Path(folder) / "r"))
    return ours, tuple(standard_only(d) for d in ours)


ATTR_VALUES = st.one_of(
    st.tuples(st.just("int64"), st.integers(-2 ** 63, 2 ** 63 - 1)),
    st.tuples(st.just("double"), st.floats()),
    st.tuples(st.just("string"), st.text(max_size=6)),
    st.tuples(st.just("bool"), st.booleans()))
META_VALUES = [0, -1, 10 ** 9, 2 ** 20 + 1, "8", 1.5, None, True, [], {}, [1, 2], {"a": 1},
               [[0, 9]], {"x": [[0, 1]]}, {"id": 7, "ranks": [0]}, 1e308]
ATTR_NAMES = ("comm_size", "comm_type", "num_ops", "tensor_size", "pg_name", "is_cpu_op",
              "comm_src", "comm_dst", "comm_tag", "op_type", "m", "precision")


@st.composite
def chakra_mutation(draw):
    """(files' bytes, what changed): one rank's file of either base changed by a node field,
    a node type, a dependency, a duration, the metadata JSON, or its bytes."""
    base = draw(st.sampled_from(chakra_files()))
    r = draw(st.integers(0, 1))
    what = draw(st.sampled_from(["attr", "attr", "type", "dep", "duration", "meta", "bytes"]))
    if what == "bytes":
        files = list(base)
        files[r] = draw(damaged_bytes(base[r]))
        return files, what
    meta, nodes = decode(base[r], "x")
    node = nodes[draw(st.integers(0, len(nodes) - 1))]
    if what == "attr":
        name = draw(st.sampled_from(ATTR_NAMES))
        kind, value = draw(ATTR_VALUES)
        for a in list(node.attr):
            if a.name == name:
                node.attr.remove(a)
        setattr(node.attr.add(name=name), f"{kind}_val", value)
    elif what == "type":
        node.type = draw(st.integers(0, 2 ** 31 - 1))
    elif what == "dep":
        node.data_deps.append(draw(st.integers(0, 2 ** 64 - 1)) if draw(st.booleans())
                              else nodes[draw(st.integers(0, len(nodes) - 1))].id)
    elif what == "duration":
        node.duration_micros = draw(st.integers(0, 2 ** 64 - 1))
    else:
        for a in meta.attr:
            if a.name == TRACE_ATTR:
                whole = json.loads(a.string_val)
                key = draw(st.sampled_from(["world_size", "meta", "communicators", "class"]))
                whole[key] = copy.deepcopy(draw(st.sampled_from(META_VALUES)))
                a.string_val = json.dumps(whole)
    files = list(base)
    files[r] = encode([meta, *nodes])
    return files, what


@fuzz_settings(60)
@given(case=chakra_mutation())
def test_mutated_chakra_files_read_or_fail_in_one_line(case, tmp_path_factory):
    files, what = case
    folder = tmp_path_factory.mktemp("et")
    paths = []
    for r, data in enumerate(files):
        paths.append(folder / f"r.{r}.et")
        paths[-1].write_bytes(data)
    try:
        trace = read_chakra(paths)
    except ConfigError as exc:
        refused_in_one_line(exc, [str(p) for p in paths])
        return
    assert trace.world_size == 2, what


# --------------------------------------------------------------------- framework configs
DS = json.loads((CONFIGS / "ds_zero3.json").read_text())
TT = tomllib.loads((CONFIGS / "llama3_70b.toml").read_text())
ARGS = (CONFIGS / "mixtral_8x7b_ep8.args").read_text().splitlines()


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v != v:
        return "nan"
    if isinstance(v, float) and abs(v) == float("inf"):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, (int, float, str)):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"


def _toml(doc: dict) -> str | None:
    """A nested mapping as TOML (None when it holds a null, which TOML cannot)."""
    if "null" in json.dumps(doc):
        return None
    top = [f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in doc.items()
           if not isinstance(v, dict)]
    tables = [f"[{json.dumps(str(k))}]\n" + "\n".join(f"{json.dumps(str(kk))} = "
                                                      f"{_toml_value(vv)}"
                                                      for kk, vv in v.items())
              for k, v in doc.items() if isinstance(v, dict)]
    return "\n".join(top) + "\n\n" + "\n\n".join(tables) + "\n"


@st.composite
def args_mutation(draw):
    lines = list(ARGS)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(5, len(lines) - 1))
        kind = draw(st.sampled_from(["value", "drop", "twice", "junk"]))
        words = lines[i].split()
        if kind == "value" and len(words) >= 2:
            words[1] = draw(st.sampled_from(["-1", "0", "x", "1.5", "''", "inf", "9" * 30,
                                             "1e3", "\\", '"']))
            lines[i] = " ".join(words)
        elif kind == "drop":
            del lines[i]
        elif kind == "twice":
            lines.insert(i, lines[i])
        else:
            lines.insert(i, draw(st.sampled_from(["\\", "--zz 3 \\", "'open \\", "-- \\",
                                                  "--tensor-model-parallel-size \\"])))
    return "\n".join(lines) + "\n"


CONFIG_CASES = st.one_of(
    st.tuples(st.just("ds.json"), mutated(DS).map(json.dumps),
              st.just("llama2-7b-fsdp-128gpu")),
    st.tuples(st.just("tt.toml"), mutated(TT).map(_toml), st.just("llama3-70b-fsdp-tp8-256gpu")),
    st.tuples(st.just("m.args"), args_mutation(), st.just("mixtral-8x7b-ep8")),
    st.tuples(st.sampled_from(["x.json", "x.toml", "x.args"]),
              st.sampled_from([json.dumps(DS), "\n".join(ARGS), "", "\\\n\\\n", "{}",
                               (CONFIGS / "llama3_70b.toml").read_text()]),
              st.just("quickstart")))


@fuzz_settings(45)
@given(case=CONFIG_CASES)
def test_mutated_framework_configs_merge_or_fail_in_one_line(case, tmp_path_factory):
    """Read and merged over the scenario (the plan checked on its GPUs), not simulated: a
    refusal names the file it is about, and a file is used for something or refused."""
    from simulator.cli.configfile import scenario_with_config
    from simulator.strategies.frameworks.files import read_config
    name, text, scenario = case
    if text is None:
        return
    path = tmp_path_factory.mktemp("cfg") / name
    path.write_text(text)
    try:
        pieces = read_config(path)
        scenario_with_config(scenario, pieces, [])
    except ConfigError as exc:
        text = str(exc)
        assert "\n" not in text and len(text) < 1000, text
        assert exc.source, text
        # the config's strategy replaces the scenario's: a strategy error is the config's
        assert exc.source == str(path) or not (exc.field or "").startswith("strategy"), text
        return
    assert pieces.used, f"{path}: merged though nothing in it was used"


# ---------------------------------------------------------------------- scenario values
@fuzz_settings(60)
@given(key=st.sampled_from(["simulation.seed", "training.seq_len", "training.micro_batch",
                            "cluster.nodes", "cluster.gpus", "strategy.num_packs",
                            "simulation.overlap_slowdown"]),
       value=st.one_of(
           st.sampled_from(["!!int 1e3", "!!float x", "!!timestamp 2020-13-45", "!!binary A",
                            "!!set {a: null}", "!!str 3", "!!int 0x", "-1", "1e56",
                            "[" + ",".join(["1"] * 500) + "]"]),
           st.integers().map(str), st.integers(0, 400).map(lambda n: "1" + "0" * n)))
def test_hostile_scenario_values_load_or_fail_in_one_line(key, value):
    from simulator.scenario import load_scenario
    scenario = "resnet50-tf-mirrored-8gpu" if key == "strategy.num_packs" else \
        "llama2-7b-fsdp-128gpu"
    try:
        load_scenario(scenario, [f"{key}={value}"])
    except ConfigError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 600, str(exc)
