"""Host waits for host-run collectives: instant events are not activity, a TensorFlow
collective is done when its done callback starts, and gzip'd xplane files are read."""

from __future__ import annotations

import gzip

import pytest

from simulator.errors import ConfigError
from simulator.importers import host, import_trace
from test_importers_tf import EVENTS, SIZE, xspace

DONE = "CollectiveExecutor::ExecuteAsync::Done"


def test_instant_events_do_not_split_an_idle_gap():
    threads = {"main": [(0.0, 1.0), (5.0, 5.0), (9.0, 10.0)],       # an instant marker at 5
               "pool": [(2.0, 3.0), (2.5, 2.5)]}                    # ... and one inside 2-3
    assert host.busy_intervals(threads, 0.0, 10.0) == [(0.0, 1.0), (2.0, 3.0), (9.0, 10.0)]
    assert host.gaps(host.busy_intervals(threads, 0.0, 10.0), 0.0, 10.0) == [(1.0, 2.0),
                                                                            (3.0, 9.0)]


def _wait_s(trace) -> float:
    waits = [op for op in trace.classes[0].ops if op.name.startswith("wait:")]
    return sum(op.attrs["waited_recorded_s"] for op in waits)


def test_tensorflow_collective_ends_when_its_done_callback_starts(tmp_path):
    # The reduce's event runs to 700 us, but its done callback starts at 690 and the
    # update it unblocks starts at 695, inside the event: that is the host waiting for it.
    events = [e for e in EVENTS if not e[1].startswith("sgd/")]
    events += [("python", "EagerExecute: train_step", "", 2, 6, {}),   # train is no leaf
               ("collective_ops/1", DONE, "", 690, 12, {}),
               ("tf_Compute/1", "sgd/update/Mul:Mul", "Mul", 695, 205, {})]
    path = tmp_path / "worker0.xplane.pb"
    path.write_bytes(xspace(events))
    trace = import_trace("tensorflow", [path], 1, {"CollectiveReduceV2": SIZE})
    coll = next(op for op in trace.classes[0].ops if op.kind == "collective")
    assert coll.attrs["recorded_s"] == pytest.approx(270e-6)
    assert _wait_s(trace) == pytest.approx(285e-6)           # 410 -> 695: issued, resumed
    path.write_bytes(xspace([e for e in events if e[1] != DONE]))
    assert _wait_s(import_trace("tensorflow", [path], 1, {"CollectiveReduceV2": SIZE})) == 0


def test_gzipped_xplane_is_read_and_a_cut_one_is_refused(tmp_path):
    raw = xspace()
    path = tmp_path / "worker0.xplane.pb.gz"
    path.write_bytes(gzip.compress(raw))
    plain = tmp_path / "worker0.xplane.pb"
    plain.write_bytes(raw)
    sizes = {"CollectiveReduceV2": SIZE}
    a, b = (import_trace("tensorflow", [p], 1, sizes) for p in (path, plain))
    assert [op.name for op in a.classes[0].ops] == [op.name for op in b.classes[0].ops]
    path.write_bytes(gzip.compress(raw)[:-40])
    with pytest.raises(ConfigError, match="worker0.xplane.pb.gz"):
        import_trace("tensorflow", [path], 1, sizes)
