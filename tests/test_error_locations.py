"""Every error names where it came from (issue 21, item 7): the file (scenario, topology,
model or study file), or ``--set`` for a value given on the command line, and never an
option the user did not pass (``--nodes`` for a scenario's ``cluster.nodes``).

Each case is a bad input as a user would write it; the test runs the command and checks
the one error line. ``python tests/test_error_locations.py`` prints every line (the survey
of the issue)."""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

QUICKSTART = {"name": "bad", "model": "llama-2-7b",
              "training": {"micro_batch": 1, "seq_len": 512},
              "cluster": {"topology": "dgx-a100"}, "strategy": {"name": "fsdp"}}
LEAF_SPINE = {"name": "t", "generator": "leaf_spine",
              "params": {"nodes": 2, "node": {"type": "dgx_a100", "nics": 8, "nic": "ib-hdr"},
                         "nodes_per_leaf": 4}}
MODEL = {"name": "m", "family": "gpt", "layers": 2, "hidden": 256, "heads": 4,
         "ffn_hidden": 1024, "vocab": 1000, "max_seq_len": 1024}
STUDY = {"name": "s", "command": "run", "base": {"scenario": "quickstart"},
         "axes": {"grid": {"training.seq_len": [512]}}}

BAD_LINKS = {"bw-word": {"nvlink3": {"bw": "fast"}},
             "bw-negative": {"nvlink3": {"bw": "-5 GB/s"}},
             "bw-no-unit": {"nvlink3": {"bw": 5}},
             "latency-word": {"nvlink3": {"latency": "soon"}},
             "unknown-type": {"nosuch": {"bw": "1 GB/s"}},
             "unknown-key": {"nvlink3": {"speed": "1 GB/s"}}}


def _merge(base: dict, dotted: dict) -> dict:
    data = yaml.safe_load(yaml.safe_dump(base))
    for key, value in dotted.items():
        node = data
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return data


# (id, what is written where, expected location): scenario keys, --set values, topology
# files, model files and study files.
SCENARIO_CASES = {
    **{f"links-{k}": {"cluster.links": v} for k, v in BAD_LINKS.items()},
    "links-not-a-mapping": {"cluster.links": {"nvlink3": 5}},
    "nodes-on-one-server": {"cluster.nodes": 2},
    "nodes-too-many": {"cluster.topology": "dgx-a100-superpod", "cluster.nodes": 100000},
    "topology-unknown": {"cluster.topology": "nosuch"},
    "gpus-too-many": {"cluster.gpus": 100},
    "ecmp-unknown": {"cluster.ecmp": "random"},
    "strategy-unknown-key": {"strategy": {"name": "fsdp", "foo": 1}},
    "strategy-unknown": {"strategy": {"name": "nosuch"}},
    "strategy-bad-sharding": {"strategy": {"name": "fsdp", "sharding": "BAD"}},
    "strategy-bad-value": {"strategy": {"name": "ddp", "bucket_cap_mb": -1}},
    "strategy-twice": {"strategy": {"name": "fsdp", "precision": "fp16"}},
    "model-unknown": {"model": "nosuch-model"},
    "precision-unknown": {"training.precision": "fp7"},
    "stragglers-bad": {"simulation.stragglers": {0: -1}},
}
SET_CASES = {
    **{f"set-links-{k}": ["cluster.links=" + yaml.safe_dump(v, default_flow_style=True).strip()]
       for k, v in BAD_LINKS.items()},
    "set-nodes-on-one-server": ["cluster.nodes=2"],
    "set-topology-unknown": ["cluster.topology=nosuch"],
    "set-strategy-unknown-key": ["strategy={name: fsdp, foo: 1}"],
    "set-strategy-bad-sharding": ["strategy.sharding=BAD"],
    "set-model-unknown": ["model=nosuch-model"],
    "set-not-a-mapping": ["training.seq_len.x=1"],
}
TOPOLOGY_CASES = {
    "topo-nodes-negative": {"params.nodes": -1},
    "topo-unknown-param": {"params.colour": "red"},
    "topo-bad-node-type": {"params.node": {"type": "nosuch"}},
    "topo-nodes-per-leaf-word": {"params.nodes_per_leaf": "four"},
    "topo-links-bw-word": {"links": {"ib-hdr": {"bw": "fast"}}},
    "topo-links-unknown-type": {"links": {"nosuch": {"bw": "1 GB/s"}}},
    "topo-generator-unknown": {"generator": "nosuch"},
}
MODEL_CASES = {
    "model-missing-key": {"hidden": None},
    "model-negative-layers": {"layers": -1},
    "model-unknown-key": {"colour": "red"},
    "model-heads-not-dividing": {"heads": 3},
}
STUDY_CASES = {
    "study-unknown-key": {"colour": "red"},
    "study-unknown-command": {"command": "fly"},
    "study-base-scenario-unknown": {"base": {"scenario": "nosuch"}},
    "study-axis-empty": {"axes": {"grid": {"training.seq_len": []}}},
    "study-set-not-mapping": {"base": {"scenario": "quickstart", "set": [1]}},
}

ALL = [*SCENARIO_CASES, *SET_CASES, *TOPOLOGY_CASES, *MODEL_CASES, *STUDY_CASES]


def _write(path: Path, data: dict) -> str:
    data = {k: v for k, v in data.items() if v is not None}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def build(case: str, folder: Path) -> tuple[list[str], str]:
    """(argv, the location the error line must name) of ``case``, files in ``folder``."""
    if case in SCENARIO_CASES:
        path = _write(folder / "scenario.yaml", _merge(QUICKSTART, SCENARIO_CASES[case]))
        return ["run", path], path
    if case in SET_CASES:
        path = _write(folder / "scenario.yaml", QUICKSTART)
        return ["run", path, *[a for s in SET_CASES[case] for a in ("--set", s)]], "--set"
    if case in TOPOLOGY_CASES:
        data = _merge(LEAF_SPINE, TOPOLOGY_CASES[case])
        topo = _write(folder / "topology.yaml", data)
        path = _write(folder / "scenario.yaml", _merge(QUICKSTART, {"cluster.topology": topo}))
        return ["run", path], topo
    if case in MODEL_CASES:
        model = _write(folder / "model.yaml", {**MODEL, **MODEL_CASES[case]})
        path = _write(folder / "scenario.yaml", _merge(QUICKSTART, {"model": model}))
        return ["run", path], model
    path = _write(folder / "study.yaml", {**STUDY, **STUDY_CASES[case]})
    return ["study", path, "--out", str(folder / "out")], path


def error_line(argv: list[str]) -> tuple[int, str]:
    """Run ``clustersim argv`` in this process: (exit code, its stderr)."""
    from simulator.cli import main
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, err.getvalue().strip()


@pytest.mark.parametrize("case", ALL)
def test_every_error_names_its_file_or_option(case, tmp_path):
    argv, where = build(case, tmp_path)
    code, err = error_line(argv)
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert where in err, err
    if "--nodes" not in argv:
        assert "--nodes" not in err, err        # an option the user did not pass


if __name__ == "__main__":          # the survey: every case and its line
    import tempfile
    missing = 0
    for case in ALL:
        with tempfile.TemporaryDirectory() as tmp:
            argv, where = build(case, Path(tmp))
            code, err = error_line(argv)
            err = err.replace(tmp, "TMP")
            where = where.replace(tmp, "TMP")
            ok = where in err and ("--nodes" not in err or "--nodes" in argv)
            missing += not ok
            print(f"{'ok  ' if ok else 'MISS'} {case:32s} rc={code} {err}")
    print(f"{missing} of {len(ALL)} lines do not name their file/option "
          f"(or blame an option not given)", file=sys.stderr)
