"""Capture real distributed runs and capture-machine microbenchmarks at shaped link speeds.

Run as root from the repository root with the capture virtualenv's Python available
(``.venv-capture``, see validation/traces/captured/README.md)::

    python3 validation/capture/capture.py all               # the whole protocol
    python3 validation/capture/capture.py job --job torch-fsdp2 --ranks 2 --rate 1gbit
    python3 validation/capture/capture.py bench-collectives --ranks 2 --rate 1gbit
    python3 validation/capture/capture.py bench-compute
    python3 validation/capture/capture.py fit                # CSV -> capture_machine.yaml

Every job and benchmark runs in fresh namespaces (netns.py) that are removed afterwards,
also on failure or interrupt. Results go to ``--dest`` (default validation/traces):
``captured_runs.csv``, ``captured/<run_id>/`` (traces, step times), ``capture_machine.csv``
and ``capture_machine.yaml``. The driver itself needs only the standard library (+ PyYAML
for ``fit``); ranks run under ``--python`` (torch / tensorflow-cpu installed there).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import launch  # noqa: E402
import records  # noqa: E402
import sockcheck  # noqa: E402
from netns import LinkShape, NetnsPlan, parse_rate_bit_per_s, rate_label, shaped_network  # noqa: E402

REPO = HERE.parents[1]
DEFAULT_PYTHON = REPO / ".venv-capture" / "bin" / "python"
RATES = ("10gbit", "1gbit", "200mbit")
MASTER_PORT = 29500
JOBS = {  # job -> (framework, strategy, script)
    "torch-ddp": ("pytorch", "ddp", "torch_job.py"),
    "torch-fsdp2": ("pytorch", "fsdp2", "torch_job.py"),
    "tf-mwms": ("tensorflow", "multi_worker_mirrored_ring", "tf_job.py"),
    "tf-ps": ("tensorflow", "parameter_server", "tf_ps_job.py"),
}
RUN_FIELDS = [
    "run_id", "job", "framework", "strategy", "ranks", "bandwidth", "bandwidth_bit_per_s",
    "latency_s", "tbf_burst_bytes", "tbf_latency_ms", "socket_rtt_s", "socket_bulk_bit_per_s",
    "threads_per_rank", "pinning", "seed", "steps", "iter_time_mean_s", "iter_time_median_s",
    "iter_time_std_s", "profiled_steps", "profiled_iter_time_mean_s",
    "profiled_iter_time_median_s", "date", "machine", "loadavg_1m_before", "loadavg_1m_mean",
    "loadavg_1m_max", "cpu_other_frac", "cpu_steal_frac", "software", "trace_files"]
MACHINE_FIELDS = [
    "kind", "framework", "op", "mode", "shape", "ranks", "bandwidth", "bandwidth_bit_per_s",
    "size_bytes", "wire_factor", "reps", "time_s", "rank0_median_s", "flops", "bytes",
    "gflop_per_s", "gbyte_per_s", "date", "machine", "loadavg_1m_before", "loadavg_1m_mean",
    "cpu_other_frac", "cpu_steal_frac", "software"]


def now_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def wait_for_quiet(threshold: float, poll_s: float, max_wait_s: float) -> dict:
    """Poll the 1-minute load average until it is below ``threshold`` (or time runs out)."""
    t0 = time.monotonic()
    seen = []
    while True:
        load = launch.read_loadavg()[0]
        seen.append(load)
        waited = time.monotonic() - t0
        if load < threshold:
            print(f"[quiet] load {load:.2f} < {threshold} after {waited:.0f} s", flush=True)
            return {"quiet": True, "waited_s": waited, "load": load}
        if waited >= max_wait_s:
            print(f"[quiet] gave up after {waited:.0f} s, load {load:.2f}", flush=True)
            return {"quiet": False, "waited_s": waited, "load": load, "min_seen": min(seen)}
        print(f"[quiet] load {load:.2f} >= {threshold}, waiting ({waited:.0f} s)", flush=True)
        time.sleep(poll_s)


def rank_env(plan: NetnsPlan, rank: int, extra: dict | None = None) -> dict:
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(plan.ranks),
            "MASTER_ADDR": plan.addr(0), "MASTER_PORT": str(MASTER_PORT),
            "GLOO_SOCKET_IFNAME": plan.rank_dev, "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1",
            "CUDA_VISIBLE_DEVICES": "", **(extra or {})}


def tf_config(plan: NetnsPlan, rank: int, job: str = "tf-mwms", port: int = 23456) -> str:
    """MWMS: every rank a worker. PS: rank 0 chief (coordinator), rank 1 ps, 2.. workers."""
    hosts = [f"{plan.addr(r)}:{port}" for r in range(plan.ranks)]
    if job != "tf-ps":
        return json.dumps({"cluster": {"worker": hosts},
                           "task": {"type": "worker", "index": rank}})
    if plan.ranks < 3:
        raise ValueError(f"ranks(={plan.ranks}) must be >= 3 for tf-ps (chief, ps, workers)")
    task = ({"type": "chief", "index": 0} if rank == 0 else {"type": "ps", "index": 0}
            if rank == 1 else {"type": "worker", "index": rank - 2})
    return json.dumps({"cluster": {"chief": hosts[:1], "ps": hosts[1:2], "worker": hosts[2:]},
                       "task": task})


def plan_for(ranks: int, rate: str | None) -> NetnsPlan:
    shape = LinkShape(parse_rate_bit_per_s(rate)) if rate else None
    return NetnsPlan(ranks, shape)


def run_job(a) -> dict:
    framework, strategy, script = JOBS[a.job]
    plan = plan_for(a.ranks, a.rate)
    run_id = f"{a.job}-{a.ranks}r-{rate_label(plan.shape.rate_bit_per_s)}"
    raw = Path(a.scratch) / run_id
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir(parents=True)
    steps = ["--warmup", str(a.warmup), "--timed", str(a.timed), "--profiled", str(a.profiled)]

    def argv_for(r):
        return [str(a.python), str(HERE / script), "--out", str(raw), "--seed", str(a.seed),
                *steps] + (["--strategy", strategy] if framework == "pytorch" else [])

    def env_for(r):
        return rank_env(plan, r, {"TF_CONFIG": tf_config(plan, r, a.job)}
                        if framework == "tensorflow" else None)

    print(f"[job] {run_id}: start", flush=True)
    with shaped_network(plan):
        link = sockcheck.check(plan)
        with launch.LoadSampler() as load:
            launch.run_ranks(plan, argv_for, env_for, raw / "logs", a.timeout_s)
    return record_run(a, plan, run_id, framework, strategy, raw, link, load.summary())


def record_run(a, plan, run_id, framework, strategy, raw, link, load) -> dict:
    per_rank = [json.loads((raw / f"{p}{r}.steps.json").read_text())
                for r in range(plan.ranks)
                for p in (("rank",) if framework == "pytorch" else ("worker",))]
    r0 = per_rank[0]
    timed = records.step_stats(r0["step_s"], r0["step_kind"], "timed")
    prof = records.step_stats(r0["step_s"], r0["step_kind"], "profiled")
    dest = Path(a.dest) / "captured" / run_id
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    traces = sorted(raw.glob("*.gz"))
    for t in traces:
        shutil.copy2(t, dest / t.name)
    (dest / "steps.json").write_text(json.dumps({
        "run_id": run_id, "ranks": per_rank, "link_check": link, "load": load}, indent=1))
    row = {
        "run_id": run_id, "job": a.job, "framework": framework, "strategy": strategy,
        "ranks": plan.ranks, "bandwidth": rate_label(plan.shape.rate_bit_per_s),
        "bandwidth_bit_per_s": int(plan.shape.rate_bit_per_s), "latency_s": plan.shape.delay_s,
        "tbf_burst_bytes": plan.shape.burst, "tbf_latency_ms": plan.shape.tbf_latency_s * 1e3,
        "socket_rtt_s": _median([x["rtt_s"] for x in link]),
        "socket_bulk_bit_per_s": _median([x["bulk_bit_per_s"] for x in link]),
        "threads_per_rank": r0.get("threads", 1),
        "pinning": "taskset rank r -> cpu r mod %d" % (os.cpu_count() or 1),
        "seed": a.seed, "steps": timed["n"], "iter_time_mean_s": _r(timed["mean_s"]),
        "iter_time_median_s": _r(timed["median_s"]), "iter_time_std_s": _r(timed["std_s"]),
        "profiled_steps": prof["n"], "profiled_iter_time_mean_s": _r(prof["mean_s"]),
        "profiled_iter_time_median_s": _r(prof["median_s"]), "date": now_utc(),
        "machine": records.machine_summary(),
        **{k: round(v, 3 if k.startswith("cpu") else 2) for k, v in load.items()
           if k != "loadavg_1m_after"},
        "software": r0.get("software", r0.get("torch", "")),
        "trace_files": ";".join(f"captured/{run_id}/{t.name}" for t in traces)}
    if not a.no_record:
        records.upsert_csv(Path(a.dest) / "captured_runs.csv", [row], ["run_id"], RUN_FIELDS)
    print(f"[job] {run_id}: iter {row['iter_time_mean_s']} s mean "
          f"(median {row['iter_time_median_s']}, n={timed['n']}), profiled "
          f"{row['profiled_iter_time_mean_s']} s; load {load}", flush=True)
    return row


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else ""


def _r(x, nd: int = 6):
    return "" if x is None else round(x, nd)


def bench_collectives(a) -> list[dict]:
    plan = plan_for(a.ranks, a.rate)
    label = rate_label(plan.shape.rate_bit_per_s)
    out = Path(a.scratch) / f"coll-{a.ranks}r-{label}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    extra = ["--sizes", a.sizes] if a.sizes else []

    def argv_for(r):
        return [str(a.python), str(HERE / "bench_collectives.py"), "--out", str(out),
                "--budget-s", str(a.budget_s), *extra]

    print(f"[coll] {a.ranks} ranks at {label}: start", flush=True)
    with shaped_network(plan):
        sockcheck.check(plan)
        with launch.LoadSampler() as load:
            launch.run_ranks(plan, argv_for, lambda r: rank_env(plan, r),
                             Path(a.scratch) / f"coll-{a.ranks}r-{label}-logs", a.timeout_s)
    ls = load.summary()
    date, machine = now_utc(), records.machine_summary()
    rows = []
    for line in out.read_text().splitlines():
        p = json.loads(line)
        rows.append({
            "kind": "collective", "framework": "pytorch-gloo", "op": p["op"], "mode": "shaped",
            "ranks": p["ranks"], "bandwidth": label,
            "bandwidth_bit_per_s": int(plan.shape.rate_bit_per_s), "size_bytes": p["size_bytes"],
            "wire_factor": round(records.WIRE_FACTOR[p["op"]](p["ranks"]), 6), "reps": p["reps"],
            "time_s": f"{p['time_s']:.6g}", "rank0_median_s": f"{p['rank0_median_s']:.6g}",
            "date": date, "machine": machine, "loadavg_1m_before": round(ls["loadavg_1m_before"], 2),
            "loadavg_1m_mean": round(ls["loadavg_1m_mean"], 2),
            "cpu_other_frac": round(ls["cpu_other_frac"], 3),
            "cpu_steal_frac": round(ls["cpu_steal_frac"], 3), "software": _software(a.python)})
        print(f"  {p['op']:15s} {p['size_bytes']:>10d} B  {p['time_s']*1e3:9.3f} ms", flush=True)
    if not a.no_record:
        records.upsert_csv(Path(a.dest) / "capture_machine.csv", rows,
                           ["kind", "framework", "op", "mode", "shape", "ranks", "bandwidth",
                            "size_bytes"], MACHINE_FIELDS)
    return rows


_SOFTWARE: dict = {}


def _software(python) -> str:
    if str(python) not in _SOFTWARE:
        out = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True)
        _SOFTWARE[str(python)] = f"torch {out.stdout.strip()}"
    return _SOFTWARE[str(python)]


def bench_compute(a) -> list[dict]:
    """Solo (1 process), 2 processes on 2 cores, and 4 processes 2 per core (as the runs)."""
    modes = {"solo": ["0"], "2proc_1percore": ["0", "1"], "4proc_2percore": ["0", "1", "0", "1"]}
    frameworks = a.frameworks.split(",")
    rows = []
    date, machine = now_utc(), records.machine_summary()
    for fw in frameworks:
        for mode, cpus in modes.items():
            if fw == "tf" and mode == "4proc_2percore":
                continue                         # TensorFlow runs use 2 workers only
            outs = [Path(a.scratch) / f"compute-{fw}-{mode}-{i}.jsonl" for i in range(len(cpus))]
            with launch.LoadSampler() as load:
                procs = [subprocess.Popen(
                    ["taskset", "-c", c, str(a.python), str(HERE / "bench_compute.py"),
                     "--framework", fw, "--out", str(o), "--mode", mode,
                     "--min-time-s", str(a.min_time_s)],
                    env={**os.environ, "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
                         "CUDA_VISIBLE_DEVICES": ""}) for c, o in zip(cpus, outs)]
                codes = [p.wait() for p in procs]
            if any(codes):
                raise RuntimeError(f"compute benchmark {fw}/{mode} failed: {codes}")
            ls = load.summary()
            # per kernel: the mean over the concurrent processes (each its own rate)
            per = [[json.loads(l) for l in o.read_text().splitlines()] for o in outs]
            for kernel_rows in zip(*per):
                k0 = kernel_rows[0]
                t = sum(k["time_s"] for k in kernel_rows) / len(kernel_rows)
                rows.append({
                    "kind": "compute" if k0["kind"] in ("matmul", "bmm") else "elementwise",
                    "framework": "pytorch" if fw == "torch" else "tensorflow",
                    "op": k0["kernel"], "mode": mode, "shape": k0["shape"], "ranks": len(cpus),
                    "reps": min(k["reps"] for k in kernel_rows), "time_s": f"{t:.6g}",
                    "flops": k0["flops"], "bytes": k0["bytes"],
                    "gflop_per_s": round(k0["flops"] / t / 1e9, 3),
                    "gbyte_per_s": round(k0["bytes"] / t / 1e9, 3), "date": date,
                    "machine": machine, "loadavg_1m_before": round(ls["loadavg_1m_before"], 2),
                    "loadavg_1m_mean": round(ls["loadavg_1m_mean"], 2),
                    "cpu_other_frac": round(ls["cpu_other_frac"], 3),
                    "cpu_steal_frac": round(ls["cpu_steal_frac"], 3),
                    "software": k0["software"]})
            print(f"[compute] {fw} {mode}: done (load {ls['loadavg_1m_mean']:.2f}, other CPU "
                  f"{ls['cpu_other_frac']:.1%})", flush=True)
    if not a.no_record:
        records.upsert_csv(Path(a.dest) / "capture_machine.csv", rows,
                           ["kind", "framework", "op", "mode", "shape", "ranks", "bandwidth",
                            "size_bytes"], MACHINE_FIELDS)
    return rows


def fit(a) -> dict:
    import yaml
    import fit_summary
    rows = records.read_csv(Path(a.dest) / "capture_machine.csv")
    summary = fit_summary.summarize(rows)
    path = Path(a.dest) / "capture_machine.yaml"
    path.write_text(fit_summary.HEADER + yaml.safe_dump(summary, sort_keys=False, width=100))
    print(f"[fit] wrote {path}", flush=True)
    return summary


def run_all(a) -> None:
    """The whole protocol: wait for a quiet machine, compute benchmark, then per bandwidth
    the collective benchmarks and the jobs back to back; the 4-rank jobs at ``--rate4``."""
    t0 = time.monotonic()
    waits = [wait_for_quiet(a.load_threshold, a.poll_s, a.max_wait_s) | {"before": "compute"}]
    Path(a.scratch).mkdir(parents=True, exist_ok=True)
    if "compute" in a.parts:
        bench_compute(a)
    for rate in a.rates.split(","):
        a.rate = rate
        # our own runs raise the 1-minute average too: let it decay, within the budget
        left = max(0.0, a.max_wait_s - (time.monotonic() - t0))
        waits.append(wait_for_quiet(a.load_threshold, a.poll_s, min(left, a.rewait_s))
                     | {"before": rate})
        (Path(a.scratch) / "quiet.json").write_text(json.dumps(waits, indent=1))
        if "coll" in a.parts:
            for n in (2, 4):
                a.ranks = n
                bench_collectives(a)
        if "jobs" in a.parts:
            for job in a.jobs.split(","):
                a.job = job
                for n in ((2, 4) if rate == a.rate4 and job.startswith("torch") else (2,)):
                    a.ranks = n
                    try:
                        run_job(a)
                    except launch.RanksFailed as exc:
                        print(f"[job] {job} {n}r {rate}: FAILED: {exc}", flush=True)
    fit(a)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--python", default=str(DEFAULT_PYTHON if DEFAULT_PYTHON.exists()
                                                 else sys.executable))
    common.add_argument("--dest", default=str(REPO / "validation" / "traces"))
    common.add_argument("--scratch", default="/tmp/clustersim-capture")
    common.add_argument("--no-record", action="store_true", help="smoke test: write no CSV")
    common.add_argument("--timeout-s", type=float, default=900)
    jobp = argparse.ArgumentParser(add_help=False)
    jobp.add_argument("--seed", type=int, default=1234)
    jobp.add_argument("--warmup", type=int, default=2)
    jobp.add_argument("--timed", type=int, default=6)
    jobp.add_argument("--profiled", type=int, default=2)
    collp = argparse.ArgumentParser(add_help=False)
    collp.add_argument("--sizes", default="")
    collp.add_argument("--budget-s", type=float, default=1.0)
    compp = argparse.ArgumentParser(add_help=False)
    compp.add_argument("--frameworks", default="torch,tf")
    compp.add_argument("--min-time-s", type=float, default=0.5)

    j = sub.add_parser("job", parents=[common, jobp])
    j.add_argument("--job", required=True, choices=sorted(JOBS))
    j.add_argument("--ranks", type=int, default=2)
    j.add_argument("--rate", required=True)
    c = sub.add_parser("bench-collectives", parents=[common, collp])
    c.add_argument("--ranks", type=int, default=2)
    c.add_argument("--rate", required=True)
    sub.add_parser("bench-compute", parents=[common, compp])
    sub.add_parser("fit", parents=[common])
    al = sub.add_parser("all", parents=[common, jobp, collp, compp])
    al.add_argument("--rates", default=",".join(RATES))
    al.add_argument("--rate4", default="1gbit", help="bandwidth of the 4-rank torch runs")
    al.add_argument("--jobs", default="torch-ddp,torch-fsdp2,tf-mwms")
    al.add_argument("--parts", default="compute,coll,jobs")
    al.add_argument("--load-threshold", type=float, default=0.7)
    al.add_argument("--poll-s", type=float, default=30)
    al.add_argument("--max-wait-s", type=float, default=2700)
    al.add_argument("--rewait-s", type=float, default=240,
                    help="at most this long to wait again before each bandwidth")
    a = p.parse_args(argv)
    if os.geteuid() != 0 and a.cmd in ("job", "bench-collectives", "all"):
        print("error: creating network namespaces needs root", file=sys.stderr)
        return 2
    {"job": run_job, "bench-collectives": bench_collectives, "bench-compute": bench_compute,
     "fit": fit, "all": run_all}[a.cmd](a)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
