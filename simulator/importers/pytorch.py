"""PyTorch profiler (Kineto) traces -> one rank's chosen iteration (:class:`RankTrace`).

* Iteration: ``ProfilerStep#N`` (by default a steady-state one: see :func:`default_step`);
  without step annotations, the whole trace.
* GPU work: kernels, copies and sets launched (``cuda_runtime`` launch call, joined by
  ``correlation`` or the ``ac2g`` flow) inside the iteration, on their CUDA streams.
* Collectives: NCCL kernels (sizes and process group from the kernel's arguments or the
  enclosing ``record_param_comms``); gloo ops (``gloo:all_reduce``... on gloo's worker
  threads, sizes from ``Input Dims``), run on lanes shared round-robin like gloo's threads.
* Dependencies: launch order; ``cudaStreamWaitEvent`` (the kernel launched next on that
  thread waited for the last op launched on another stream before the wait, if that op had
  ended when the kernel started); host synchronisations (``cudaStreamSynchronize``...,
  blocking ``cudaMemcpy``); the host waiting for a gloo collective (:mod:`.host`).
* Layers and phases: ``user_annotation`` spans (``## forward ##``, ``FSDP::...``,
  ``DistributedDataParallel.forward``, ``Optimizer.step#...``) and ``nn.Module:`` events.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from ..errors import ConfigError
from . import comms, host
from .ir import Block, CommOp, DeviceOp, RankTrace, Span
from .kineto import (STEP, KinetoProfile, default_pg, group_ranks, pg_ranks,
                     stream_names)

US = 1e-6
TOL_US = 1.0
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
              "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol",
              "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize")
NOT_LABELS = ("record_param_comms",)


def default_step(steps: list[int]) -> int:
    """Steady state: leave out the first step (warm-up) and, of three or more, the last
    (cut by the profiler stopping); of the rest, the one of median number."""
    inner = steps[1:-1] if len(steps) >= 3 else steps[1:] if len(steps) == 2 else steps
    return inner[(len(inner) - 1) // 2]


def window_of(p: KinetoProfile, step: int | None) -> tuple[float, float, str]:
    """(start, end, label) of ProfilerStep#``step``, or of the whole trace without steps.

    :raises ConfigError: if ``step`` is not in the file.
    """
    steps = p.steps
    if step is not None and step not in steps:
        have = ", ".join(map(str, steps)) or "none"
        raise ConfigError(f"no ProfilerStep#{step} in this trace (steps: {have})",
                          source=p.source, field="--step")
    if step is not None:
        e = steps[step]
        return e.ts, e.end, e.name
    events = [*p.host, *p.gpu]
    return min(e.ts for e in events), max(e.end for e in events), "whole trace"


class _Extract:
    def __init__(self, p: KinetoProfile, step: int | None, sizes: dict[str, int]):
        self.p, self.sizes = p, sizes
        self.a, self.b, self.label = window_of(p, step)
        gloo_threads = {e.tid for e in p.host if e.name.startswith("gloo:")}
        self.host_threads = {e.tid for e in p.host if e.cat != "cuda_runtime"
                             and e.cat != "cuda_driver"} - gloo_threads
        self.calls = {e.args.get("correlation"): e for e in p.host
                      if e.cat in ("cuda_runtime", "cuda_driver")}
        self.keys: dict[int, object] = {}
        self.rpc = sorted((e.ts, e.end, e.args) for e in p.host
                          if e.name == "record_param_comms")
        self.stream_names = stream_names(p)

    def key(self, obj) -> int:
        self.keys[len(self.keys)] = obj
        return len(self.keys) - 1

    def launch(self, g) -> tuple[object, float]:
        call = self.calls.get(g.corr)
        if call is not None:
            return call.tid, call.ts
        tid, ts = self.p.flows.get(g.corr, (None, g.ts))
        return tid, ts

    def rank_trace(self) -> RankTrace:
        a, b = self.a * US, self.b * US
        threads = defaultdict(list)
        for e in self.p.host:
            if e.tid in self.host_threads and e.end > self.a and e.ts < self.b:
                threads[e.tid].append((e.ts * US, e.end * US))
        idle = host.gaps(host.busy_intervals(threads, a, b), a, b)
        dev, coll = self.gpu()
        coll += self.gloo(idle)
        blocks = self.syncs(dev + coll) + host.collective_waits(idle, coll)
        info = self.p.distributed
        meta = {"recorded_step_s": b - a, "gpu": self.p.gpu_name,
                "backend": info.get("backend"), "steps": list(self.p.steps)}
        return RankTrace(self.p.source, _int(info.get("rank")), _int(info.get("world_size")),
                         (a, b), self.label, self.annotations(), dev, coll, blocks,
                         "delay" if self.p.gpu else "compute", meta, pg_ranks(info))

    def annotations(self) -> list[Span]:
        out = []
        for e in self.p.host:
            if (e.cat in ("user_annotation", "python_function") and e.tid in self.host_threads
                    and e.end > self.a and e.ts < self.b and not STEP.match(e.name)
                    and not e.name.startswith(("gloo:", "nccl:"))):
                out.append(Span(e.name, max(e.ts, self.a) * US, min(e.end, self.b) * US))
        return out

    def gloo(self, idle) -> list[CommOp]:
        """Host-run collectives (gloo), on lanes shared round-robin like its threads."""
        out, count, last = [], defaultdict(int), {}
        pg, ranks = default_pg(self.p.distributed)
        group = len(ranks) if ranks else _int(self.p.distributed.get("world_size")) or 1
        for e in sorted(self.p.host, key=lambda e: e.ts):
            name = comms.collective_name(e.name) if e.name.startswith("gloo:") else None
            if name is None or not self.a <= e.ts < self.b:
                continue
            size = comms.size_from_dims(name, e.args.get("Input Dims"),
                                        e.args.get("Input type"), group)
            k = count[pg]
            count[pg] += 1
            issue = host.issue_time(e.ts * US, idle)
            op = CommOp(-1, name, self._size(size, e.name, name, e.ts), pg, ranks,
                        host.lane("gloo", pg, k), e.name, e.ts * US, e.end * US, issue)
            host.after_worker(op, last.get(e.tid))
            last[e.tid] = op
            op.key = self.key(op)
            out.append(op)
        return out

    def syncs(self, ops: list) -> list[Block]:
        """The host blocked in a synchronising CUDA call waited for the last op launched
        before it on each stream that had finished when the call returned."""
        by_stream = defaultdict(list)
        for op in ops:
            if isinstance(op, DeviceOp) or op.on_device:
                by_stream[op.stream if isinstance(op, DeviceOp) else op.lane].append(op)
        for v in by_stream.values():
            v.sort(key=lambda o: (o.launch_ts if isinstance(o, DeviceOp) else o.issue_ts))
        launches = {s: [o.launch_ts if isinstance(o, DeviceOp) else o.issue_ts for o in v]
                    for s, v in by_stream.items()}
        blocks = []
        for e in self.p.host:
            if e.name not in SYNC_CALLS or not self.a <= e.ts < self.b:
                continue
            s, t = e.ts * US, e.end * US
            awaited = []
            for stream, v in by_stream.items():
                j = bisect.bisect_right(launches[stream], s + 1e-9) - 1
                if j >= 0 and v[j].end <= t + TOL_US * US:
                    awaited.append(v[j].key)
            if awaited:
                blocks.append(Block(s, t, awaited))
        return blocks

    # ------------------------------------------------------------------- GPU side
    def gpu(self) -> tuple[list[DeviceOp], list[CommOp]]:
        dev, coll = [], []
        self.by_stream: dict[str, list] = defaultdict(list)     # all, for the wait rule
        self.launched: dict[object, list] = defaultdict(list)   # tid -> [(ts, op)]
        for g in sorted(self.p.gpu, key=lambda g: g.ts):
            tid, lts = self.launch(g)
            inside = self.a <= lts < self.b
            name, hints = comms.nccl_kernel(g.name) if "nccl" in g.name.lower() else (None, {})
            if name is not None and inside:
                op = self._nccl(g, name, hints, lts)
                coll.append(op)
            else:
                op = DeviceOp(-1, self.stream_names[g.stream], g.name, g.ts * US, g.end * US,
                              lts * US, g.cat.replace("gpu_", ""))
                if inside:
                    op.key = self.key(op)
                    dev.append(op)
            self.by_stream[g.stream].append((lts, op))
            self.launched[tid].append((lts, op))
        self._stream_waits()
        return dev, coll

    def _nccl(self, g, name, hints, lts) -> CommOp:
        args = {**self._record_param_comms(lts), **g.args}
        size = comms.size_from_nelems(name, args.get("In msg nelems"),
                                      args.get("Out msg nelems"), args.get("dtype"))
        op = CommOp(-1, name, self._size(size, g.name, name, g.ts),
                    str(args.get("Process Group Name", "0")), group_ranks(args),
                    self.stream_names[g.stream], g.name[:80], g.ts * US, g.end * US, lts * US,
                    {**hints, "dtype": args.get("dtype")}, on_device=True)
        op.key = self.key(op)
        return op

    def _record_param_comms(self, t: float) -> dict:
        """Arguments of the record_param_comms event around host time ``t``."""
        i = bisect.bisect_right(self.rpc, (t, float("inf"))) - 1
        if i >= 0 and self.rpc[i][1] + TOL_US >= t:
            return self.rpc[i][2]
        return {}

    def _size(self, size, event_name, collective, ts) -> int:
        for k in (event_name, collective):
            if k in self.sizes:
                return self.sizes[k]
        if size is None:
            raise ConfigError(
                f"{event_name} at {(ts - self.a) / 1e3:.3f} ms into {self.label} has no "
                f"recorded size (profile with record_shapes=True, or give "
                f"--collective-bytes {collective}=SIZE)", source=self.p.source)
        return size

    def _stream_waits(self) -> None:
        waits = defaultdict(list)
        for e in self.p.host:
            if e.name == "cudaStreamWaitEvent":
                waits[e.tid].append(e.ts)
        for v in self.by_stream.values():
            v.sort(key=lambda x: x[0])
        starts = {s: [t for t, _ in v] for s, v in self.by_stream.items()}
        for tid, items in self.launched.items():
            items.sort(key=lambda x: x[0])
            ws = sorted(waits.get(tid, ()))
            prev = -float("inf")
            for lts, op in items:
                i = bisect.bisect_left(ws, lts) - 1
                if op.key >= 0 and i >= 0 and ws[i] > prev:
                    op.waits_on = self._waited(op, ws[i], starts)
                prev = lts

    def _waited(self, op, wait_ts: float, starts) -> list[int]:
        out = []
        stream = op.stream if isinstance(op, DeviceOp) else op.lane
        for s, ts in starts.items():
            j = bisect.bisect_left(ts, wait_ts) - 1
            if j < 0:
                continue
            src = self.by_stream[s][j][1]
            src_stream = src.stream if isinstance(src, DeviceOp) else src.lane
            if src_stream != stream and src.key >= 0 and src.end <= op.ts + TOL_US * US:
                out.append(src.key)
        return out


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def choose_step(profiles: list[KinetoProfile], step: int | None) -> int | None:
    """``step``, or the default steady-state step of the first file (the same number is
    used on every rank); None when the traces have no ProfilerStep annotations."""
    if step is not None:
        return step
    steps = list(profiles[0].steps)
    return default_step(steps) if steps else None


def rank_trace(profile: KinetoProfile, step: int | None,
               sizes: dict[str, int] | None = None) -> RankTrace:
    """One rank's iteration ``step`` (see :func:`choose_step`).

    :raises ConfigError: naming the file, for a missing step or a collective without size.
    """
    return _Extract(profile, step, sizes or {}).rank_trace()
