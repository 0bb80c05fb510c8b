"""Malformed Trace files given to `clustersim replay`: one line naming the field, exit 2.

The inputs are malformed copies of one small valid trace (tests/trace_variants.py), written
as trace.io writes a file. Before Trace.validate checked every field the engine reads, these
raised tracebacks (KeyError, TypeError, IndexError, ValueError), replayed silently with a
wrong answer, or (NaN/inf slowdowns) never finished.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from simulator.cli import main
from simulator.engine import replay
from simulator.trace.fields import MAX_REPEAT
from simulator.trace.io import read_trace
from simulator.trace.schema import TraceError
from trace_variants import VARIANTS, broken_document, trace_document, valid_trace


def _replay(capsys, path) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["replay", str(path), "--format", "json"])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_the_valid_trace_replays(tmp_path, capsys):
    path = tmp_path / "valid.json"
    path.write_text(json.dumps(trace_document()))
    code, out, err = _replay(capsys, path)
    assert (code, err) == (0, "")
    assert json.loads(out)["iteration_time_s"] > 0


def test_there_are_at_least_17_malformed_inputs():
    assert len(VARIANTS) >= 17


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_malformed_trace_is_one_line_naming_the_field(tmp_path, capsys, variant):
    path = tmp_path / f"{variant}.json"
    path.write_text(json.dumps(broken_document(variant)))    # NaN/Infinity as JSON allows
    code, out, err = _replay(capsys, path)
    field = VARIANTS[variant][1]
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"clustersim: error: {path}: "), err
    assert field in err, err
    if ".ops[" in field:
        # the rank class, the op id and its name are named with the field (every op variant
        # edits class a)
        position = int(field.split(".ops[")[1].split("]")[0])
        op = broken_document(variant)["classes"][0]["ops"][position]
        assert f"classes[a].{field}" in err and f"rank class a, op {op['id']!r} " \
            f"({op['name']})" in err or f"rank class a, op {op['id']} ({op['name']})" in err, err


def test_the_field_path_is_classes_then_op_position(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(broken_document("negative-delay")))
    with pytest.raises(Exception, match=r"t\.json: classes\[a\]\.ops\[4\]\.duration_s: rank "
                                        r"class a, op 4 \(wait\): must be a finite number "
                                        r">= 0, got -1\.0"):
        read_trace(path)


NON_FINITE = {"nan-duration": ("duration_s", math.nan), "inf-duration": ("duration_s", math.inf),
              "nan-slowdown": ("slowdown", math.nan), "inf-slowdown": ("slowdown", math.inf)}


@pytest.mark.parametrize("variant", sorted(NON_FINITE))
def test_non_finite_durations_and_slowdowns_are_refused_never_a_hang(tmp_path, variant):
    # Before, a NaN or infinite slowdown made the engine spin forever. The command runs in
    # its own process under a timeout, so a regression fails the test instead of hanging it.
    path = tmp_path / f"{variant}.json"
    path.write_text(json.dumps(broken_document(variant)))
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "replay", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and NON_FINITE[variant][0] in proc.stderr


@pytest.mark.parametrize("field,value", [("duration_s", math.nan), ("duration_s", math.inf),
                                         ("slowdown", math.nan), ("slowdown", -math.inf)])
def test_the_engine_refuses_a_non_finite_trace_built_in_memory(field, value):
    trace = valid_trace()
    if field == "slowdown":
        trace.classes[1].slowdown = value
    else:
        trace.classes[0].ops[5].duration_s = value
    with pytest.raises(TraceError, match=field):
        replay(trace, None, None)     # refused before the planner is used


def test_repeat_limit_is_inclusive():
    trace = valid_trace()
    trace.classes[0].ops[4].attrs["repeat"] = MAX_REPEAT
    trace.validate()
    trace.classes[0].ops[4].attrs["repeat"] = MAX_REPEAT + 1
    with pytest.raises(TraceError, match=rf"attrs\.repeat: .*must be <= {MAX_REPEAT}"):
        trace.validate()


def test_generated_numbers_of_numpy_types_are_accepted():
    np = pytest.importorskip("numpy")
    trace = valid_trace()
    trace.classes[0].ops[1].size_bytes = np.int64(1 << 20)
    trace.classes[0].ops[0].flops = np.float64(1e9)
    trace.validate()


@pytest.mark.parametrize("attrs,reason", [({"host": 5}, "server 5 has 0 NIC(s), no NIC 0"),
                                          ({"host": 0, "nic": 99},
                                           "server 0 has 8 NIC(s), no NIC 99")])
def test_a_host_copy_to_a_server_or_nic_the_cluster_lacks_names_the_op(tmp_path, capsys,
                                                                        attrs, reason):
    # the one check that needs the cluster (dgx-a100: one server, 8 NICs): before, a line
    # naming neither the file nor the op
    d = trace_document()
    d["classes"][0]["ops"][7]["attrs"] = attrs
    path = tmp_path / "host.json"
    path.write_text(json.dumps(d))
    code, _, err = _replay(capsys, path)
    assert code == 2
    assert err == (f"clustersim: error: {path}: classes[a].ops[7].attrs.host: rank class a, "
                   f"op 7 (to_host): {reason}\n")
