"""Read GPU kernels from PyTorch profiler (Kineto) traces and fit the GEMM efficiency curve.

Kineto traces are Chrome-trace JSON (optionally gzipped): ``traceEvents`` holds ``cpu_op``
events (ATen operators, with ``args["Input Dims"]`` when shapes were recorded),
``cuda_runtime`` launch calls and ``kernel`` events, the last two joined by
``args["correlation"]``. Times are microseconds.

``fit_from_traces`` finds each ``aten::mm``/``addmm``/``bmm``/``baddbmm`` with shapes, sums
the kernels it launched (runtime or driver launches on the op's thread inside its time
span: cuBLASLt launches Hopper's nvjet kernels through ``cuLaunchKernelEx``), computes its
FLOPs (2*B*M*N*K) and fits ``time = half_time + flops / (peak * eff_max)`` - the
``eff(flops) = eff_max * flops / (flops + flops_half)`` curve of ``simulator.compute.model``
- to an upper quantile of achieved throughput per half-decade of FLOPs.
Run ``python -m simulator.compute.kernels TRACE...`` to print the fit and a sanity summary.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import sys
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.errors import ConfigError
from simulator.precision import PRECISIONS

_US = 1e-6
_GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
_LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel")
# a GEMM kernel whose name has no math mode (Hopper's nvjet): the operator's input type
_INPUT_PRECISION = {"c10::BFloat16": "bf16", "c10::Half": "fp16"}


def _read_events(path) -> list[dict]:
    """``traceEvents`` of a Kineto trace (gzip or plain JSON); ConfigError naming the file."""
    src = str(path)
    try:
        raw = Path(path).read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError,
            json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read Kineto trace (truncated or corrupt?): "
                          f"{' '.join(str(exc).split())}", source=src) from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ConfigError("not a Kineto trace: no traceEvents list", source=src)
    return [e for e in events if isinstance(e, dict)]


def kernel_category(name: str) -> str:
    """Coarse kind of a GPU kernel from its name: gemm, conv, nccl, norm, reduce, elementwise,
    memcpy, memset or other."""
    n = name.lower()
    if n.startswith("memcpy") or "memcpy" in n[:12]:
        return "memcpy"
    if n.startswith("memset"):
        return "memset"
    if "nccl" in n:
        return "nccl"
    if any(s in n for s in ("fprop", "dgrad", "wgrad", "conv", "fft2d", "scudnn")):
        return "conv"
    if any(s in n for s in ("gemm", "gemv", "splitkreduce", "cutlass")):
        return "gemm"
    if "norm" in n or "moments" in n:
        return "norm"
    if "reduce" in n or "scan" in n:
        return "reduce"
    if "elementwise" in n or "vectorized" in n or "multi_tensor_apply" in n:
        return "elementwise"
    return "other"


def load_kineto_kernels(path) -> pd.DataFrame:
    """One row per GPU activity (kernel, memcpy, memset) of a Kineto trace.

    Columns: ``name``, ``duration_s``, ``category`` (see :func:`kernel_category`),
    ``start_s``, ``stream``, ``correlation``.

    :raises ConfigError: naming the file when it cannot be read or is not a Kineto trace.
    """
    rows = []
    for e in _read_events(path):
        cat = e.get("cat")
        if cat not in ("kernel", "gpu_memcpy", "gpu_memset") or "dur" not in e:
            continue
        args = e.get("args") or {}
        name = str(e.get("name", ""))
        category = {"gpu_memcpy": "memcpy", "gpu_memset": "memset"}.get(cat)
        rows.append((name, float(e["dur"]) * _US, category or kernel_category(name),
                     float(e.get("ts", 0.0)) * _US, args.get("stream", e.get("tid")),
                     args.get("correlation")))
    return pd.DataFrame(rows, columns=["name", "duration_s", "category", "start_s", "stream",
                                       "correlation"])


def gemm_precision(kernel_name: str) -> str | None:
    """Math mode of a cuBLAS/CUTLASS GEMM kernel from its name (None if unknown)."""
    n = kernel_name.lower()
    if "bf16" in n:
        return "bf16"
    if any(s in n for s in ("h1688", "h16816", "f16", "hgemm", "fp16", "884gemm")):
        return "fp16"
    if "s1688" in n or "tf32" in n:
        return "tf32"
    if any(s in n for s in ("sgemm", "gemmk1_kernel<float", "gemv2t_kernel_val<int, int, float",
                            "gemv")):
        return "fp32"
    return None


def _gemm_shape(op: str, dims) -> tuple[int, int, int, int] | None:
    try:
        if op == "aten::mm":
            (m, k), (k2, n) = dims[0], dims[1]
            b = 1
        elif op == "aten::addmm":
            (m, k), (k2, n) = dims[1], dims[2]
            b = 1
        elif op == "aten::bmm":
            (b, m, k), (_, k2, n) = dims[0], dims[1]
        else:
            (b, m, k), (_, k2, n) = dims[1], dims[2]
    except (TypeError, ValueError, IndexError):
        return None
    return (b, m, n, k) if k == k2 else None


def load_kineto_gemms(path) -> pd.DataFrame:
    """GEMM operators with recorded shapes and the GPU time of the kernels they launched.

    Columns: ``op``, ``batch``, ``m``, ``n``, ``k``, ``flops`` (2*B*M*N*K), ``duration_s``
    (sum of its kernels), ``kernel`` (name of its longest kernel), ``precision`` (math mode
    read from that name, None if unknown). Empty when the trace has no ``Input Dims``.
    """
    events = _read_events(path)
    kernels = {e["args"]["correlation"]: e for e in events
               if e.get("cat") == "kernel" and "correlation" in (e.get("args") or {})}
    launches = defaultdict(list)
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and corr in kernels:
            launches[e.get("tid")].append((float(e["ts"]), corr))
    for v in launches.values():
        v.sort()
    rows = []
    for e in events:
        if e.get("cat") != "cpu_op" or e.get("name") not in _GEMM_OPS:
            continue
        shape = _gemm_shape(e["name"], (e.get("args") or {}).get("Input Dims"))
        if shape is None:
            continue
        calls = launches.get(e.get("tid"), [])
        start, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))
        i = bisect.bisect_left(calls, (start, -math.inf))
        ks = []
        while i < len(calls) and calls[i][0] <= end:
            ks.append(kernels[calls[i][1]])
            i += 1
        if not ks:
            continue
        b, m, n, k = shape
        main = max(ks, key=lambda x: x["dur"])["name"]
        types = (e.get("args") or {}).get("Input type") or []
        mat = types[1 if e["name"] in ("aten::addmm", "aten::baddbmm") else 0] if types else ""
        rows.append((e["name"], b, m, n, k, 2.0 * b * m * n * k,
                     sum(float(x["dur"]) for x in ks) * _US, main,
                     gemm_precision(main) or _INPUT_PRECISION.get(mat)))
    return pd.DataFrame(rows, columns=["op", "batch", "m", "n", "k", "flops", "duration_s",
                                       "kernel", "precision"])


@dataclass(frozen=True)
class GemmFit:
    """Fitted curve ``time = half_time_s + flops / (peak * eff_max)`` and its inputs."""

    precision: str
    eff_max: float
    half_time_s: float
    quantile: float
    samples: int
    bins: pd.DataFrame      # flops, throughput (quantile), count per half-decade bin


def fit_from_traces(paths, precision: str = "tf32", peak_flops: float | None = None,
                    quantile: float = 0.9, min_flops: float = 1e7,
                    min_per_bin: int = 3) -> GemmFit:
    """Fit the GEMM efficiency curve of ``precision`` to the GEMMs of Kineto traces ``paths``.

    Per half-decade of FLOPs the GEMM at the ``quantile`` of achieved FLOP/s is kept (0.9:
    what a well-shaped GEMM of that size gets; 0.5: the typical one), then ``half_time`` and
    ``eff_max`` are fitted to those points by least squares on relative time error.
    ``peak_flops`` defaults to the A100 catalog peak of ``precision``.

    :raises ConfigError: when the traces hold too few GEMMs with shapes to fit.
    """
    if peak_flops is None:
        from simulator.hardware import gpu_spec
        peak_flops = gpu_spec("A100-SXM4-40GB").peak_flops[precision]
    frames = [g for g in (load_kineto_gemms(p) for p in paths) if not g.empty]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not df.empty:
        df = df.astype({"flops": float, "duration_s": float})
        df = df[(df.precision == precision) & (df.flops >= min_flops)]
    where = ", ".join(map(str, paths))
    if len(df) < 2 * min_per_bin:
        raise ConfigError(f"only {len(df)} {precision} GEMMs with shapes; cannot fit",
                          source=where)
    df = df.assign(bin=np.round(np.log10(df.flops) * 2), rate=df.flops / df.duration_s)
    picked = []
    for _, group in df.groupby("bin"):
        if len(group) >= min_per_bin:     # the GEMM at the quantile of throughput in the bin
            group = group.sort_values("rate")
            row = group.iloc[int(round(quantile * (len(group) - 1)))]
            picked.append((row.flops, row.rate, len(group)))
    bins = pd.DataFrame(picked, columns=["flops", "throughput", "count"])
    if len(bins) < 2:
        raise ConfigError("GEMMs span fewer than two size bins; cannot fit", source=where)
    t = bins.flops / bins.throughput
    a, b = np.linalg.lstsq(np.c_[1 / t, bins.flops / t], np.ones(len(t)), rcond=None)[0]
    if not b > 0:
        raise ConfigError("fit gave a non-positive slope; traces too noisy", source=where)
    return GemmFit(precision=precision, eff_max=min(1.0, 1.0 / (b * peak_flops)),
                   half_time_s=max(0.0, float(a)), quantile=quantile, samples=len(df),
                   bins=bins)


def trace_summary(path) -> dict:
    """Sanity figures of one trace: kernel count, duration percentiles, CPU launch-call
    duration and the GPU idle gap between back-to-back kernels on a stream (the next one was
    already launched when the previous ended), all in seconds."""
    events = _read_events(path)
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    runtime = {(e.get("args") or {}).get("correlation"): e for e in events
               if e.get("cat") == "cuda_runtime"}
    launch = [float(e["dur"]) * _US for e in runtime.values() if e.get("name") in _LAUNCH_CALLS]
    streams = defaultdict(list)
    for e in kernels:
        streams[(e.get("pid"), e.get("tid"))].append(e)
    gaps = []
    for seq in streams.values():
        seq.sort(key=lambda e: e["ts"])
        for prev, nxt in zip(seq, seq[1:]):
            end = float(prev["ts"]) + float(prev["dur"])
            call = runtime.get((nxt.get("args") or {}).get("correlation"))
            if call is not None and float(call["ts"]) + float(call.get("dur", 0)) < end:
                gaps.append((float(nxt["ts"]) - end) * _US)

    def pct(values):
        return tuple(float(x) for x in np.percentile(values, [10, 50, 90])) if values else None
    return {"kernels": len(kernels), "duration_p10_p50_p90_s": pct([e["dur"] * _US
                                                                  for e in kernels]),
            "launch_call_p10_p50_p90_s": pct(launch), "queued_gap_p10_p50_p90_s": pct(gaps)}


def _main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m simulator.compute.kernels TRACE.json[.gz] ...")
        return 2
    for p in argv:
        s = trace_summary(p)
        fmt = {k: (tuple(round(x * 1e6, 2) for x in v) if isinstance(v, tuple) else v)
               for k, v in s.items()}
        print(f"{p}: {fmt} (times in us)")
    for precision in PRECISIONS:
        for q in (0.9, 0.5):
            try:
                fit = fit_from_traces(argv, precision, quantile=q)
            except ConfigError as exc:
                print(f"{precision} q={q}: {exc.reason}")
                break
            print(f"{precision} q={q}: eff_max={fit.eff_max:.3f} "
                  f"half_time={fit.half_time_s * 1e6:.2f} us from {fit.samples} GEMMs")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
