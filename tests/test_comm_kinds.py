"""Communication split by what it is for (issue 47: `run` split it into neither TP nor FSDP
traffic): each record names its communicator, the kinds' times come from the timeline of
the class the breakdown describes, and `run` prints them, in JSON and on report.html."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from simulator.engine import OpRecord
from simulator.metrics.comm_kinds import CP, DP, EP, OTHER, P2P, PP, TIED, TP, comm_by_kind, \
    kind_of
from test_cli import run_main


@pytest.mark.parametrize("kind,comm,stream,want", [
    ("collective", "tp.s3", "tp", TP), ("collective", "etp.s0", "tp", TP),
    ("collective", "shard.s1", "dp", DP), ("collective", "shard", "unshard", DP),
    ("collective", "replicate", "dp", DP), ("collective", "world", "comm", DP),
    ("collective", "hier.cross0", "comm", DP), ("collective", "edp.s2", "dp", DP),
    ("collective", "ep.s0", "ep", EP), ("collective", "cp.s0", "cp", CP),
    ("collective", "embedding", "dp", TIED), ("collective", "nccl:7", "x", OTHER),
    ("send", "", "pp_send.F.s1", PP), ("recv", "", "pp_recv.B.s0", PP),
    ("send", "", "ps_push", P2P),
])
def test_each_communicator_is_named_by_what_it_is_for(kind, comm, stream, want):
    assert kind_of(kind, comm, stream) == want


def _rec(cls, i, kind, start, end, comm="", stream="s", size=0):
    return OpRecord(cls, i, "op", stream, kind, "", "", start, start, end, size, comm=comm)


def test_times_per_kind_are_unions_on_the_critical_class():
    """Class 'a' ends last (at 6). Compute [0, 3]; TP ops [1, 2] and [2.5, 4] (union 2.5,
    outside compute 4 - 3 = 1); DP [3.5, 6] (2.5, all outside); PP recv [0, 0.5] (under
    compute). Class 'b' ends earlier and is not counted."""
    recs = [_rec("a", 0, "compute", 0.0, 3.0),
            _rec("a", 1, "collective", 1.0, 2.0, "tp.s0", size=100),
            _rec("a", 2, "collective", 2.5, 4.0, "tp.s0", size=50),
            _rec("a", 3, "collective", 3.5, 6.0, "shard.s0", size=7),
            _rec("a", 4, "recv", 0.0, 0.5, stream="pp_recv.F.s1", size=3),
            _rec("b", 0, "collective", 0.0, 5.0, "ep.s0")]
    got = {k.kind: (k.busy_s, k.exposed_s, k.size_bytes, k.ops)
           for k in comm_by_kind(SimpleNamespace(records=recs))}
    assert list(got) == [TP, PP, DP]                   # the order people read them in
    assert got[TP] == pytest.approx((1.0 + 1.5, 4.0 - 3.0, 150, 2))
    assert got[PP] == pytest.approx((0.5, 0.0, 3, 1))
    assert got[DP] == pytest.approx((2.5, 2.5, 7, 1))


def test_run_splits_a_3d_plans_communication(capsys, tmp_path):
    """FSDP2 x TP8 x PP4: TP, PP and DP/FSDP each get a line, in JSON and on the page; each
    kind's time is at most all communication's, and together at least it."""
    args = ("run", "llama3-70b-fsdp-tp8-256gpu", "--set",
            "strategy.pipeline_model_parallel_size=4", "-q")
    code, out, err = run_main(capsys, *args, "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    kinds = {k["kind"]: k for k in d["comm_by_kind"]}
    assert list(kinds) == [TP, PP, DP]
    busy = [k["busy_s"] for k in kinds.values()]
    assert all(0 < b <= d["comm_s"] + 1e-12 for b in busy)
    assert sum(busy) >= d["comm_s"] - 1e-12
    assert all(k["exposed_s"] <= k["busy_s"] + 1e-12 for k in kinds.values())
    code, out, err = run_main(capsys, *args, "--out", str(tmp_path / "o"))
    assert code == 0, err
    assert "# communication by kind:" in out
    tp = kinds[TP]
    assert f"#   {TP}: {tp['busy_s']:.4g} s, {tp['exposed_s']:.4g} s of it not under " \
           "compute" in out
    page = (tmp_path / "o" / "report.html").read_text()
    assert "Communication by kind" in page and DP in page
    assert "Pipeline bubble: 4 stages" in page
