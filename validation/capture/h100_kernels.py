"""Kernel rates and board power on one Hopper GPU: BF16 against FP8 GEMMs on the linear
layers of the Megatron/NeMo validation rows, flash/cuDNN attention, and nvidia-smi power
while each kind of work runs for a while.

Run on the device machine from the repository root:

    python3 validation/capture/h100_kernels.py            # writes $OUT/h100_kernels.json

What it measures (every time from CUDA events around back-to-back calls after warm-up;
the median of ``REPEATS`` batches of ``BATCH`` calls; random normal data):

* GEMMs: each linear layer of a row's transformer block (QKV, attention projection, FC1,
  FC2) at its tensor-parallel slice, in its three passes (forward ``fprop``: tokens x in ->
  out; ``dgrad``: tokens x out -> in; ``wgrad``: out x tokens -> in), in BF16
  (``torch.matmul``) and FP8 E4M3 with one scale per tensor (``torch._scaled_mm``, cuBLASLt,
  the GEMM Transformer Engine runs for its per-tensor recipes), with fast accumulation
  (TE's forward) and without it (TE's ``use_split_accumulator`` for dgrad and wgrad).
* Attention: ``scaled_dot_product_attention``, causal, BF16, head dim 128, forward and
  forward + backward, with the flash and cuDNN back ends.
* Power: ``nvidia-smi`` sampled every 100 ms while a BF16 GEMM, an FP8 GEMM, attention and a
  device copy each run for a fixed time, and while idle; achieved rates of each phase.

Nothing here is fitted by this script: ``simulator.validation`` reads the file.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

OUT = os.environ.get("OUT") or "out/h100_kernels"
BATCH = 10
REPEATS = 3
DEV = "cuda" if torch.cuda.is_available() else "cpu"
SMALL = DEV == "cpu"           # a dry run on a CPU: tiny shapes, to check the script

# Transformer blocks of the validation rows, at the tensor-parallel slice they ran:
# (name, tp, hidden, qkv_out, fc1_out, fc2_in); fc1_out is doubled for gated MLPs.
BLOCKS = [
    ("llama3-8b", 1, 4096, (32 + 2 * 8) * 128, 2 * 14336, 14336),
    ("gpt3-5b", 1, 4096, 3 * 4096, 16384, 16384),
    ("llama3-70b", 4, 8192, (64 + 2 * 8) * 128 // 4, 2 * 28672 // 4, 28672 // 4),
    ("gpt3-175b", 4, 12288, 3 * 12288 // 4, 49152 // 4, 49152 // 4),
    ("llama3-405b", 8, 16384, (128 + 2 * 8) * 128 // 8, 2 * 53248 // 8, 53248 // 8),
]
TOKENS = (4096, 8192)
ATTN = [(heads, seq) for heads in (8, 16, 32) for seq in (2048, 4096, 8192)]
POWER_PHASE_S = 20.0

RESULTS: dict = {"meta": {}, "gemm": [], "attention": [], "power": {}, "errors": []}
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def save() -> None:
    os.makedirs(OUT, exist_ok=True)
    tmp = os.path.join(OUT, "h100_kernels.json.tmp")
    with open(tmp, "w") as f:
        json.dump(RESULTS, f, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(OUT, "h100_kernels.json"))


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def seconds_per_call(fn) -> list[float]:
    """Seconds per call of ``fn``: one value per batch of BATCH back-to-back calls."""
    for _ in range(3):
        fn()
    sync()
    out = []
    for _ in range(REPEATS):
        if DEV == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(BATCH):
                fn()
            b.record()
            torch.cuda.synchronize()
            out.append(a.elapsed_time(b) / 1e3 / BATCH)
        else:
            t = time.perf_counter()
            for _ in range(BATCH):
                fn()
            out.append((time.perf_counter() - t) / BATCH)
    return out


def fp8_operands(m: int, n: int, k: int):
    """E4M3 A (m x k, row-major) and B (k x n, column-major) with per-tensor scales."""
    a = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(n, k, device=DEV, dtype=torch.bfloat16)
    amax_a, amax_b = a.abs().max().float(), b.abs().max().float()
    fmax = torch.finfo(torch.float8_e4m3fn).max
    sa, sb = (amax_a / fmax).reshape(()), (amax_b / fmax).reshape(())
    a8 = (a / sa).to(torch.float8_e4m3fn)
    b8 = (b / sb).to(torch.float8_e4m3fn).t()          # column-major k x n
    return a8, b8, sa, sb


def gemm_cases():
    seen = set()
    for name, tp, hidden, qkv, fc1, fc2_in in BLOCKS:
        linears = [("qkv", hidden, qkv), ("proj", hidden // tp, hidden),
                   ("fc1", hidden, fc1), ("fc2", fc2_in, hidden)]
        for tokens in TOKENS:
            for layer, k_in, n_out in linears:
                for pass_, (m, n, k) in (("fprop", (tokens, n_out, k_in)),
                                         ("dgrad", (tokens, k_in, n_out)),
                                         ("wgrad", (n_out, k_in, tokens))):
                    if SMALL:
                        m, n, k = max(16, m // 64), max(16, n // 64), max(16, k // 64)
                    key = (m, n, k)
                    yield dict(block=name, tp=tp, tokens=tokens, layer=layer, gemm_pass=pass_,
                               m=m, n=n, k=k, repeat=key in seen)
                    seen.add(key)


def measure_gemms() -> None:
    for case in gemm_cases():
        if case.pop("repeat"):
            continue
        m, n, k = case["m"], case["n"], case["k"]
        flops = 2.0 * m * n * k
        row = dict(case, flops=flops)
        try:
            a = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
            b = torch.randn(k, n, device=DEV, dtype=torch.bfloat16)
            row["bf16_s"] = seconds_per_call(lambda: torch.matmul(a, b))
            del a, b
            a8, b8, sa, sb = fp8_operands(m, n, k)
            for label, fast in (("fp8_fast_s", True), ("fp8_split_s", False)):
                row[label] = seconds_per_call(lambda: torch._scaled_mm(
                    a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                    use_fast_accum=fast))
            del a8, b8
        except Exception as e:          # noqa: BLE001 - a capture records what failed
            RESULTS["errors"].append(f"gemm {m}x{n}x{k}: {type(e).__name__}: {e}"[:400])
        RESULTS["gemm"].append(row)
        if "fp8_fast_s" in row:
            bf, f8, sp = (statistics.median(row[x]) for x in ("bf16_s", "fp8_fast_s",
                                                               "fp8_split_s"))
            log(f"{case['block']:12s} {case['layer']:4s} {case['gemm_pass']} {m}x{n}x{k}: "
                f"bf16 {flops / bf / 1e12:6.0f}  fp8 fast {flops / f8 / 1e12:6.0f}  "
                f"split {flops / sp / 1e12:6.0f} TFLOP/s")
    if DEV == "cuda":
        torch.cuda.empty_cache()


def measure_attention() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for heads, seq in ATTN:
        if SMALL:
            seq = seq // 32
        shape = (1, heads, seq, 128)
        for backend_name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                                      ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            row = dict(batch=1, heads=heads, seq=seq, head_dim=128, causal=True,
                       backend=backend_name)
            try:
                q, k, v = (torch.randn(shape, device=DEV, dtype=torch.bfloat16,
                                       requires_grad=True) for _ in range(3))
                grad = torch.randn(shape, device=DEV, dtype=torch.bfloat16)
                with sdpa_kernel([backend] if DEV == "cuda" else [SDPBackend.MATH]):
                    row["fwd_s"] = seconds_per_call(
                        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))

                    def fwd_bwd():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        o.backward(grad)
                    row["fwd_bwd_s"] = seconds_per_call(fwd_bwd)
                log(f"attention {backend_name} h{heads} s{seq}: fwd "
                    f"{statistics.median(row['fwd_s']) * 1e3:.3f} ms, fwd+bwd "
                    f"{statistics.median(row['fwd_bwd_s']) * 1e3:.3f} ms")
            except Exception as e:      # noqa: BLE001
                RESULTS["errors"].append(f"attention {row}: {type(e).__name__}: {e}"[:400])
            RESULTS["attention"].append(row)


def run_for(seconds: float, fn, flops_per_call: float) -> dict:
    """Calls ``fn`` back to back for ``seconds``; the achieved rate."""
    calls, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        for _ in range(20):
            fn()
        sync()
        calls += 20
    wall = time.time() - t0
    return dict(start=t0, end=t0 + wall, calls=calls,
                tflops=flops_per_call * calls / wall / 1e12 if flops_per_call else None)


def measure_power() -> None:
    if DEV != "cuda":
        return
    query = "timestamp,power.draw,power.limit,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu"
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits",
                            "-lms", "100"], stdout=subprocess.PIPE, text=True)
    phases = {}
    time.sleep(5)
    phases["idle_before"] = dict(start=time.time() - 5, end=time.time())
    n = 8192
    a = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
    phases["gemm_bf16_8192"] = run_for(POWER_PHASE_S, lambda: torch.matmul(a, b), 2.0 * n ** 3)
    a8, b8, sa, sb = fp8_operands(n, n, n)
    phases["gemm_fp8_8192"] = run_for(POWER_PHASE_S, lambda: torch._scaled_mm(
        a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=True),
        2.0 * n ** 3)
    del a, b, a8, b8
    from torch.nn.attention import SDPBackend, sdpa_kernel
    shape = (1, 32, 8192, 128)
    q, k, v = (torch.randn(shape, device=DEV, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(shape, device=DEV, dtype=torch.bfloat16)

    def fwd_bwd():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        # causal attention, forward 2 GEMMs x half the score matrix, backward 2.5x forward
        flops = 3.5 * 4 * 32 * 8192 * 8192 * 128 / 2
        phases["attention_flash_fwd_bwd"] = run_for(POWER_PHASE_S / 2, fwd_bwd, flops)
    del q, k, v, grad
    src = torch.empty(2 * 1024 ** 3, device=DEV, dtype=torch.uint8)
    dst = torch.empty_like(src)
    phases["copy_2GiB"] = run_for(POWER_PHASE_S / 2, lambda: dst.copy_(src), 0.0)
    phases["copy_2GiB"]["bytes_per_s"] = 2 * src.numel() * phases["copy_2GiB"]["calls"] / (
        phases["copy_2GiB"]["end"] - phases["copy_2GiB"]["start"])
    del src, dst
    torch.cuda.empty_cache()
    t = time.time()
    time.sleep(5)
    phases["idle_after"] = dict(start=t, end=time.time())
    smi.terminate()
    samples = smi.communicate()[0].strip().splitlines()
    RESULTS["power"] = dict(phases=phases, nvidia_smi_query=query, samples=samples,
                            sample_wall_clock_end=time.time())
    log(f"power: {len(samples)} samples; " + ", ".join(
        f"{k} {v.get('tflops') or 0:.0f} TFLOP/s" for k, v in phases.items()))


def main() -> int:
    os.makedirs(OUT, exist_ok=True)
    meta = RESULTS["meta"]
    meta.update(torch=torch.__version__, device=DEV, python=sys.version.split()[0],
                started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if DEV == "cuda":
        p = torch.cuda.get_device_properties(0)
        meta.update(gpu=p.name, sms=p.multi_processor_count, memory_bytes=p.total_memory,
                    cuda=torch.version.cuda, cublas=str(torch.backends.cuda.preferred_blas_library()),
                    cudnn=torch.backends.cudnn.version())
        for args in (["nvidia-smi", "-q", "-d", "POWER,CLOCK,PERFORMANCE"],
                     ["nvidia-smi", "--query-gpu=name,driver_version,power.limit,power.max_limit,"
                      "clocks.max.sm,clocks.max.mem", "--format=csv"]):
            meta.setdefault("nvidia_smi", []).append(
                subprocess.run(args, capture_output=True, text=True).stdout)
    log(f"{meta}")
    for part in (measure_gemms, measure_attention, measure_power):
        t = time.time()
        try:
            part()
        except Exception as e:          # noqa: BLE001
            RESULTS["errors"].append(f"{part.__name__}: {type(e).__name__}: {e}"[:400])
        log(f"{part.__name__} done in {time.time() - t:.1f} s")
        save()
    log(f"errors: {RESULTS['errors']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
