"""TensorFlow profiler output -> one worker's chosen iteration (:class:`RankTrace`).

Reads ``*.xplane.pb`` (decoded without TensorFlow, :mod:`.xplane`) or the trace JSON that
TensorBoard's profile plugin writes (``*.trace.json.gz``; streamed). One file per worker,
in worker (task index) order: the files carry no rank.

* Iteration: the events with a ``step_num`` stat (``tf.profiler.experimental.Trace(...,
  step_num=i, _r=1)``), by default a steady-state one; else the whole profile.
* Host: the ``python`` line and the executor's ``tf_Compute`` lines (CPU training: the host
  *is* the compute). TensorFlow ops (``scope/op:Type`` events) label layers and phases:
  ``gradient_tape/...`` is backward, optimizer scopes (``sgd``, ``adam``...) optimizer.
* Collectives (MultiWorkerMirroredStrategy): ``CollectiveReduceV2``, ``CollectiveGatherV2``,
  ``CollectiveBcastSend/Recv``, ``NcclAllReduce``... on the ``collective_ops`` lines; the
  communicator is the ``group_key`` (its size from ``CollectiveExecutor::CompleteParams``);
  the issue time is the executor's ``ExecutorState::ProcessAsync::Start`` of the op.
  TensorFlow records no tensor sizes: give them with ``collective_bytes``.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from pathlib import Path

from ..errors import ConfigError
from . import comms, host
from .ir import CommOp, RankTrace, Span
from .checked import EventFields
from .jsonstream import read_chrome_trace, sniff
from .kineto import DEVICE_CATS, HOST_CATS
from .pytorch import default_step
from .xplane import TfEvent, read_xspace

HOST_LINES = ("python", "tf_Compute", "tf_inter_op", "tf_intra_op", "MainThread")
COLLECTIVE_LINES = ("collective_ops",)
DONE_CALLBACK = "CollectiveExecutor::ExecuteAsync::Done"    # a collective's result is ready
OPTIMIZER_SCOPES = ("sgd", "adam", "rmsprop", "adagrad", "lamb", "momentum", "update_",
                    "optimizer")


PYTORCH_HEADER = ("schemaVersion", "distributedInfo", "deviceProperties")
TO_PYTORCH = "it is a PyTorch profiler (Kineto) trace: import it with 'clustersim import pytorch'"


def read_tf_profile(path: Path) -> tuple[list[TfEvent], dict]:
    """Events of an ``*.xplane.pb`` or TensorBoard trace JSON (plain or gzip).

    :raises ConfigError: naming the file, as the readers do, or for a PyTorch trace."""
    head = sniff(path, str(path)).lstrip()
    if head[:1] in (b"{", b"["):
        return _read_trace_json(path), {}
    return read_xspace(path)


def _read_trace_json(path: Path) -> list[TfEvent]:
    names: dict = {}
    raw: list = []
    source = str(path)
    index = iter(range(1 << 62))

    def keep(e: dict) -> None:
        f = EventFields(e, source, next(index))
        ph, name = f.text("ph"), f.text("name")
        if f.text("cat") in (*HOST_CATS, *DEVICE_CATS):
            raise ConfigError(f"not a TensorFlow trace: {TO_PYTORCH}", source=source,
                              field=f"{f.where}.cat")
        if ph == "M" and name in ("process_name", "thread_name"):
            key = f.ident("pid") if name == "process_name" else (f.ident("pid"), f.ident("tid"))
            names[key] = f.args().text("name")
        elif ph == "X":
            args = {k: _number(v) for k, v in f.args().e.items()}
            long = args.pop("long_name", None)
            name, display = (str(long), name) if long else (name, "")
            ts = f.number("ts") * 1e-6
            raw.append((f.ident("pid"), f.ident("tid"), name, display, ts,
                        ts + f.duration("dur") * 1e-6, args))

    header = read_chrome_trace(path, keep, PYTORCH_HEADER)
    if header:
        raise ConfigError(f"not a TensorFlow trace: {TO_PYTORCH} (its header has "
                          f"{', '.join(header)})", source=source)
    if not raw:
        raise ConfigError("not a TensorFlow trace: no complete (ph X) events",
                          source=source)
    return [TfEvent(f"{names.get(pid, pid)}|{names.get((pid, tid), tid)}", n, d, a, b, s)
            for pid, tid, n, d, a, b, s in raw]


def _number(value):
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return value
    return value


def _kind(line: str) -> str:
    thread = line.split("|", 1)[-1]
    if thread.startswith(HOST_LINES):
        return "host"
    return "collective" if thread.startswith(COLLECTIVE_LINES) else "other"


def _is_op(e: TfEvent) -> bool:
    """A TensorFlow op event, ``scope/name:Type`` (not a ``Class::method`` TraceMe, not
    ``EagerLocalExecute: __inference_...``)."""
    scope, _, optype = e.name.partition(":")
    return bool(optype) and "::" not in e.name and " " not in scope + optype[:1]


def step_marks(events: list[TfEvent]) -> dict[int, TfEvent]:
    """The host event that marks each traced step (``step_num``), by step."""
    out = {}
    for e in events:
        if "step_num" in e.stats and _kind(e.line) == "host":
            step = e.stats["step_num"]
            out.setdefault(int(step) if str(step).lstrip("-").isdigit() else 0, e)
    return dict(sorted(out.items()))


def _label(scope: str) -> Span:
    parts = [p for p in scope.split("/") if p]
    phase = "forward"
    if parts and parts[0] == "gradient_tape":
        phase, parts = "backward", parts[1:]
    while parts and parts[0].startswith("replica_"):
        parts = parts[1:]
    if parts and parts[0].lower().startswith(OPTIMIZER_SCOPES):
        phase = "optimizer"
    layer = "/".join(parts[:min(2, max(1, len(parts) - 1))]) or scope
    return Span(layer if phase != "backward" else f"gradient_tape/{layer}", 0.0, 0.0, phase)


class _Worker:
    def __init__(self, source: str, events: list[TfEvent], step: int | None,
                 sizes: dict[str, int]):
        self.source, self.events, self.sizes = source, events, sizes
        steps = step_marks(events)
        if step is not None and step not in steps:
            raise ConfigError(f"no step {step} in this profile (steps: "
                              f"{', '.join(map(str, steps)) or 'none'})", source=source,
                              field="--step")
        if step is not None:
            self.a, self.b, self.label = steps[step].ts, steps[step].end, f"step {step}"
        else:
            self.a, self.b = min(e.ts for e in events), max(e.end for e in events)
            self.label = "whole profile"
        self.steps = list(steps)
        self.groups = {e.stats.get("group_key"): e.stats.get("group_size") for e in events
                       if "group_size" in e.stats and "group_key" in e.stats}

    def rank_trace(self) -> RankTrace:
        inside = [e for e in self.events if e.end > self.a and e.ts < self.b]
        threads = defaultdict(list)
        for e in inside:
            if _kind(e.line) == "host":
                threads[e.line].append((e.ts, e.end))
        idle = host.gaps(host.busy_intervals(threads, self.a, self.b), self.a, self.b)
        coll = self.collectives(idle)
        labels = []
        for e in sorted(inside, key=lambda e: e.ts):
            if _kind(e.line) == "host" and _is_op(e):
                span = _label(e.name.split(":")[0])
                span.ts, span.end = max(e.ts, self.a), min(e.end, self.b)
                if labels and labels[-1].end < span.ts:    # a layer lasts until the next op
                    labels[-1].end = span.ts
                labels.append(span)
        world = max((int(g) for g in self.groups.values() if g), default=None)
        meta = {"recorded_step_s": self.b - self.a, "steps": self.steps,
                "backend": "tensorflow collective ops"}
        return RankTrace(self.source, None, world, (self.a, self.b), self.label, labels, [],
                         coll, host.collective_waits(idle, coll), "compute", meta)

    def collectives(self, idle) -> list[CommOp]:
        starts, done = defaultdict(list), defaultdict(list)
        for e in self.events:
            if e.name == "ExecutorState::ProcessAsync::Start" and "name" in e.stats:
                starts[str(e.stats["name"])].append(e.ts)
            elif e.name == DONE_CALLBACK:
                done[e.line].append(e.ts)
        for v in (*starts.values(), *done.values()):
            v.sort()
        out, count, last = [], defaultdict(int), {}
        for e in sorted(self.events, key=lambda e: e.ts):
            if _kind(e.line) != "collective" or not _is_op(e) or not self.a <= e.ts < self.b:
                continue
            scope, _, optype = e.name.partition(":")
            name = comms.collective_name(optype)
            if name is None:
                continue
            key = e.stats.get("group_key", 0)
            pg, n = f"group{key}", self.groups.get(key)
            k = count[pg]
            count[pg] += 1
            issued = starts.get(scope, [])
            i = bisect.bisect_right(issued, e.ts) - 1
            issue = issued[i] if i >= 0 and issued[i] >= self.a else host.issue_time(e.ts, idle)
            op = CommOp(-1, name, self._size(scope, optype, name, e.ts), pg,
                        tuple(range(int(n))) if n else None, host.lane("tf", pg, k), scope,
                        e.ts, _completed(e, done[e.line]), issue,
                        {"instance_key": e.stats.get("instance_key")})
            host.after_worker(op, last.get(e.line))
            last[e.line] = op
            op.key = len(out)
            out.append(op)
        return out

    def _size(self, scope: str, optype: str, collective: str, ts: float) -> int:
        for k in (scope, optype, collective):
            if k in self.sizes:
                return self.sizes[k]
        alt = f" (or {scope}=SIZE for this op only)" if scope != optype else ""
        raise ConfigError(f"{scope} ({optype}) at {(ts - self.a) * 1e3:.3f} ms into "
                          f"{self.label}: TensorFlow profiles record no tensor sizes; give "
                          f"--collective-bytes {optype}=SIZE{alt}", source=self.source)


def _completed(e: TfEvent, done: list[float]) -> float:
    """When collective ``e``'s result was ready: the start of its done callback (which
    runs the ops waiting for it, inside the op's event) if recorded, else its end."""
    i = bisect.bisect_left(done, e.ts)
    return done[i] if i < len(done) and done[i] <= e.end else e.end


def import_tensorflow(paths: list[Path], step: int | None,
                      sizes: dict[str, int]) -> list[RankTrace]:
    """One :class:`RankTrace` per worker file (ranks in the order given).

    :raises ConfigError: naming the file: unreadable, no such step, a collective without
        a size.
    """
    profiles = [(str(p), read_tf_profile(p)[0]) for p in paths]
    if step is None:
        steps = list(step_marks(profiles[0][1]))
        step = default_step(steps) if steps else None
    parts = []
    for rank, (source, events) in enumerate(profiles):
        rt = _Worker(source, events, step, sizes).rank_trace()
        rt.rank = rank
        rt.world_size = max(rt.world_size or 0, len(paths))
        parts.append(rt)
    return parts
