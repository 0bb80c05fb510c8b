"""CPU compute microbenchmark at the capture model's shapes, one thread, one process.

``--framework torch`` or ``tf``. Dense matmuls (forward (M,K,N), input-gradient (M,N,K),
weight-gradient (K,M,N)), the attention batched matmuls, and elementwise kernels (bytes =
inputs read + outputs written, fp32). Each kernel is repeated until ``--min-time-s`` has
passed (after one warm-up); the rate is from the mean. One JSON line per kernel to ``--out``.
Several copies run at once (pinned by the caller) measure the rate under the capture runs'
core sharing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_config import ModelConfig  # noqa: E402


def timeit(fn, min_time_s: float) -> tuple[int, float]:
    fn()
    reps, t0 = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        dt = time.perf_counter() - t0
        if dt >= min_time_s and reps >= 3:
            return reps, dt / reps


def kernels(cfg: ModelConfig):
    """(name, kind, shape, flops, bytes) of every kernel benchmarked."""
    out = []
    for name, (m, k, n) in cfg.matmul_shapes().items():
        for tag, (a, b, c) in (("fwd", (m, k, n)), ("bwd_input", (m, n, k)),
                               ("bwd_weight", (k, m, n))):
            out.append((f"{name}.{tag}", "matmul", (a, b, c), 2 * a * b * c, 4 * (a * b + b * c + a * c)))
    for name, (bt, m, k, n) in cfg.bmm_shapes().items():
        out.append((f"{name}.fwd", "bmm", (bt, m, k, n), 2 * bt * m * k * n,
                    4 * bt * (m * k + k * n + m * n)))
    t, d, f = cfg.tokens_per_rank, cfg.d_model, cfg.d_ff
    att = cfg.batch_per_rank * cfg.heads * cfg.seq_len * cfg.seq_len
    out += [("add.ffn", "elementwise", (t, f), t * f, 3 * 4 * t * f),
            ("gelu.ffn", "elementwise", (t, f), 8 * t * f, 2 * 4 * t * f),
            ("layernorm.d", "elementwise", (t, d), 8 * t * d, 2 * 4 * t * d),
            ("softmax.attn", "elementwise", (att,), 5 * att, 2 * 4 * att),
            ("sgd_momentum.params", "elementwise", (cfg.params,), 4 * cfg.params,
             5 * 4 * cfg.params)]
    return out


def torch_fns(cfg: ModelConfig):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    fns = {}
    for name, kind, shape, _f, _b in kernels(cfg):
        if kind == "matmul":
            m, k, n = shape
            x, w = torch.randn(m, k), torch.randn(k, n)
            fns[name] = (lambda x=x, w=w: torch.mm(x, w))
        elif kind == "bmm":
            bt, m, k, n = shape
            x, w = torch.randn(bt, m, k), torch.randn(bt, k, n)
            fns[name] = (lambda x=x, w=w: torch.bmm(x, w))
    t, d, f = cfg.tokens_per_rank, cfg.d_model, cfg.d_ff
    a, b = torch.randn(t, f), torch.randn(t, f)
    h = torch.randn(t, d)
    s = torch.randn(cfg.batch_per_rank, cfg.heads, cfg.seq_len, cfg.seq_len)
    p, g, mom = torch.randn(cfg.params), torch.randn(cfg.params), torch.zeros(cfg.params)
    fns["add.ffn"] = lambda: a + b
    fns["gelu.ffn"] = lambda: F.gelu(a)
    fns["layernorm.d"] = lambda: F.layer_norm(h, (d,))
    fns["softmax.attn"] = lambda: F.softmax(s, dim=-1)

    def sgd():
        mom.mul_(0.9).add_(g)
        p.add_(mom, alpha=-1e-3)
    fns["sgd_momentum.params"] = sgd
    return fns, f"torch {torch.__version__}"


def tf_fns(cfg: ModelConfig):
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    fns = {}
    for name, kind, shape, _f, _b in kernels(cfg):
        if kind == "matmul":
            m, k, n = shape
            x, w = tf.random.normal((m, k)), tf.random.normal((k, n))
        elif kind == "bmm":
            bt, m, k, n = shape
            x, w = tf.random.normal((bt, m, k)), tf.random.normal((bt, k, n))
        else:
            continue
        fns[name] = tf.function(lambda x=x, w=w: tf.matmul(x, w))
    t, d, f = cfg.tokens_per_rank, cfg.d_model, cfg.d_ff
    a, b = tf.random.normal((t, f)), tf.random.normal((t, f))
    h = tf.random.normal((t, d))
    s = tf.random.normal((cfg.batch_per_rank, cfg.heads, cfg.seq_len, cfg.seq_len))
    p, g = tf.Variable(tf.random.normal((cfg.params,))), tf.random.normal((cfg.params,))
    mom = tf.Variable(tf.zeros((cfg.params,)))

    def layernorm(x):
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + 1e-5)

    def sgd():
        mom.assign(0.9 * mom + g)
        p.assign_sub(1e-3 * mom)
    for name, fn in (("add.ffn", lambda: a + b), ("gelu.ffn", lambda: tf.nn.gelu(a)),
                     ("layernorm.d", lambda: layernorm(h)),
                     ("softmax.attn", lambda: tf.nn.softmax(s, axis=-1)),
                     ("sgd_momentum.params", sgd)):
        fns[name] = tf.function(fn)

    wrapped = {}
    for name, fn in fns.items():
        if name == "sgd_momentum.params":
            wrapped[name] = lambda fn=fn: (fn(), p.numpy()[:1])
        else:
            wrapped[name] = lambda fn=fn: fn().numpy()   # block until the kernel is done
    return wrapped, f"tensorflow {tf.__version__}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--framework", choices=["torch", "tf"], required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--min-time-s", type=float, default=0.3)
    p.add_argument("--mode", default="solo")
    a = p.parse_args()
    cfg = ModelConfig()
    fns, version = (torch_fns if a.framework == "torch" else tf_fns)(cfg)
    with open(a.out, "w") as fh:
        for name, kind, shape, flops, nbytes in kernels(cfg):
            reps, t = timeit(fns[name], a.min_time_s)
            fh.write(json.dumps({
                "framework": a.framework, "software": version, "mode": a.mode,
                "cpus": sorted(os.sched_getaffinity(0)), "kernel": name, "kind": kind,
                "shape": "x".join(map(str, shape)), "flops": flops, "bytes": nbytes,
                "reps": reps, "time_s": t, "gflop_per_s": flops / t / 1e9,
                "gbyte_per_s": nbytes / t / 1e9}) + "\n")


if __name__ == "__main__":
    main()
