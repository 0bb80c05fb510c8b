"""A simulated step as PyTorch profiler (Kineto) traces, one JSON file per rank, that
HolisticTraceAnalysis (HTA) and Perfetto open like a real profile.

The shape is what Kineto writes and HTA reads (hta/common/trace_file.py, trace_parser.py):
a header with ``schemaVersion``, ``deviceProperties`` and ``distributedInfo`` (``rank``,
``world_size``, ``backend``) before ``traceEvents``; complete events (``ph: X``, times in
microseconds) of category ``kernel`` or ``gpu_memcpy`` on the GPU (``pid`` the device,
``tid`` and ``args.stream`` the CUDA stream, ``args.device``, ``args.correlation``), each
launched by a ``cuda_runtime`` call (``cudaLaunchKernel``, ``cudaMemcpyAsync``) on the host
thread with the same correlation, at the moment the op was ready; host work (``delay``
ops: a CPU optimizer step, a recorded host gap) as ``cpu_op``; the step as the
``user_annotation`` ``ProfilerStep#1``. HTA tells kernels apart by name: communication
kernels start ``ncclDevKernel_`` (its ``^nccl.*Kernel``; the rest of the name as NCCL
spells its kernels, :func:`kernel_name`), copies ``Memcpy``. The simulator's ops carry no
per-collective dtype: a reduction names the step's compute dtype (a DDP all-reduce of fp32
gradients under bf16 autocast still reads ``_bf16``).

Ranks of one rank class run identical timelines: up to ``expand_up_to`` ranks each gets its
file; past that, one file per rank class (its first rank), as ``timeline.json`` groups them.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..engine.records import COMM_KINDS, OpRecord, Timeline
from ..outpaths import atomic_write_text, real_folder

HOST_PID_BASE = 100_000        # host process ids, apart from the GPU device ids
HOST_TID = 1
FIRST_STREAM = 7               # CUDA's first user stream number in real traces
GPU_CATS = {"compute": "kernel", "memcpy": "gpu_memcpy", "collective": "kernel",
            "send": "kernel", "recv": "kernel"}
LAUNCH = {"kernel": "cudaLaunchKernel", "gpu_memcpy": "cudaMemcpyAsync"}


def _us(t_s: float) -> float:
    """Seconds to Kineto's microseconds, kept to the nanosecond as Kineto writes them."""
    return round(t_s * 1e6, 3)


# NCCL's kernel names (src/device/generate.py, NCCL 2.19+): ncclDevKernel_<Func> then, for
# the reducing functions, _<RedOp>_<type>, then _<ALGO>_<PROTO>; all-to-all and send/recv
# run NCCL's one SendRecv kernel
NCCL_FUNC = {"all_reduce": "AllReduce", "all_gather": "AllGather",
             "reduce_scatter": "ReduceScatter", "broadcast": "Broadcast", "reduce": "Reduce",
             "all_to_all": "SendRecv", "send_recv": "SendRecv"}
NCCL_REDUCING = ("AllReduce", "ReduceScatter", "Reduce")
NCCL_TYPE = {"bf16": "bf16", "fp16": "f16", "fp32": "f32", "tf32": "f32"}


def nccl_dtype(precision: str) -> str:
    """NCCL's spelling of the type a step of ``precision`` reduces in: its compute dtype
    (an FP8 step's gradients are bf16, :func:`simulator.precision.compute_precision`)."""
    from ..precision import compute_precision
    return NCCL_TYPE.get(compute_precision(precision), "bf16")


def kernel_name(r: OpRecord, dtype: str = "bf16") -> str:
    """The GPU event's name, from the record alone: NCCL's kernel spelling for
    communication (``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``, ``ncclDevKernel_AllGather_
    RING_LL128``, ``ncclDevKernel_SendRecv``; ``dtype`` the NCCL type of a reduction),
    ``Memcpy`` for copies, the op's own name for compute."""
    if r.kind in COMM_KINDS:
        func = NCCL_FUNC.get(r.collective, "SendRecv")      # send / recv: no collective
        if func == "SendRecv":
            return "ncclDevKernel_SendRecv"
        parts = [func, *(("Sum", dtype) if func in NCCL_REDUCING else ()),
                 *(x.upper() for x in (r.algorithm, r.protocol) if x)]
        return "ncclDevKernel_" + "_".join(parts)
    if r.kind == "memcpy":
        return f"Memcpy {r.name}"
    return r.name


def rank_trace(tl: Timeline, cls: str, rank: int, world_size: int, device: int,
               gpu: str, step: int = 1, dtype: str = "bf16") -> dict:
    """One rank's Kineto trace: the records of its rank class ``cls`` on GPU ``device``
    (``dtype``: the NCCL type its reductions name, :func:`kernel_name`)."""
    host_pid = HOST_PID_BASE + rank
    streams: dict[str, int] = {}
    events: list[dict] = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": host_pid,
         "tid": HOST_TID, "ts": 0.0, "dur": _us(tl.iteration_time_s), "args": {}}]
    correlation = 0
    for r in tl.records:
        if r.cls != cls:
            continue
        cat = GPU_CATS.get(r.kind)
        ts, dur = _us(r.start_s), _us(r.end_s - r.start_s)
        if cat is None:         # host work keeps no GPU busy
            events.append({"ph": "X", "cat": "cpu_op", "name": r.name, "pid": host_pid,
                           "tid": HOST_TID, "ts": ts, "dur": dur, "args": {}})
            continue
        correlation += 1
        stream = streams.setdefault(r.stream, FIRST_STREAM + len(streams))
        args = {"device": device, "stream": stream, "correlation": correlation,
                "layer": r.layer, "phase": r.phase}
        if r.kind in COMM_KINDS:
            args.update({"In msg size (bytes)": r.size_bytes, "communicator": r.comm})
        launch = _us(min(r.ready_s, r.start_s))
        events.append({"ph": "X", "cat": "cuda_runtime", "name": LAUNCH[cat],
                       "pid": host_pid, "tid": HOST_TID, "ts": launch, "dur": 0.0,
                       "args": {"correlation": correlation, "device": device}})
        events.append({"ph": "X", "cat": cat, "name": kernel_name(r, dtype), "pid": device,
                       "tid": stream, "ts": ts, "dur": dur, "args": args})
    meta = [{"ph": "M", "name": "process_name", "pid": host_pid, "tid": 0,
             "args": {"name": f"rank {rank} host"}},
            {"ph": "M", "name": "process_name", "pid": device, "tid": 0,
             "args": {"name": f"GPU {device} (rank {rank}, {cls})"}}]
    meta += [{"ph": "M", "name": "thread_name", "pid": device, "tid": tid,
              "args": {"name": f"stream {tid} {name}"}} for name, tid in streams.items()]
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": device, "name": gpu}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size},
            "traceName": f"clustersim rank {rank}",
            "displayTimeUnit": "ms",
            "traceEvents": meta + events}


def write_kineto(folder: Path, tl: Timeline, class_ranks: dict[str, tuple[int, ...]],
                 gpu: str, gpus_per_node: int = 8, expand_up_to: int = 64,
                 precision: str = "bf16") -> list[Path]:
    """Write ``folder/rank-<r>.pt.trace.json`` per rank (or per rank class past
    ``expand_up_to`` ranks, see the module docstring); return the paths. ``folder`` is
    clustersim's own: a symbolic link there is replaced by a real folder, and the rank
    files of an earlier run that this one does not write are removed. ``precision``:
    the step's training precision, whose dtype the reductions' kernel names carry."""
    folder = real_folder(folder)        # a link there is replaced, never written through
    world = sum(len(r) for r in class_ranks.values())
    classes = sorted({r.cls for r in tl.records})
    written = []
    for cls in classes:
        ranks = class_ranks.get(cls, ())
        for rank in (ranks if world <= expand_up_to else ranks[:1]):
            path = folder / f"rank-{rank}.pt.trace.json"
            trace = rank_trace(tl, cls, rank, world, rank % max(gpus_per_node, 1), gpu,
                               dtype=nccl_dtype(precision))
            atomic_write_text(path, json.dumps(trace))
            written.append(path)
    for stale in set(folder.glob("rank-*.pt.trace.json")) - set(written):
        stale.unlink()                  # an earlier run's ranks: HTA would read them too
    return written
