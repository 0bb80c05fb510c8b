"""Tiny hand-written profiler traces for the importer tests (times in microseconds)."""

from __future__ import annotations

import gzip
import json

PID = 100
MAIN, AUTOGRAD, GLOO_A, GLOO_B = 1, 2, 3, 4


def X(name, cat, ts, dur, tid=MAIN, pid=PID, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def kernel(name, ts, dur, corr, stream=7, cat="kernel", **args):
    return X(name, cat, ts, dur, tid=stream, pid=0, stream=stream, correlation=corr, device=0,
             **args)


def launch(ts, corr, tid=MAIN, name="cudaLaunchKernel", dur=5):
    return X(name, "cuda_runtime", ts, dur, tid=tid, correlation=corr)


def document(events, rank=0, world=2, backend="nccl", gpu=True):
    doc = {"schemaVersion": 1,
           "distributedInfo": {"backend": backend, "rank": rank, "world_size": world,
                               "pg_count": 1,
                               "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                              "ranks": list(range(world))}]},
           "traceEvents": events}
    if gpu:
        doc["deviceProperties"] = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}]
    return doc


NCCL_ARGS = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000,
             "dtype": "Float", "Group size": 2, "Process Group Name": "0",
             "Process Group Ranks": "[0, 1]"}


def gpu_step() -> dict:
    """One DDP-like step on a GPU (0..1000 us): forward launches two kernels, backward a
    kernel and an NCCL all-reduce of 1000 floats (stream 40, after a cudaStreamWaitEvent),
    then a kernel that overlaps the all-reduce; the optimizer's kernel waits for the
    all-reduce (cudaStreamWaitEvent) and the host synchronises on it."""
    ev = [
        X("ProfilerStep#1", "user_annotation", 0, 1000),
        X("## forward ##", "user_annotation", 0, 400),
        X("## backward ##", "user_annotation", 400, 500),
        X("## optimizer ##", "user_annotation", 900, 100),
        X("aten::mm", "cpu_op", 10, 60),
        launch(20, 1), kernel("sgemm_128x64", 30, 100, 1),
        launch(60, 2), kernel("vectorized_elementwise_kernel", 130, 20, 2),
        launch(410, 3), kernel("sgemm_backward", 420, 200, 3),
        X("record_param_comms", "cpu_op", 630, 30, **NCCL_ARGS),
        X("cudaEventRecord", "cuda_runtime", 632, 1, correlation=90),
        X("cudaStreamWaitEvent", "cuda_runtime", 635, 1, correlation=91),
        launch(640, 4, name="cudaLaunchKernelExC"),
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", 650, 200, 4, stream=40,
               **NCCL_ARGS),
        launch(700, 5), kernel("vectorized_elementwise_kernel", 710, 50, 5),
        X("cudaStreamWaitEvent", "cuda_runtime", 905, 1, correlation=92),
        launch(910, 6), kernel("multi_tensor_apply_kernel", 920, 30, 6),
        X("cudaStreamSynchronize", "cuda_runtime", 960, 30, correlation=93),
        {"ph": "s", "id": 1, "pid": PID, "tid": MAIN, "ts": 20, "cat": "ac2g", "name": "ac2g"},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": MAIN, "args": {"name": "main"}},
    ]
    return document(ev)


def gloo_step(rank: int, collectives: int = 1, dims=((256,),)) -> dict:
    """A CPU (gloo) step of 0..1000 us: forward; backward issues ``collectives``
    all-reduces of ``dims`` floats that gloo's two worker threads run; the host waits for
    the first (idle from 500 until 5 us after it ends at 600); optimizer."""
    ev = [
        X("ProfilerStep#2", "user_annotation", 0, 1000),
        X("## forward ##", "user_annotation", 0, 300),
        X("FSDP::pre_forward (0)", "user_annotation", 5, 100),
        X("aten::linear", "cpu_op", 10, 280),
        X("## backward ##", "user_annotation", 300, 500),
        X("c10d::allreduce_", "cpu_op", 310, 20),
        X("gloo:all_reduce", "user_annotation", 335, 265, tid=GLOO_A,
          **{"Input Dims": [list(dims[0])], "Input type": ["float"]}),
        X("aten::mm", "cpu_op", 340, 160),
        X("aten::copy_", "cpu_op", 605, 95),
        X("## optimizer ##", "user_annotation", 800, 200),
        X("aten::add_", "cpu_op", 810, 180),
    ]
    for k in range(1, collectives):
        ev.append(X("gloo:all_reduce", "user_annotation", 705 + 20 * k, 10, tid=GLOO_B,
                    **{"Input Dims": [[64]], "Input type": ["float"]}))
    return document(ev, rank=rank, backend="gloo", gpu=False)


def write(path, doc, gz=None) -> str:
    text = json.dumps(doc)
    if gz if gz is not None else str(path).endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return str(path)
