"""Capture two real gloo jobs slowing each other on a shared, shaped link (issue 45).

For every setup of ``contention_fabric.yaml``: build the fabric from network namespaces
(two leaf bridges joined by one veth "spine", one namespace per host on its leaf, every
link shaped in both directions with ``tc tbf``), then run job A alone, job B alone and both
together, and time each job's steps (``contention_job.py``: back-to-back gloo all_reduces of
a known size). Writes ``contention_capture.csv`` (one row per job and run: median, spread)
and ``contention_steps.csv`` (every timed step). Needs root, ``ip``/``tc`` and a Python with
torch for the ranks (``--rank-python``); this driver itself runs with the project's Python
(it reads the fabric file through :func:`simulator.validation.captured.contention.load_fabric`,
which checks it).

    nice -n 5 python validation/cluster/capture_contention.py --rank-python /tmp/capvenv/bin/python

Namespaces ``cc-l0``, ``cc-l1`` (leaf bridges) and ``cc-<host>`` are removed on any exit.
Addresses: 198.18.1.0/24 (RFC 2544 benchmarking range); no packet leaves the namespaces.
Command construction is pure (:func:`setup_commands`), tested without root.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "capture"), str(HERE.parents[1])]

from launch import LoadSampler  # noqa: E402
from netns import LinkShape, run_command  # noqa: E402

from simulator.units import parse_bandwidth, parse_size, parse_time  # noqa: E402
from simulator.validation.captured.contention import load_fabric  # noqa: E402

SUBNET = "198.18.1"
PREFIX = "cc"
RUNS = ("A", "B", "AB")          # A alone, B alone, both together
PORT = {"A": 29510, "B": 29511}
METHOD = ("torch gloo all_reduce loop (fp32; back to back); 2 ranks per job; one network "
          "namespace per rank; veth + 2 bridges + 1 veth spine; tc tbf both directions")


def bit_per_s(text: str) -> float:
    """``"100 Mbit/s"`` -> 1e8: tc counts bits."""
    return 8 * parse_bandwidth(text)


@dataclass(frozen=True)
class Fabric:
    """One setup as namespaces: hosts in file order, each on its leaf at its link rate."""

    name: str
    spine_bit_per_s: float
    hosts: dict             # host -> (leaf, rate bit/s)
    jobs: dict              # job -> (ranks, size bytes)
    burst_bytes: int
    tbf_latency_s: float

    @classmethod
    def of(cls, name: str, fabric: dict) -> Fabric:
        s = fabric["setups"][name]
        return cls(name, bit_per_s(s["spine"]),
                   {h: (int(v["leaf"]), bit_per_s(v["rate"])) for h, v in s["hosts"].items()},
                   {j: (tuple(v["ranks"]), int(v["size"])) for j, v in s["jobs"].items()},
                   parse_size(fabric["tbf"]["burst"]), parse_time(fabric["tbf"]["latency"]))

    def shape(self, rate: float) -> LinkShape:
        return LinkShape(rate, burst_bytes=self.burst_bytes, tbf_latency_s=self.tbf_latency_s)

    def ns(self, host: str) -> str:
        return f"{PREFIX}-{host}"

    def addr(self, host: str) -> str:
        return f"{SUBNET}.{list(self.hosts).index(host) + 1}"

    def namespaces(self) -> list[str]:
        return [f"{PREFIX}-l0", f"{PREFIX}-l1"] + [self.ns(h) for h in self.hosts]


def setup_commands(f: Fabric) -> list[list[str]]:
    """Every command that builds ``f``: leaf bridges, the spine veth, one veth per host."""
    cmds = []
    for leaf in (0, 1):
        hub = f"{PREFIX}-l{leaf}"
        cmds += [["ip", "netns", "add", hub], ["ip", "-n", hub, "link", "set", "lo", "up"],
                 ["ip", "-n", hub, "link", "add", "br0", "type", "bridge"],
                 ["ip", "-n", hub, "link", "set", "br0", "up"]]
    l0, l1 = f"{PREFIX}-l0", f"{PREFIX}-l1"
    cmds.append(["ip", "-n", l0, "link", "add", "spine0", "type", "veth",
                 "peer", "name", "spine1", "netns", l1])
    for hub, dev in ((l0, "spine0"), (l1, "spine1")):
        cmds += [["ip", "-n", hub, "link", "set", dev, "master", "br0"],
                 ["ip", "-n", hub, "link", "set", dev, "up"]]
        cmds += f.shape(f.spine_bit_per_s).qdisc_commands(hub, dev)
    for host, (leaf, rate) in f.hosts.items():
        hub, ns, hdev = f"{PREFIX}-l{leaf}", f.ns(host), f"{PREFIX}{host}h"
        cmds += [["ip", "netns", "add", ns], ["ip", "-n", ns, "link", "set", "lo", "up"],
                 ["ip", "-n", hub, "link", "add", hdev, "type", "veth",
                  "peer", "name", "eth0", "netns", ns],
                 ["ip", "-n", hub, "link", "set", hdev, "master", "br0"],
                 ["ip", "-n", hub, "link", "set", hdev, "up"],
                 ["ip", "-n", ns, "addr", "add", f"{f.addr(host)}/24", "dev", "eth0"],
                 ["ip", "-n", ns, "link", "set", "eth0", "up"]]
        cmds += f.shape(rate).qdisc_commands(ns, "eth0") + f.shape(rate).qdisc_commands(hub, hdev)
    return cmds


def teardown(f: Fabric) -> None:
    """Kill what runs in ``f``'s namespaces (only this capture's ranks) and delete them."""
    for ns in f.namespaces():
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        for pid in pids.stdout.split():
            subprocess.run(["kill", "-9", pid], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@contextmanager
def built(f: Fabric):
    teardown(f)
    try:
        for cmd in setup_commands(f):
            run_command(cmd)
        yield f
    finally:
        teardown(f)


def links(f: Fabric) -> dict:
    """(namespace, device) of both shaped ends of the spine (``"spine"``) and of each host's
    link (by host)."""
    out = {"spine": [(f"{PREFIX}-l0", "spine0"), (f"{PREFIX}-l1", "spine1")]}
    for host, (leaf, _) in f.hosts.items():
        out[host] = [(f.ns(host), "eth0"), (f"{PREFIX}-l{leaf}", f"{PREFIX}{host}h")]
    return out


def qdisc_counts(text: str) -> tuple[int, int]:
    """(packets sent, packets dropped) from ``tc -s qdisc show dev DEV``'s tbf line."""
    m = re.search(r"Sent \d+ bytes (\d+) pkt \(dropped (\d+),", text)
    if not m:
        raise ValueError(f"no tbf counters in {text!r}")
    return int(m.group(1)), int(m.group(2))


def counters(f: Fabric) -> dict:
    """Name (``"spine"`` or a host) -> packets (sent, dropped) by tbf on its two ends."""
    out = {}
    for name, ends in links(f).items():
        pairs = [qdisc_counts(run_command(["tc", "-s", "-n", ns, "qdisc", "show", "dev", dev])
                              .stdout) for ns, dev in ends]
        out[name] = tuple(map(sum, zip(*pairs)))
    return out


def rank_argv(f: Fabric, job: str, rank: int, python: str, scratch: Path,
              run_s: float) -> list[str]:
    host = f.jobs[job][0][rank]
    return ["ip", "netns", "exec", f.ns(host), python, str(HERE / "contention_job.py"),
            "--job", job, "--size-bytes", str(f.jobs[job][1]), "--run-s", str(run_s),
            "--dir", str(scratch)]


def rank_env(f: Fabric, job: str, rank: int) -> dict:
    ranks = f.jobs[job][0]
    return {"RANK": str(rank), "WORLD_SIZE": str(len(ranks)), "MASTER_ADDR": f.addr(ranks[0]),
            "MASTER_PORT": str(PORT[job]), "GLOO_SOCKET_IFNAME": "eth0",
            "OMP_NUM_THREADS": "1"}


def run_once(f: Fabric, jobs: str, python: str, timing: dict) -> tuple[dict, dict]:
    """Run ``jobs`` (``"A"``, ``"B"`` or ``"AB"``) once; job -> step times (s) on rank 0
    whose step lies inside the timed window, and the load summary with the packets tbf sent
    and dropped on each link during the whole run (``"packets"``) and the common start
    (``"go_unix_s"``, unix s)."""
    run_s = timing["warm_s"] + timing["window_s"] + timing["tail_s"]
    before = counters(f)
    with tempfile.TemporaryDirectory(prefix="cc-run-") as tmp, LoadSampler() as load:
        scratch = Path(tmp)
        procs = []
        try:
            for job in jobs:
                for r in range(len(f.jobs[job][0])):
                    log = open(scratch / f"log.{job}.{r}", "w")
                    procs.append(subprocess.Popen(
                        rank_argv(f, job, r, python, scratch, run_s),
                        env={**os.environ, **rank_env(f, job, r)}, stdout=log,
                        stderr=subprocess.STDOUT, start_new_session=True))
            ready = [scratch / f"ready.{j}.{r}" for j in jobs for r in range(len(f.jobs[j][0]))]
            _wait(lambda: all(p.exists() for p in ready), procs, scratch, 180)
            go = time.time() + 0.5
            (scratch / "go.tmp").write_text(repr(go))
            (scratch / "go.tmp").rename(scratch / "go")
            _wait(lambda: all(p.poll() is not None for p in procs), procs, scratch,
                  run_s + 120)
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, 9)
                p.wait()
        out = {}
        for job in jobs:
            data = json.loads((scratch / f"steps.{job}.0.json").read_text())
            out[job] = timed_steps(data["steps"], go, timing)
    after = counters(f)
    drops = {k: (after[k][0] - before[k][0], after[k][1] - before[k][1]) for k in after}
    return out, {**load.summary(), "packets": drops, "go_unix_s": go}


def _wait(done, procs, scratch: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        bad = [p for p in procs if p.poll() not in (None, 0)]
        if bad or time.monotonic() > deadline:
            logs = "\n".join(p.read_text()[-1500:] for p in sorted(scratch.glob("log.*")))
            raise RuntimeError(f"ranks failed or timed out after {timeout_s:.0f} s:\n{logs}")
        time.sleep(0.05)


def timed_steps(steps: list, go: float, timing: dict) -> list[tuple[float, float]]:
    """(start after go, step s) of the steps inside the window: a step is the interval
    between consecutive ends on rank 0 (steps are back to back and synchronous)."""
    lo, hi = go + timing["warm_s"], go + timing["warm_s"] + timing["window_s"]
    ends = [end for _, end in steps]
    return [(prev - go, end - prev) for prev, end in zip(ends, ends[1:])
            if prev >= lo and end <= hi]


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    i = q * (len(s) - 1)
    lo = int(i)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (i - lo)


def summary_row(f: Fabric, job: str, run: str, steps: list, load: dict, meta: dict) -> dict:
    xs = [s for _, s in steps]
    ranks, size = f.jobs[job]
    return {"method": METHOD, "setup": f.name, "spine": f"{f.spine_bit_per_s / 1e6:g} Mbit/s",
            "job": job, "ranks": " ".join(f"{h}@leaf{f.hosts[h][0]}" for h in ranks),
            "host_rate": f"{f.hosts[ranks[0]][1] / 1e6:g} Mbit/s", "size_bytes": size,
            "run": "alone" if run == job else "together", "steps": len(xs),
            "median_s": round(statistics.median(xs), 6), "mean_s": round(statistics.fmean(xs), 6),
            "p10_s": round(quantile(xs, 0.1), 6), "p90_s": round(quantile(xs, 0.9), 6),
            "std_s": round(statistics.stdev(xs), 6), "min_s": round(min(xs), 6),
            "max_s": round(max(xs), 6),
            "loadavg_1m_before": round(load["loadavg_1m_before"], 2),
            "cpu_other_frac": round(load["cpu_other_frac"], 4),
            "spine_pkts": load["packets"]["spine"][0],
            "spine_dropped_pkts": load["packets"]["spine"][1],
            "own_links_dropped_pkts": sum(load["packets"][h][1] for h in ranks), **meta}


def capture(setups: list[str], python: str, dest: Path) -> None:
    fabric = load_fabric()
    torch_version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    meta = {"torch": torch_version, "kernel": platform.release(),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    rows, step_rows = [], []
    for name in setups:
        f = Fabric.of(name, fabric)
        with built(f):
            for run in RUNS:
                print(f"[capture] {name}: {run}", file=sys.stderr, flush=True)
                steps, load = run_once(f, run, python, fabric["run"])
                for job, ts in steps.items():
                    rows.append(summary_row(f, job, run, ts, load, meta))
                    step_rows += [{"setup": name, "run": "alone" if run == job else "together",
                                   "job": job, "step": i, "start_s": round(t, 6),
                                   "step_s": round(s, 6)} for i, (t, s) in enumerate(ts)]
                    print(f"  {job}: {len(ts)} steps, median {rows[-1]['median_s']:.4f} s",
                          file=sys.stderr, flush=True)
    _write(dest / "contention_capture.csv", rows)
    _write(dest / "contention_steps.csv", step_rows)


def _write(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank-python", required=True, help="a Python with torch (CPU)")
    p.add_argument("--setups", nargs="*", default=None, help="default: every setup")
    p.add_argument("--dest", type=Path, default=HERE)
    p.add_argument("--print", action="store_true", help="print the setup commands only")
    a = p.parse_args(argv)
    fabric = load_fabric()
    setups = a.setups or list(fabric["setups"])
    if a.print:
        for name in setups:
            for cmd in setup_commands(Fabric.of(name, fabric)):
                print(" ".join(cmd))
        return 0
    capture(setups, a.rank_python, a.dest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
