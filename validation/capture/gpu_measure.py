"""Measuring helpers of gpu_capture.py: results file, log, CUDA-event timing, profiling."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import time
import traceback

import torch

OUT = os.environ.get("OUT") or "out/gpu_capture"
T0 = time.time()
RESULTS: dict = {"meta": {}, "cases": [], "errors": []}
LOG = None


def log(msg: str) -> None:
    line = f"[{time.time() - T0:7.1f}s] {msg}"
    print(line, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


def save() -> None:
    with open(os.path.join(OUT, "gpu_measurements.json"), "w") as f:
        json.dump(RESULTS, f, indent=1, sort_keys=True)



# --------------------------------------------------------------------------- timing
def timed(step, warmup: int, iters: int, dev: str) -> list[float]:
    """Seconds per step, back to back, timed with CUDA events (wall clock on CPU)."""
    for _ in range(warmup):
        step()
    if dev == "cpu":
        out = []
        for _ in range(iters):
            t = time.perf_counter()
            step()
            out.append(time.perf_counter() - t)
        return out
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ev[0].record()
    for i in range(iters):
        step()
        ev[i + 1].record()
    torch.cuda.synchronize()
    return [ev[i].elapsed_time(ev[i + 1]) / 1e3 for i in range(iters)]


def profile(step, name: str, dev: str, keep: bool = True) -> dict:
    """One profiled step -> gzipped Chrome trace in OUT (deleted unless ``keep``: at most 8
    files come back from the device); per-kernel totals by class."""
    from torch.profiler import ProfilerActivity, profile as prof
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    step()
    if dev == "cuda":
        torch.cuda.synchronize()
    with prof(activities=acts, record_shapes=True) as p:
        step()
        if dev == "cuda":
            torch.cuda.synchronize()
    raw = os.path.join(OUT, f"{name}_trace.json")
    p.export_chrome_trace(raw)
    with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb", compresslevel=6) as g:
        shutil.copyfileobj(f, g)
    os.remove(raw)
    out = kernel_classes(raw + ".gz")
    if not keep:
        os.remove(raw + ".gz")
    return out


KERNEL_CLASSES = (("conv", ("conv", "dgrad", "wgrad", "fprop", "implicit_gemm", "xmma_fprop",
                            "cudnn", "winograd", "fft")),
                  ("gemm", ("gemm", "cutlass", "sm90_xmma", "ampere_", "cublas", "nvjet")),
                  ("attention", ("flash", "fmha", "attention", "efficient_attention")),
                  ("nccl", ("nccl",)))


def kernel_classes(trace_gz: str) -> dict:
    """GPU kernel time by class from a Chrome trace (seconds), plus the busy span: a quick
    on-device summary by kernel name, kept for cases whose trace does not come back. The
    validation (simulator/validation/gpu/validate.py) classes kernels by their launching operator
    from the traces instead; cuDNN convolutions run as GEMM kernels, so names mislead."""
    with gzip.open(trace_gz, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    kern = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    out = {k: 0.0 for k, _ in KERNEL_CLASSES}
    out["other"] = 0.0
    top: dict[str, float] = {}
    for e in kern:
        nm, dur = e.get("name", ""), float(e.get("dur", 0)) / 1e6
        low = nm.lower()
        cls = next((k for k, keys in KERNEL_CLASSES if any(s in low for s in keys)), "other")
        out[cls] += dur
        top[nm[:120]] = top.get(nm[:120], 0.0) + dur
    if kern:
        start = min(float(e["ts"]) for e in kern)
        end = max(float(e["ts"]) + float(e.get("dur", 0)) for e in kern)
        out["kernel_span_s"] = (end - start) / 1e6
    out["kernels"] = len(kern)
    out["top_kernels_s"] = dict(sorted(top.items(), key=lambda kv: -kv[1])[:25])
    return out


def record(case: dict) -> None:
    t = case.get("step_s")
    if t:
        s = sorted(t)
        case["median_step_s"] = s[len(s) // 2]
        case["mean_step_s"] = sum(s) / len(s)
    RESULTS["cases"].append(case)
    save()
    log(f"{case['case']}: median {case.get('median_step_s', float('nan')):.5f} s")


def guarded(fn, *a, **k):
    try:
        fn(*a, **k)
    except Exception as exc:  # noqa: BLE001 - a failed case must not cost the others
        RESULTS["errors"].append({"where": fn.__name__, "args": repr(a)[:200],
                                  "error": repr(exc)[:500],
                                  "traceback": traceback.format_exc()[-2000:]})
        save()
        log(f"FAILED {fn.__name__}{a}: {exc!r}")
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def set_tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
