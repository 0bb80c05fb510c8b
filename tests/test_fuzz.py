"""Property-based fuzzing of every input a user hands clustersim (issue 19).

Shipped scenarios and topologies and a small profiler trace are mutated (a value replaced
by a hostile one: huge, negative, inf/nan, a bool, a list, a mapping, null; a key removed
or added; bytes of the file cut or flipped) and run through the real command line,
in-process. Every outcome must be a success or exit 2 with ONE line on stderr; an
exception escaping the command (a traceback), a run past its time guard or memory past its
guard fails the test with the input that did it.

The example counts and the seed are fixed, so CI runs the same cases every time (about a
minute on two cores); set ``CLUSTERSIM_FUZZ_EXAMPLES=N`` to run N cases per target (and
``CLUSTERSIM_FUZZ_SEED`` for other ones).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import resource
import signal
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st  # the test extra

from importer_fixtures import gloo_step, gpu_step
from simulator.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("CLUSTERSIM_FUZZ_EXAMPLES", "0"))
SEED = int(os.environ.get("CLUSTERSIM_FUZZ_SEED", "19"))
GUARD_S = 120                   # a case still running after this is a hang
GUARD_RSS_GIB = 4               # peak resident memory of the test process


def fuzz_settings(default_examples: int):
    return settings(max_examples=EXAMPLES or default_examples, deadline=None,
                    derandomize=not os.environ.get("CLUSTERSIM_FUZZ_SEED"), database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True)


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"still running after {GUARD_S} s")


def outcome(*argv: str) -> tuple[int, str]:
    """(exit code, stderr) of ``clustersim ARGV``; fails on a traceback, hang or
    memory past the guard."""
    err = io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(GUARD_S)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            main(list(argv))
        code = 0
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code
    except Hang as exc:
        pytest.fail(f"clustersim {' '.join(argv)}: {exc}")
    except BaseException as exc:              # noqa: BLE001 (a traceback is the finding)
        pytest.fail(f"clustersim {' '.join(argv)}: traceback: {type(exc).__name__}: {exc}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)
    assert rss_gib < GUARD_RSS_GIB, f"clustersim {' '.join(argv)}: peak {rss_gib:.1f} GiB"
    return code, err.getvalue()


def assert_clean(code: int, err: str, what: str) -> None:
    assert code in (0, 2), f"{what}: exit {code}: {err}"
    if code == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("clustersim: error: "), f"{what}: {err!r}"
        assert "Traceback" not in err, f"{what}: {err}"


# ------------------------------------------------------------------------ mutations
HOSTILE = st.one_of(
    st.sampled_from([0, -1, 1, 2 ** 31, 10 ** 12, 10 ** 30, -10 ** 12, True, False, None,
                     float("inf"), float("-inf"), float("nan"), 1e308, -0.0, 1e-300,
                     "", "x", "1e999 s", "inf Gb/s", "-5 GB/s", "nan us", "0 us",
                     [], [1, 2], {}, {"a": 1}, [[[[1]]]]]),
    st.integers(), st.floats(), st.text(max_size=8))


def _paths(node, prefix=()):
    """Every (path) to a value inside ``node``."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _set(doc, path, value, delete=False):
    node = doc
    for k in path[:-1]:
        node = node[k]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value


@st.composite
def mutated(draw, base):
    """``base`` with one to three values replaced, removed, or keys added."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        leaves = [p for p in paths if not isinstance(_get(doc, p), (dict, list))]
        path = draw(st.sampled_from(leaves if leaves and draw(st.integers(0, 4)) else paths))
        kind = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add"]))
        if kind == "delete":
            _set(doc, path, None, delete=True)
        elif kind == "add":
            parent = path[:-1]
            node = doc
            for k in parent:
                node = node[k]
            if isinstance(node, dict):
                node[draw(st.sampled_from(["zzz", "nodes", "bw", "latency", "gpus"]))] = \
                    copy.deepcopy(draw(HOSTILE))
        else:
            _set(doc, path, copy.deepcopy(draw(HOSTILE)))
    return doc


@st.composite
def damaged_bytes(draw, data: bytes):
    """``data`` cut short, or with a few bytes replaced by arbitrary ones."""
    if draw(st.booleans()):
        return data[: draw(st.integers(0, len(data)))]
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


def _yaml(path: str) -> dict:
    return yaml.safe_load((ROOT / path).read_text())


def _dump(doc) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=False)


# ---------------------------------------------------------------------------- cases
SCENARIO = _yaml("scenarios/resnet50-ddp-1gpu.yaml")
TOPOLOGIES = [_yaml(f"topologies/{n}.yaml") for n in ("dgx-a100", "dgx-a100-superpod",
                                                     "a100-roce-leaf-spine")]
TRACES = [gpu_step(), gloo_step(0)]


def _yaml_case(doc, folder, command: str) -> None:
    """Write ``doc`` as a YAML file in ``folder`` and check ``clustersim COMMAND FILE``."""
    path = folder / "case.yaml"
    path.write_text(_dump(doc))
    assert_clean(*outcome(command, str(path)), _dump(doc))


@fuzz_settings(80)
@given(doc=mutated(SCENARIO))
def test_mutated_scenarios_run_or_fail_in_one_line(doc, tmp_path_factory):
    _yaml_case(doc, tmp_path_factory.mktemp("scn"), "run")


@fuzz_settings(100)
@given(doc=st.one_of(*(mutated(t) for t in TOPOLOGIES)))
def test_mutated_topologies_build_or_fail_in_one_line(doc, tmp_path_factory):
    _yaml_case(doc, tmp_path_factory.mktemp("topo"), "topology")


@fuzz_settings(100)
@given(doc=st.one_of(*(mutated(t) for t in TRACES)))
def test_mutated_traces_import_or_fail_in_one_line(doc, tmp_path_factory):
    folder = tmp_path_factory.mktemp("trace")
    (folder / "t.json").write_text(json.dumps(doc))
    code, err = outcome("import", "pytorch", str(folder / "t.json"), "-o",
                        str(folder / "o.json"))
    assert_clean(code, err, json.dumps(doc)[:2000])


@fuzz_settings(60)
@given(data=st.one_of(damaged_bytes((ROOT / "scenarios/resnet50-ddp-1gpu.yaml").read_bytes()),
                      damaged_bytes((ROOT / "topologies/dgx-a100.yaml").read_bytes())))
def test_damaged_files_fail_in_one_line_or_still_work(data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bytes")
    (folder / "f.yaml").write_bytes(data)
    for command in ("run", "topology"):
        assert_clean(*outcome(command, str(folder / "f.yaml")), repr(data[:300]))


@fuzz_settings(60)
@given(key=st.sampled_from(["training.micro_batch", "training.grad_accum", "cluster.nodes",
                            "cluster.gpus", "simulation.overlap_slowdown",
                            "simulation.stragglers", "strategy.bucket_cap_mb",
                            "cluster.links", "simulation.seed", "training.seq_len"]),
       value=st.one_of(st.sampled_from(["true", ".inf", ".nan", "-1", "1e400", "[1]", "{a: 1}",
                                        "{3: .nan}", "{99: 2}", "{0: 0}", "{nvlink3: {bw: .inf}}",
                                        "{nvlink3: {latency: -1 us}}", "&a [*a]", "[[[[[[[[1]]]]]]]]",
                                        "? [a]\n: 1", "0"]), st.text(max_size=6)))
def test_hostile_set_values_run_or_fail_in_one_line(key, value):
    assert_clean(*outcome("run", "resnet50-ddp-1gpu", "--set", f"{key}={value}"),
                 f"--set {key}={value}")
