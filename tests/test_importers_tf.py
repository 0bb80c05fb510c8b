"""TensorFlow importer: *.xplane.pb (encoded here by hand, field numbers from xplane.proto)
and TensorBoard trace JSON of a MultiWorkerMirroredStrategy step."""

from __future__ import annotations

import gzip
import json
import struct

import pytest

from simulator.errors import ConfigError
from simulator.importers import import_trace
from simulator.trace_replay import replay_trace, with_recorded_collectives

US = 1e-6
SIZE = 4096 * 4            # the bytes we say the packed gradients have


# ---------------------------------------------------------- protobuf wire encoding
def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, value) -> bytes:
    if isinstance(value, bytes):                       # length-delimited (wire type 2)
        return varint(number << 3 | 2) + varint(len(value)) + value
    if isinstance(value, float):                       # 64-bit (wire type 1)
        return varint(number << 3 | 1) + struct.pack("<d", value)
    return varint(number << 3) + varint(value)         # varint (wire type 0)


def xstat(meta_id: int, value) -> bytes:
    kind = 5 if isinstance(value, str) else 4          # str_value = 5, int64_value = 4
    return field(1, meta_id) + field(kind, value.encode() if kind == 5 else value)


# (line, name, display, start us, duration us, {stat: value}); step 1 of a worker
EVENTS = [
    ("python", "train", "", 0, 1000, {"step_num": 1}),
    ("tf_Compute/1", "dense/MatMul:MatMul", "MatMul", 10, 190, {}),
    ("tf_Compute/1", "gradient_tape/dense/MatMul:MatMul", "MatMul", 200, 200, {}),
    ("tf_Compute/1", "ExecutorState::ProcessAsync::Start", "", 400, 10,
     {"name": "CollectiveReduceV2"}),
    ("collective_ops/1", "CollectiveExecutor::CompleteParams", "", 405, 5,
     {"group_key": 1, "group_size": 2}),
    ("collective_ops/1", "CollectiveReduceV2:CollectiveReduceV2", "CollectiveReduceV2", 420,
     280, {"group_key": 1, "instance_key": 7}),
    ("tf_Compute/1", "sgd/update/Mul:Mul", "Mul", 710, 190, {}),
]
STATS = ["step_num", "name", "group_key", "group_size", "instance_key"]


def xspace(events=EVENTS) -> bytes:
    names = sorted({e[1] for e in events})
    md = {n: i + 1 for i, n in enumerate(names)}
    displays = {e[1]: e[2] for e in events}
    stat_id = {s: i + 1 for i, s in enumerate(STATS)}
    lines = {}
    for line, name, _, ts, dur, stats in events:
        ev = field(1, md[name]) + field(2, ts * 1_000_000) + field(3, dur * 1_000_000)
        ev += b"".join(field(4, xstat(stat_id[k], v)) for k, v in stats.items())
        lines.setdefault(line, []).append(ev)
    plane = field(1, 0) + field(2, b"/host:CPU")
    for i, (line, evs) in enumerate(lines.items()):
        plane += field(3, field(1, i + 1) + field(2, line.encode()) + field(3, 1000)
                       + b"".join(field(4, e) for e in evs))
    for name, i in md.items():                         # map<int64, XEventMetadata> = 4
        meta = field(1, i) + field(2, name.encode()) + field(4, displays[name].encode())
        plane += field(4, field(1, i) + field(2, meta))
    for name, i in stat_id.items():                    # map<int64, XStatMetadata> = 5
        plane += field(5, field(1, i) + field(2, field(1, i) + field(2, name.encode())))
    return field(1, plane) + field(4, b"worker")


def trace_json(events=EVENTS) -> dict:
    """The TensorBoard profile plugin's trace: display name as name, long_name in args."""
    tids = {line: i + 1 for i, line in enumerate(dict.fromkeys(e[0] for e in events))}
    out = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}}]
    out += [{"ph": "M", "pid": 1, "tid": t, "name": "thread_name", "args": {"name": line}}
            for line, t in tids.items()]
    for line, name, display, ts, dur, stats in events:
        args = {k: str(v) for k, v in stats.items()}
        if display:
            args["long_name"] = name
        out.append({"ph": "X", "pid": 1, "tid": tids[line], "name": display or name,
                    "ts": ts, "dur": dur, "args": args})
    return {"displayTimeUnit": "ns", "metadata": {"highres-ticks": True}, "traceEvents": out}


@pytest.fixture
def pb(tmp_path):
    path = tmp_path / "worker0.xplane.pb"
    path.write_bytes(xspace())
    return path


def test_xplane_without_sizes_asks_for_them(pb):
    with pytest.raises(ConfigError, match="--collective-bytes CollectiveReduceV2=SIZE") as e:
        import_trace("tensorflow", [pb])
    assert str(pb) in str(e.value)


def test_xplane_step_becomes_a_trace(pb):
    t = import_trace("tensorflow", [pb], collective_bytes={"CollectiveReduceV2": SIZE})
    assert t.world_size == 2 and [c.ranks for c in t.classes] == [(0, 1)]   # group_size 2
    assert t.communicators["pg:group1"].groups == ((0, 1),)
    ops = t.classes[0].ops
    (coll,) = [op for op in ops if op.kind == "collective"]
    assert (coll.collective, coll.size_bytes, coll.stream) == ("all_reduce", SIZE,
                                                               "tf:group1#0")
    phases = {op.layer: op.phase for op in ops if op.stream == "host" and op.layer}
    assert phases["dense"] == "forward" and phases["gradient_tape/dense"] == "backward"
    assert phases["sgd/update"] == "optimizer"
    assert t.meta["recorded_step_s"] == pytest.approx(1000 * US)
    # issued by the executor at 400 us, started by the collective thread at 420 us
    (dispatch,) = [op for op in ops if op.name.startswith("dispatch:")]
    assert dispatch.duration_s == pytest.approx(20 * US)


def test_tensorboard_json_gives_the_same_trace(tmp_path, pb):
    path = tmp_path / "worker0.trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(trace_json(), fh)
    sizes = {"CollectiveReduceV2": SIZE}
    a = import_trace("tensorflow", [pb], collective_bytes=sizes)
    b = import_trace("tensorflow", [path], collective_bytes=sizes)
    assert [(o.stream, o.kind, o.layer, o.deps) for o in a.classes[0].ops] == \
        [(o.stream, o.kind, o.layer, o.deps) for o in b.classes[0].ops]
    assert [o.duration_s for o in a.classes[0].ops] == \
        pytest.approx([o.duration_s for o in b.classes[0].ops])


def test_two_workers_and_a_replay_that_gives_back_the_step(tmp_path):
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"w{i}.xplane.pb")
        paths[-1].write_bytes(xspace())
    t = import_trace("tensorflow", paths, collective_bytes={"all_reduce": SIZE})
    assert [c.ranks for c in t.classes] == [(0,), (1,)]
    result = replay_trace(with_recorded_collectives(t), "dgx-a100")
    assert result.metrics.iteration_time_s == pytest.approx(1000 * US)


@pytest.mark.parametrize("data, message", [
    (b"", "empty file"),
    (b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "a PNG image"),
    (None, "truncated/corrupt"),
    (field(7, b"nothing here"), "no planes"),
])
def test_bad_xplane_files(tmp_path, data, message):
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(xspace()[:-40] if data is None else data)
    with pytest.raises(ConfigError, match=message) as e:
        import_trace("tensorflow", [path], collective_bytes={"all_reduce": 1})
    assert str(path) in str(e.value)
