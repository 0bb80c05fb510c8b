"""Why B of the ``unequal`` setup slows beside A: the TCP state of every flow during the runs.

The contention capture (``capture_contention.py``) measured B, whose own links are 30 Mbit/s
(its bottleneck: max-min leaves it alone), 1.31x slower beside A. This probe runs the same
setup again (A alone, B alone, both together) while, every ``--period-s``:

* each host's namespace prints ``ss -tinH`` of its established TCP sockets (per flow: srtt,
  minrtt, cwnd, the congestion control's own estimates, delivery rate, unacked and
  retransmitted segments, bytes acked, time limited by the receive window or send buffer);
* each leaf's namespace prints ``tc -s qdisc`` of the spine's end and of each host link's
  leaf end (bytes and packets waiting in tbf's queue: the queueing delay behind them).

Variants (``--variants``): ``bbr`` (the machine's default, as captured), ``cubic`` (every host's
route to the others with ``congctl cubic``), ``short-queue`` (bbr, every tbf's queue limit
5 ms instead of 50). Writes ``tcp_probe_samples.csv`` (one row per socket and sample,
gloo's data connections: not the store's) and ``tcp_probe_queues.csv`` (one row per shaped
device and sample) and ``tcp_probe_steps.csv`` (step medians per variant, run and job);
``--summary`` prints what they show without running anything. Root, as the capture.

    nice -n 5 python validation/cluster/probe_tcp.py --rank-python /tmp/capvenv/bin/python
    python validation/cluster/probe_tcp.py --summary
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import re
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import capture_contention as cap  # noqa: E402

VARIANTS = {"bbr": ("bbr", None), "cubic": ("cubic", None), "short-queue": ("bbr", 0.005)}
STORE_PORTS = {str(p) for p in cap.PORT.values()}
FIELDS = ("rtt", "minrtt", "cwnd", "delivery_rate", "pacing_rate", "unacked", "retrans",
          "bytes_acked", "bytes_retrans", "rwnd_limited", "sndbuf_limited", "busy", "bw",
          "mrtt", "app_limited")


def sampler_argv(ns: str, body: str, period_s: float) -> list[str]:
    """A shell loop in namespace ``ns``: a line ``@ <unix s>`` then ``body``'s output."""
    return ["ip", "netns", "exec", ns, "sh", "-c",
            f"while :; do echo @ $(date +%s.%N); {body}; sleep {period_s}; done"]


def host_body() -> str:
    return "ss -tinH state established; echo '# eth0'; tc -s qdisc show dev eth0"


def leaf_body(devs: list[str]) -> str:
    return "; ".join(f"echo '# {d}'; tc -s qdisc show dev {d}" for d in devs)


@contextmanager
def sampling(f: cap.Fabric, hosts: list[str], period_s: float, scratch: Path):
    """Samplers on ``hosts`` and on both leaves while in use; yields their output files."""
    procs, files = [], {}
    leaf_devs = {0: ["spine0"], 1: ["spine1"]}
    for h, (leaf, _) in f.hosts.items():
        leaf_devs[leaf].append(f"{cap.PREFIX}{h}h")
    jobs = [(h, f.ns(h), host_body()) for h in hosts] + \
        [(f"leaf{i}", f"{cap.PREFIX}-l{i}", leaf_body(d)) for i, d in leaf_devs.items()]
    try:
        for name, ns, body in jobs:
            path = files[name] = scratch / f"ss.{name}.txt"
            procs.append(subprocess.Popen(sampler_argv(ns, body, period_s),
                                          stdout=open(path, "w"), stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        yield files
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _num(text: str) -> float:
    """``"29.5Mbps"`` -> 29.5e6, ``"1234"`` -> 1234, ``"12ms(3.4%)"`` -> 12."""
    m = re.match(r"([0-9.]+)([KMG]?)", text)
    scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]
    return float(m.group(1)) * scale


def parse_ss(text: str) -> list[dict]:
    """Rows of one host's ``ss -tinH`` samples: time, local and peer address, send queue,
    and :data:`FIELDS` where present (rtt, minrtt, mrtt in ms; rates in bit/s)."""
    rows, now, head = [], None, None
    for line in text.splitlines():
        if line.startswith("@ "):
            now = float(line[2:])
        elif line.startswith("# "):         # tc's lines follow, to the next sample
            now, head = None, None
        elif line and not line[0].isspace() and now is not None:
            parts = line.split()
            head = {"time": now, "recv_q": int(parts[0]), "send_q": int(parts[1]),
                    "local": parts[2], "peer": parts[3]}
        elif head is not None and line.strip():
            row = dict(head)
            text_ = " " + line.strip()
            for key in ("rtt", "minrtt", "cwnd", "unacked", "bytes_acked", "bytes_retrans",
                        "busy", "rwnd_limited", "sndbuf_limited"):
                m = re.search(rf" {key}:([0-9.]+[KMG]?)", text_)
                if m:
                    row[key] = _num(m.group(1))
            m = re.search(r" retrans:\d+/(\d+)", text_)
            row["retrans"] = int(m.group(1)) if m else 0
            for key in ("delivery_rate", "pacing_rate"):
                m = re.search(rf" {key} ([0-9.]+[KMG]?)bps", text_)
                if m:
                    row[key] = _num(m.group(1))
            m = re.search(r"bbr:\(bw:([0-9.]+[KMG]?)bps,mrtt:([0-9.]+)", text_)
            if m:
                row["bw"], row["mrtt"] = _num(m.group(1)), float(m.group(2))
            row["app_limited"] = int(" app_limited" in text_)
            row["cc"] = text_.split()[0]
            rows.append(row)
            head = None
    return rows


def parse_tc(text: str) -> list[dict]:
    """Rows of one leaf's ``tc -s qdisc`` samples: time, device, backlog bytes and packets,
    packets sent and dropped so far."""
    rows, now, dev = [], None, None
    for line in text.splitlines():
        if line.startswith("@ "):
            now = float(line[2:])
        elif line.startswith("# "):
            dev = line[2:].strip()
        m = re.search(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+),", line)
        if m and now is not None:
            rows.append({"time": now, "dev": dev, "sent_bytes": int(m.group(1)),
                         "sent_pkts": int(m.group(2)), "dropped": int(m.group(3))})
        m = re.search(r"backlog (\d+)b (\d+)p", line)
        if m and rows and rows[-1]["dev"] == dev and "backlog_bytes" not in rows[-1]:
            rows[-1]["backlog_bytes"], rows[-1]["backlog_pkts"] = int(m.group(1)), \
                int(m.group(2))
    return rows


def congestion_commands(f: cap.Fabric, algo: str) -> list[list[str]]:
    """Every host's connections to the others use ``algo``: its subnet route with
    ``congctl`` (a namespace may not choose an algorithm outside the machine's
    ``tcp_allowed_congestion_control`` by sysctl, but a route's ``congctl`` may)."""
    return [["ip", "-n", f.ns(h), "route", "replace", f"{cap.SUBNET}.0/24", "dev", "eth0",
             "proto", "kernel", "scope", "link", "src", f.addr(h), "congctl", algo]
            for h in f.hosts]


def variant_fabric(f: cap.Fabric, tbf_latency_s: float | None) -> cap.Fabric:
    return f if tbf_latency_s is None else dataclasses.replace(f, tbf_latency_s=tbf_latency_s)


def probe(setups: list[str], variants: list[str], python: str, period_s: float,
          dest: Path) -> None:
    fabric = cap.load_fabric()
    timing = fabric["run"]
    socks, queues, steps = [], [], []
    for setup, variant in ((s, v) for s in setups for v in variants):
        algo, latency = VARIANTS[variant]
        f = variant_fabric(cap.Fabric.of(setup, fabric), latency)
        with cap.built(f):
            for cmd in congestion_commands(f, algo):
                cap.run_command(cmd)
            for run in cap.RUNS:
                print(f"[probe] {setup} {variant}: {run}", file=sys.stderr, flush=True)
                hosts = [h for j in run for h in f.jobs[j][0]]
                with tempfile_dir() as scratch:
                    with sampling(f, hosts, period_s, scratch) as files:
                        out, load = cap.run_once(f, run, python, timing)
                    go = load["go_unix_s"]
                    lo, hi = go + timing["warm_s"], go + timing["warm_s"] + timing["window_s"]
                    tag = {"setup": setup, "variant": variant,
                           "run": "AB" if len(run) > 1 else run}
                    for h in hosts:
                        text = files[h].read_text()
                        for r in parse_tc(text):
                            if lo <= r["time"] <= hi:
                                queues.append({**tag, **r, "dev": f"{h}.eth0",
                                               "time": r["time"] - go})
                        for r in parse_ss(text):
                            if lo <= r["time"] <= hi and r["peer"].rsplit(":", 1)[1] \
                                    not in STORE_PORTS and r["local"].rsplit(":", 1)[1] \
                                    not in STORE_PORTS:
                                socks.append({**tag, "host": h, **r, "time": r["time"] - go})
                    for leaf in ("leaf0", "leaf1"):
                        for r in parse_tc(files[leaf].read_text()):
                            if lo <= r["time"] <= hi:
                                queues.append({**tag, **r, "time": r["time"] - go})
                for job, ts in out.items():
                    xs = [s for _, s in ts]
                    steps.append({**tag, "job": job, "steps": len(xs),
                                  "median_s": round(statistics.median(xs), 6),
                                  "p10_s": round(cap.quantile(xs, 0.1), 6),
                                  "p90_s": round(cap.quantile(xs, 0.9), 6),
                                  "cpu_other_frac": round(load["cpu_other_frac"], 4)})
                    print(f"  {job}: median {steps[-1]['median_s']:.4f} s", file=sys.stderr,
                          flush=True)
        _write(dest / "tcp_probe_samples.csv", socks)      # after each variant
        _write(dest / "tcp_probe_queues.csv", queues)
        _write(dest / "tcp_probe_steps.csv", steps)


@contextmanager
def tempfile_dir():
    import tempfile
    with tempfile.TemporaryDirectory(prefix="cc-probe-") as tmp:
        yield Path(tmp)


def _write(path: Path, rows: list[dict]) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def _read(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _median(rows: list[dict], key: str) -> float:
    xs = [float(r[key]) for r in rows if r.get(key) not in (None, "")]
    return statistics.median(xs) if xs else float("nan")


def _rate_mbit(rows: list[dict]) -> float:
    """Bytes acked per second over the samples (the flow's goodput), Mbit/s."""
    xs = sorted((float(r["time"]), float(r["bytes_acked"])) for r in rows if r.get("bytes_acked"))
    if len(xs) < 2 or xs[-1][0] <= xs[0][0]:
        return float("nan")
    return 8 * (xs[-1][1] - xs[0][1]) / (xs[-1][0] - xs[0][0]) / 1e6


def summary(src: Path) -> list[str]:
    """Per setup, variant, run and host: its step median, the data flow's goodput, srtt,
    cwnd, BBR's bandwidth estimate, how often it was application-limited, retransmits; per
    shaped device: the backlog in its tbf queue."""
    def case(r: dict) -> tuple:
        return r.get("setup", "unequal"), r["variant"], r["run"]
    steps = {(*case(r), r["job"]): r for r in _read(src / "tcp_probe_steps.csv")}
    socks, queues = _read(src / "tcp_probe_samples.csv"), _read(src / "tcp_probe_queues.csv")
    out = ["setup    variant     run host  step s  goodput Mbit/s  srtt ms  cwnd  "
           "bbr bw Mbit/s  app-limited  retrans"]
    for (*key, job), st in steps.items():
        mine = [r for r in socks if list(case(r)) == key and r["host"][0] == job.lower()
                and float(r.get("bytes_acked") or 0) > 0]
        for host in sorted({r["host"] for r in mine}):
            rows = [r for r in mine if r["host"] == host]
            retrans = [float(r["retrans"]) for r in rows]
            out.append(f"{key[0]:8} {key[1]:11} {key[2]:3} {host:4} "
                       f"{float(st['median_s']):7.3f} {_rate_mbit(rows):15.1f} "
                       f"{_median(rows, 'rtt'):8.1f} {_median(rows, 'cwnd'):5.0f} "
                       f"{_median(rows, 'bw') / 1e6:14.1f} "
                       f"{statistics.fmean(float(r['app_limited']) for r in rows):11.2f} "
                       f"{(max(retrans) - min(retrans)) if retrans else 0:8.0f}")
    out.append("setup    variant     run device     backlog median / p90 (KB)  drops")
    for key in dict.fromkeys((*case(r), r["dev"]) for r in queues):
        rows = [r for r in queues if (*case(r), r["dev"]) == key and r["backlog_bytes"] != ""]
        backlog = sorted(float(r["backlog_bytes"]) / 1e3 for r in rows)
        drops = [int(r["dropped"]) for r in rows]
        if max(backlog) > 0 or max(drops) > min(drops):
            out.append(f"{key[0]:8} {key[1]:11} {key[2]:3} {key[3]:10} "
                       f"{statistics.median(backlog):12.1f} / {cap.quantile(backlog, 0.9):8.1f} "
                       f"{max(drops) - min(drops):9d}")
    return out


def table(src: Path) -> list[str]:
    """The README's table: per variant, B's step alone and beside A, its slowdown, goodput,
    the backlog of its own link's queue (b0's) and of the spine's (l0 to l1), and A's
    slowdown (medians over the timed window; goodput the mean of B's two ranks)."""
    steps = {(r["variant"], r["run"], r["job"]): float(r["median_s"])
             for r in _read(src / "tcp_probe_steps.csv")}
    socks, queues = _read(src / "tcp_probe_samples.csv"), _read(src / "tcp_probe_queues.csv")

    def goodput(variant: str, run: str) -> float:
        return statistics.fmean(_rate_mbit([r for r in socks if (r["variant"], r["run"],
                                            r["host"]) == (variant, run, h)
                                            and float(r.get("bytes_acked") or 0) > 0])
                                for h in ("b0", "b1"))

    def backlog(variant: str, run: str, dev: str) -> list[float]:
        return sorted(float(r["backlog_bytes"]) / 1e3 for r in queues if (
            r["variant"], r["run"], r["dev"]) == (variant, run, dev) and r["backlog_bytes"])
    out = []
    for v in dict.fromkeys(r[0] for r in steps):
        b, ab = steps[(v, "B", "B")], steps[(v, "AB", "B")]
        spine = backlog(v, "AB", "spine0")
        out.append(f"| {v} | {b:.3f} | {ab:.3f} | {ab / b:.2f} | {goodput(v, 'B'):.1f} / "
                   f"{goodput(v, 'AB'):.1f} | {statistics.median(backlog(v, 'B', 'b0.eth0')):.0f}"
                   f" / {statistics.median(backlog(v, 'AB', 'b0.eth0')):.0f} | "
                   f"{statistics.median(spine):.0f} / {cap.quantile(spine, 0.9):.0f} | "
                   f"{steps[(v, 'AB', 'A')] / steps[(v, 'A', 'A')]:.2f} |")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank-python", help="a Python with torch (CPU)")
    p.add_argument("--setups", nargs="*", default=["unequal"])
    p.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--period-s", type=float, default=0.1)
    p.add_argument("--dest", type=Path, default=HERE)
    p.add_argument("--summary", action="store_true", help="print what the samples show")
    a = p.parse_args(argv)
    if a.summary:
        print("\n".join(summary(a.dest) + [""] + table(a.dest)))
        return 0
    if not a.rank_python:
        p.error("--rank-python is required to run the probe")
    probe(a.setups, a.variants, a.rank_python, a.period_s, a.dest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
