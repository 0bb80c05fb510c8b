"""The clustersim command line: output formats, and one-line errors with exit code 2."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from simulator.cli import main
from simulator.cli.collective import element_count
from simulator.cli.common import format_ranks, normalise_op, parse_ranks
from simulator.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--min-bytes", "1M", "--max-bytes", "4M"]


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """Run the real console entry point in-process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    code = exc.value.code
    return (0 if code is None else code), out, err


def table_rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line and not line.startswith("#")]


# --------------------------------------------------------------------------- success
def test_default_table(capsys):
    code, out, err = run_main(capsys, "collective", "all_reduce", *SMALL)
    assert code == 0, err
    assert err == ""
    comments = [line for line in out.splitlines() if line.startswith("#")]
    head = "\n".join(comments)
    for word in ("dgx-a100", "GPUs: 8", "node", "all_reduce", "fidelity: flow"):
        assert word in head
    rows = table_rows(out)
    assert [int(r[0]) for r in rows] == [1 << 20, 2 << 20, 4 << 20]
    assert [int(r[1]) for r in rows] == [(1 << 20) // 4, (2 << 20) // 4, (4 << 20) // 4]
    assert all(r[2] == "float" for r in rows)
    busbw = [float(r[5]) for r in rows]
    assert all(b > 0 for b in busbw)
    avg = [line for line in comments if line.startswith("# Avg bus bandwidth")]
    assert len(avg) == 1
    assert float(avg[0].split(":")[1]) == pytest.approx(sum(busbw) / len(busbw), rel=1e-2)


def test_csv_format(capsys):
    code, out, err = run_main(capsys, "collective", "all_reduce", *SMALL, "--format", "csv")
    assert code == 0, err
    df = pd.read_csv(io.StringIO(out))
    assert list(df.columns) == ["size_bytes", "count", "type", "time_us", "algbw_GBps",
                                "busbw_GBps", "algorithm", "protocol"]
    assert len(df) == 3
    n = 8
    assert (df.busbw_GBps > 0).all()
    assert df.busbw_GBps.to_numpy() == pytest.approx(df.algbw_GBps * 2 * (n - 1) / n,
                                                     rel=1e-9)
    # algbw = size / time, in 1e9 bytes/s
    assert df.algbw_GBps.to_numpy() == pytest.approx(df.size_bytes / (df.time_us * 1e3),
                                                     rel=1e-9)


def test_json_format_and_nccl_tests_name(capsys):
    code, out, err = run_main(capsys, "collective", "all_reduce_perf", *SMALL,
                              "--format", "json", "--fidelity", "analytical")
    assert code == 0, err
    rows = json.loads(out)
    assert isinstance(rows, list) and len(rows) == 3
    assert set(rows[0]) == {"size_bytes", "count", "type", "time_us", "algbw_GBps",
                            "busbw_GBps", "algorithm", "protocol"}
    for r in rows:
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * 7 / 8, rel=1e-9)


def test_superpod_nodes_gives_32_ranks(capsys):
    code, out, err = run_main(capsys, "collective", "allgather", "--topology",
                              "dgx-a100-superpod", "--nodes", "4", "--min-bytes", "1M",
                              "--max-bytes", "1M")
    assert code == 0, err
    assert "ranks: 32" in out
    rows = table_rows(out)
    assert len(rows) == 1
    # nccl-tests prints all_gather's count per rank
    assert int(rows[0][1]) == (1 << 20) // (4 * 32)


def test_send_recv_default_and_explicit_ranks(capsys):
    code, out, err = run_main(capsys, "collective", "sendrecv", "--topology",
                              "dgx-a100-superpod", "--ranks", "0,8", "--min-bytes", "64M",
                              "--max-bytes", "64M", "--format", "json")
    assert code == 0, err
    inter = json.loads(out)[0]
    code, out, err = run_main(capsys, "collective", "send_recv", "--topology",
                              "dgx-a100-superpod", "--min-bytes", "64M", "--max-bytes", "64M",
                              "--format", "json")
    assert code == 0, err
    intra = json.loads(out)[0]
    assert inter["algorithm"] == "direct"
    assert intra["busbw_GBps"] > inter["busbw_GBps"] > 0   # NVLink beats one HDR NIC


def test_broadcast_root_and_subset(capsys):
    code, out, err = run_main(capsys, "collective", "broadcast", "--topology",
                              "dgx-a100-superpod", "--ranks", "8-15", "--root", "12",
                              "--min-bytes", "1M", "--max-bytes", "1M")
    assert code == 0, err
    assert "root: 12" in out and "ranks: 8 (8-15)" in out


def test_topology_summary(capsys):
    code, out, err = run_main(capsys, "topology", "dgx-a100-superpod", "--nodes", "4")
    assert code == 0, err
    assert "servers: 4" in out
    assert "GPUs: 32" in out
    assert "NICs: 32" in out
    assert "leaf 8" in out and "spine 8" in out
    assert "ib-hdr" in out and "nvlink3" in out
    assert "uplink/downlink ratio" in out
    code, out, err = run_main(capsys, "topology")
    assert code == 0, err
    assert "dgx-a100" in out and "GPUs: 8" in out and "ratio" not in out


def test_version_and_help(capsys):
    code, out, _ = run_main(capsys, "--version")
    assert code == 0 and out.startswith("clustersim ")
    code, out, _ = run_main(capsys, "--help")
    assert code == 0 and "collective" in out and "topology" in out


# ---------------------------------------------------------------------------- errors
@pytest.fixture
def bad_yaml(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("name: x\ngenerator: dgx_a100_node\nparams: {gpu: A100-SXM4-80GB\n")
    return str(p)


@pytest.fixture
def unknown_key_yaml(tmp_path):
    p = tmp_path / "extra.yaml"
    p.write_text("name: x\ngenerator: dgx_a100_node\nflavour: big\n"
                 "params: {gpu: A100-SXM4-80GB}\n")
    return str(p)


ERRORS = [
    (["collective", "bogus_op"], "OP"),
    (["collective", "all_reduce", "--min-bytes", "0"], "--min-bytes"),
    (["collective", "all_reduce", "--min-bytes", "-8"], "--min-bytes"),
    (["collective", "all_reduce", "--max-bytes", "8Q"], "--max-bytes"),
    (["collective", "all_reduce", "--ranks", "0-99"], "--ranks"),
    (["collective", "all_reduce", "--ranks", "0,1,1"], "--ranks"),
    (["collective", "send_recv", "--ranks", "0-2"], "--ranks"),
    (["collective", "all_reduce", "--min-bytes", "8M", "--max-bytes", "1M"], "--min-bytes"),
    (["collective", "all_reduce", "--step-factor", "1"], "--step-factor"),
    (["collective", "all_reduce", "--topology", "no-such-cluster"], "--topology"),
    (["collective", "all_reduce", "--nodes", "0"], "--nodes"),
    (["collective", "all_reduce", "--nodes", "4"], "--nodes"),
    (["collective", "all_gather", "--algo", "tree"], "--algo"),
    (["collective", "all_reduce", "--fidelity", "bogus"], "--fidelity"),
    (["collective", "broadcast", "--ranks", "0-3", "--root", "5"], "--root"),
    (["collective"], "OP"),
    (["frobnicate"], "frobnicate"),
    (["topology", "no-such-cluster"], "no-such-cluster"),
]


@pytest.mark.parametrize("args,field", ERRORS, ids=[" ".join(a) for a, _ in ERRORS])
def test_user_errors_are_one_line(capsys, args, field):
    code, out, err = run_main(capsys, *args)
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("clustersim: error: ")
    assert "Traceback" not in err
    assert field in lines[0]


@pytest.mark.parametrize("fixture,field", [("bad_yaml", "line"),
                                           ("unknown_key_yaml", "flavour")])
def test_topology_file_errors(capsys, request, fixture, field):
    path = request.getfixturevalue(fixture)
    for args in (["collective", "all_reduce", "--topology", path], ["topology", path]):
        code, out, err = run_main(capsys, *args)
        assert code == 2 and out == ""
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("clustersim: error: ")
        assert path in lines[0] and field in lines[0]


def test_subprocess_entry_point(tmp_path):
    """``python -m simulator.cli`` runs main(): a real stderr line and exit status."""
    cmd = [sys.executable, "-m", "simulator.cli"]
    ok = subprocess.run(cmd + ["collective", "all_reduce", "--min-bytes", "1M",
                                   "--max-bytes", "1M", "--format", "csv"],
                        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("size_bytes,count,type,time_us")
    bad = subprocess.run(cmd + ["collective", "all_reduce", "--max-bytes", "8Q"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("clustersim: error: ") and "--max-bytes" in bad.stderr


def test_cli_import_loads_no_heavy_library():
    """``clustersim --help`` stays fast: importing the CLI (every command registered) loads
    no pandas, matplotlib or networkx; the commands import them when they run."""
    heavy = ("pandas", "matplotlib", "networkx")
    probe = (f"import simulator.cli, sys; "
             f"print(' '.join(m for m in sys.modules if m.split('.')[0] in {heavy!r}))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


# ---------------------------------------------------------------------------- helpers
@pytest.mark.parametrize("spec,n,expected", [
    ("0-7", 8, list(range(8))),
    ("0,8,16", 32, [0, 8, 16]),
    ("0-3,8-11", 16, [0, 1, 2, 3, 8, 9, 10, 11]),
    (" 5 ", 8, [5]),
    ("3, 1", 8, [3, 1]),
    ("2-2", 4, [2]),
])
def test_parse_ranks(spec, n, expected):
    assert parse_ranks(spec, n) == expected


@pytest.mark.parametrize("spec,n,words", [
    ("0-99", 8, ["99", "0-7"]),
    ("8", 8, ["8", "0-7"]),
    ("0,1,1", 8, ["1", "more than once"]),
    ("0-3,2-5", 8, ["2", "more than once"]),
    ("3-1", 8, ["backwards"]),
    ("", 8, ["empty"]),
    ("a", 8, ["'a'"]),
    ("0,,1", 8, ["''"]),
    ("-1", 8, ["'-1'"]),
    ("1.5", 8, ["'1.5'"]),
])
def test_parse_ranks_errors(spec, n, words):
    with pytest.raises(ConfigError) as exc:
        parse_ranks(spec, n)
    msg = str(exc.value)
    assert msg.startswith("--ranks: ")
    for w in words:
        assert w in msg


def test_format_ranks_and_ops():
    assert format_ranks([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert format_ranks([3, 1]) == "3,1"
    assert normalise_op("all_reduce_perf") == "all_reduce"
    assert normalise_op("AllReduce") == "all_reduce"
    assert normalise_op("sendrecv") == "send_recv"
    assert normalise_op("alltoall") == "all_to_all"
    assert normalise_op("reducescatter") == "reduce_scatter"
    assert normalise_op("reduce_scatter_perf") == "reduce_scatter"
    assert normalise_op("gather") is None
    assert element_count("all_reduce", 1024, 8) == 256
    assert element_count("all_gather", 1024, 8) == 32


def test_cuda_graph_flag_removes_the_launch_overhead(capsys):
    from simulator.constants import load_constants
    args = ["collective", "all_reduce", "-b", "8", "-e", "8", "--format", "json"]
    code, plain, _ = run_main(capsys, *args)
    code2, graph, _ = run_main(capsys, *args, "-G")
    assert code == code2 == 0
    dt = json.loads(plain)[0]["time_us"] - json.loads(graph)[0]["time_us"]
    assert dt == pytest.approx(load_constants().launch_overhead_s * 1e6)
