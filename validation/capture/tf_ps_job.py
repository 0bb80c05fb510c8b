"""EXPERIMENTAL, DOES NOT COMPLETE on the capture machine (TF 2.21 CPU, 2026-11-29): the
first step scheduled by the coordinator never returns (workers wait, coordinator blocked in
``execute_on``), with 1, 2 or default intra/inter-op threads. Not part of ``capture.py all``;
kept for whoever debugs it (``CAPTURE_DEBUG_DUMP_S=60`` dumps every process's stacks).

TensorFlow ParameterServerStrategy job: rank 0 coordinator (chief), rank 1 parameter
server, ranks 2.. workers, each in its own namespace (TF_CONFIG built by capture.py).

The same transformer as tf_job.py (its ``TinyGPT``). The coordinator schedules one step per
worker per round with ``ClusterCoordinator.schedule`` and waits for the round (``join``):
the round time is the iteration time. Workers apply their gradients to the variables on the
parameter server asynchronously (plain SGD with momentum, ``assign_sub``). The servers run
until the coordinator writes ``OUT/done``. Each process profiles the profiled rounds itself
(``tf.profiler.experimental.start``/``stop`` when the coordinator's ``OUT/profile_on`` /
``OUT/profile_off`` flags appear) and writes ``OUT/worker{rank}.xplane.pb.gz`` and
``OUT/worker{rank}.steps.json`` (rank 0: the coordinator's rounds).
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
from tf_job import TinyGPT  # noqa: E402


def save_xplane(logdir: Path, dest: Path) -> None:
    xplanes = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
    if not xplanes:
        raise RuntimeError(f"no xplane.pb under {logdir}")
    with open(xplanes[-1], "rb") as src, gzip.open(dest, "wb", 9) as dst:
        shutil.copyfileobj(src, dst)


def wait_for(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear in {timeout_s} s")
        time.sleep(0.05)


def serve(out: Path, rank: int, resolver, timeout_s: float) -> None:
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", start=True)
    del server                                     # keeps serving in its own threads
    logdir = out / f"tb-rank{rank}"
    wait_for(out / "profile_on", timeout_s)
    tf.profiler.experimental.start(str(logdir))
    wait_for(out / "profile_off", timeout_s)
    tf.profiler.experimental.stop()
    save_xplane(logdir, out / f"worker{rank}.xplane.pb.gz")
    wait_for(out / "done", timeout_s)
    os._exit(0)                                    # the gRPC server never returns


def coordinate(a, out: Path, resolver) -> None:
    cfg = ModelConfig()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coord = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    workers = len(resolver.cluster_spec().as_dict()["worker"])
    with strategy.scope():
        model = TinyGPT(cfg, a.seed)
        params = list(model.trainable_variables)
        moms = [tf.Variable(tf.zeros_like(v), trainable=False) for v in params]

    def dataset_fn(_ctx=None):
        data = tf.random.stateless_uniform((4, cfg.batch_per_rank, cfg.seq_len + 1),
                                           seed=[a.seed, 1], minval=0, maxval=cfg.vocab,
                                           dtype=tf.int32)
        return tf.data.Dataset.from_tensor_slices(data).repeat()

    it = iter(coord.create_per_worker_dataset(dataset_fn))

    @tf.function
    def train_step(iterator):
        def step_fn(batch):
            x, y = batch[:, :-1], batch[:, 1:]
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    tf.reshape(y, (-1,)), model(x)))
            for v, m, g in zip(params, moms, tape.gradient(loss, params)):
                m.assign(0.9 * m + g)
                v.assign_sub(cfg.lr * m)
            return loss
        return strategy.run(step_fn, args=(next(iterator),))

    prof_start = a.warmup + a.timed + 1
    total = prof_start + a.profiled
    kinds = (["warmup"] * a.warmup + ["timed"] * a.timed + ["profiler_warmup"]
             + ["profiled"] * a.profiled)
    logdir = out / "tb-rank0"
    step_s, step_end_unix, losses = [], [], []
    t_prev = time.perf_counter()
    for step in range(total):
        if step == prof_start - 1:
            (out / "profile_on").touch()
            tf.profiler.experimental.start(str(logdir))
        with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
            results = [coord.schedule(train_step, args=(it,)) for _ in range(workers)]
            coord.join()
        t = time.perf_counter()
        step_s.append(t - t_prev)
        step_end_unix.append(time.time())
        losses.append(float(sum(r.fetch() for r in results) / workers))
        t_prev = t
    tf.profiler.experimental.stop()
    (out / "profile_off").touch()
    save_xplane(logdir, out / "worker0.xplane.pb.gz")
    n = len(resolver.cluster_spec().as_dict()["worker"]) + len(
        resolver.cluster_spec().as_dict()["ps"])
    for r in range(1, n + 1):
        wait_for(out / f"worker{r}.xplane.pb.gz", 120)
    (out / "worker0.steps.json").write_text(json.dumps({
        "rank": 0, "world_size": workers, "strategy": "ParameterServerStrategy",
        "roles": "rank 0 coordinator, rank 1 ps, ranks 2.. workers; one step per worker per "
                 "round, round time = iteration", "threads": a.threads,
        "software": f"tensorflow {tf.__version__}", "pid": os.getpid(),
        "affinity": sorted(os.sched_getaffinity(0)), "model": cfg.as_dict(),
        "step_s": step_s, "step_end_unix": step_end_unix, "step_kind": kinds,
        "loss": losses}, indent=1))
    for r in range(1, n + 1):
        (out / f"worker{r}.steps.json").write_text(json.dumps({
            "rank": r, "role": "ps" if r == 1 else "worker", "step_s": [], "step_kind": []}))
    (out / "done").touch()


def main() -> None:
    p = job_parser()
    p.set_defaults(threads=int(os.environ.get("CAPTURE_PS_THREADS", 1)))
    p.add_argument("--inter-op-threads", type=int, default=int(os.environ.get("CAPTURE_PS_INTER_OP", 2)),
                   help="1 deadlocks the workers' remote function calls")
    p.add_argument("--timeout-s", type=float, default=900)
    a = p.parse_args()
    if os.environ.get("CAPTURE_DEBUG_DUMP_S"):             # debugging hangs: dump stacks
        import faulthandler
        faulthandler.dump_traceback_later(float(os.environ["CAPTURE_DEBUG_DUMP_S"]), repeat=True)
    if a.threads > 0:
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    if a.inter_op_threads > 0:
        tf.config.threading.set_inter_op_parallelism_threads(a.inter_op_threads)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    rank = int(os.environ["RANK"])
    if resolver.task_type == "chief":
        coordinate(a, out, resolver)
    else:
        serve(out, rank, resolver, a.timeout_s)


if __name__ == "__main__":
    main()
