"""One worker of a TensorFlow MultiWorkerMirroredStrategy (RING) job, profiled to xplane.pb.

Started by ``capture.py`` in each worker's namespace with TF_CONFIG set. The same
transformer as ``torch_job.py`` written in plain TensorFlow (variables in a ``tf.Module``),
trained by a custom loop: ``strategy.run`` of a step inside ``tf.function``; gradients are
summed across workers with one ``replica_context.all_reduce`` (RING, packed), then each
replica applies SGD with momentum through ``merge_call`` / ``extended.update`` (what Keras
optimizers do). Steps as in torch_job.py; ``tf.profiler.experimental`` traces the profiled
steps (``tf.profiler.experimental.Trace("train", step_num=...)`` markers). Writes
``OUT/worker{i}.xplane.pb.gz`` and ``OUT/worker{i}.steps.json``.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import time
from pathlib import Path

import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_config import ModelConfig, job_parser  # noqa: E402


class TinyGPT(tf.Module):
    def __init__(self, cfg: ModelConfig, seed: int):
        super().__init__(name="tiny_gpt")
        init = tf.random.stateless_normal
        d, f, v = cfg.d_model, cfg.d_ff, cfg.vocab
        counter = iter(range(10_000))

        def var(shape, name, scale=0.02, zero=False):
            value = (tf.zeros(shape) if zero else
                     scale * init(shape, seed=[seed, next(counter)]))
            return tf.Variable(value, name=name)

        self.cfg = cfg
        self.tok = var((v, d), "tok")
        self.pos = var((cfg.seq_len, d), "pos")
        self.blocks = []
        for i in range(cfg.blocks):
            with tf.name_scope(f"block{i}"):
                self.blocks.append({
                    "ln1_g": tf.Variable(tf.ones(d), name=f"b{i}_ln1_g"),
                    "ln1_b": var((d,), f"b{i}_ln1_b", zero=True),
                    "qkv_w": var((d, 3 * d), f"b{i}_qkv_w"), "qkv_b": var((3 * d,), f"b{i}_qkv_b", zero=True),
                    "proj_w": var((d, d), f"b{i}_proj_w"), "proj_b": var((d,), f"b{i}_proj_b", zero=True),
                    "ln2_g": tf.Variable(tf.ones(d), name=f"b{i}_ln2_g"),
                    "ln2_b": var((d,), f"b{i}_ln2_b", zero=True),
                    "fc1_w": var((d, f), f"b{i}_fc1_w"), "fc1_b": var((f,), f"b{i}_fc1_b", zero=True),
                    "fc2_w": var((f, d), f"b{i}_fc2_w"), "fc2_b": var((d,), f"b{i}_fc2_b", zero=True)})
        self.lnf_g = tf.Variable(tf.ones(d), name="lnf_g")
        self.lnf_b = var((d,), "lnf_b", zero=True)
        self.head_w = var((d, v), "head_w")
        self.head_b = var((v,), "head_b", zero=True)
        t = cfg.seq_len
        self.mask = tf.constant(1.0 - tf.linalg.band_part(tf.ones((t, t)), -1, 0)) * -1e9

    @staticmethod
    def _ln(x, g, b):
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + 1e-5) * g + b

    def _block(self, x, p, i):
        cfg = self.cfg
        bsz, t, c, h = cfg.batch_per_rank, cfg.seq_len, cfg.d_model, cfg.heads
        with tf.name_scope(f"block{i}"):
            y = tf.reshape(self._ln(x, p["ln1_g"], p["ln1_b"]), (bsz * t, c))
            qkv = tf.reshape(tf.matmul(y, p["qkv_w"]) + p["qkv_b"], (bsz, t, 3, h, c // h))
            q, k, v = (tf.transpose(qkv[:, :, j], (0, 2, 1, 3)) for j in range(3))
            att = tf.matmul(q, k, transpose_b=True) * (1.0 / (c // h) ** 0.5) + self.mask
            y = tf.matmul(tf.nn.softmax(att, axis=-1), v)                  # (B, H, T, dh)
            y = tf.reshape(tf.transpose(y, (0, 2, 1, 3)), (bsz * t, c))
            x = x + tf.reshape(tf.matmul(y, p["proj_w"]) + p["proj_b"], (bsz, t, c))
            y = tf.reshape(self._ln(x, p["ln2_g"], p["ln2_b"]), (bsz * t, c))
            y = tf.nn.gelu(tf.matmul(y, p["fc1_w"]) + p["fc1_b"])
            return x + tf.reshape(tf.matmul(y, p["fc2_w"]) + p["fc2_b"], (bsz, t, c))

    def __call__(self, idx):
        cfg = self.cfg
        x = tf.gather(self.tok, idx) + self.pos
        for i, p in enumerate(self.blocks):
            x = self._block(x, p, i)
        x = tf.reshape(self._ln(x, self.lnf_g, self.lnf_b), (-1, cfg.d_model))
        return tf.matmul(x, self.head_w) + self.head_b


def main() -> None:
    p = job_parser()
    p.add_argument("--inter-op-threads", type=int, default=1)
    a = p.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.inter_op_threads)
    comm = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=comm)
    worker = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    cfg = ModelConfig()
    with strategy.scope():
        model = TinyGPT(cfg, a.seed)
        params = list(model.trainable_variables)
        moms = [tf.Variable(tf.zeros_like(v), name=v.name.split(":")[0] + "_mom",
                            trainable=False) for v in params]

    def apply(strat, grads):
        for v, m, g in zip(params, moms, grads):
            strat.extended.update(m, lambda m_, g_: m_.assign(0.9 * m_ + g_), args=(g,),
                                  group=False)
            strat.extended.update(v, lambda v_, m_: v_.assign_sub(cfg.lr * m_), args=(m,),
                                  group=False)

    def step_fn(batch):
        x, y = batch[:, :-1], batch[:, 1:]
        with tf.GradientTape() as tape:
            logits = model(x)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                tf.reshape(y, (-1,)), logits))
        grads = tape.gradient(loss, params)
        ctx = tf.distribute.get_replica_context()
        grads = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, grads, options=comm)
        ctx.merge_call(apply, args=(grads,))
        return loss

    @tf.function
    def train_step(batch):
        return strategy.run(step_fn, args=(batch,))

    rng = tf.random.Generator.from_seed(a.seed + 1 + worker)
    batches = [rng.uniform((cfg.batch_per_rank, cfg.seq_len + 1), 0, cfg.vocab, dtype=tf.int32)
               for _ in range(4)]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    logdir = out / f"tb-worker{worker}"
    prof_start = a.warmup + a.timed + 1
    total = prof_start + a.profiled
    kinds = (["warmup"] * a.warmup + ["timed"] * a.timed + ["profiler_warmup"]
             + ["profiled"] * a.profiled)
    step_s, step_end_unix, losses = [], [], []
    t_prev = time.perf_counter()
    for step in range(total):
        if step == prof_start - 1:
            tf.profiler.experimental.start(str(logdir))
        with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
            loss = float(strategy.reduce("MEAN", train_step(batches[step % 4]), axis=None))
        t = time.perf_counter()
        step_s.append(t - t_prev)
        step_end_unix.append(time.time())
        losses.append(loss)
        t_prev = t
    tf.profiler.experimental.stop()
    xplanes = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
    if len(xplanes) != 1:
        raise RuntimeError(f"expected one xplane.pb under {logdir}, found {xplanes}")
    with open(xplanes[0], "rb") as src, gzip.open(out / f"worker{worker}.xplane.pb.gz", "wb", 9) as dst:
        shutil.copyfileobj(src, dst)
    (out / f"worker{worker}.steps.json").write_text(json.dumps({
        "rank": worker, "world_size": strategy.num_replicas_in_sync,
        "strategy": "MultiWorkerMirroredStrategy(RING)", "threads": a.threads,
        "inter_op_threads": a.inter_op_threads, "software": f"tensorflow {tf.__version__}",
        "pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0)),
        "model": cfg.as_dict(), "step_s": step_s, "step_end_unix": step_end_unix,
        "step_kind": kinds, "loss": losses, "profiler_warmup_note":
        "profiler started before the profiler_warmup step; that step is traced too"}, indent=1))


if __name__ == "__main__":
    main()
