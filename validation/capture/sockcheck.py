"""Connectivity and link check between rank namespaces with plain Python sockets (no ping).

``serve``: in rank 0's namespace, accept ``--clients`` connections; for each, echo small
messages, then read a bulk payload and answer with one byte. ``probe``: from another rank,
connect, time ``--pings`` 1-byte round trips and one ``--bulk-bytes`` upload; prints one JSON
line ``{"rtt_s": median, "bulk_bit_per_s": ...}``. :func:`check` runs both through
``ip netns exec`` and returns the per-rank results. Standard library only.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

PORT = 29400


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(1 << 20, n - len(buf)))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return bytes(buf)


def _handle(conn: socket.socket, pings: int, bulk: int) -> None:
    with conn:
        for _ in range(pings):
            conn.sendall(_recv_exact(conn, 1))
        left = bulk
        while left:
            chunk = conn.recv(min(1 << 20, left))
            if not chunk:
                raise ConnectionError("peer closed during bulk")
            left -= len(chunk)
        conn.sendall(b"k")


def serve(host: str, clients: int, pings: int, bulk: int, timeout_s: float) -> None:
    with socket.create_server((host, PORT), reuse_port=False) as srv:
        srv.settimeout(timeout_s)
        print("ready", flush=True)
        threads = []
        for _ in range(clients):
            conn, _addr = srv.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t = threading.Thread(target=_handle, args=(conn, pings, bulk))
            t.start()
            threads.append(t)
        for t in threads:
            t.join(timeout_s)


def probe(host: str, pings: int, bulk: int, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sock = socket.create_connection((host, PORT), timeout=timeout_s)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for _ in range(pings):
            t0 = time.perf_counter()
            sock.sendall(b"p")
            _recv_exact(sock, 1)
            rtts.append(time.perf_counter() - t0)
        payload = b"\0" * (1 << 20)
        t0 = time.perf_counter()
        left = bulk
        while left:
            n = min(len(payload), left)
            sock.sendall(payload[:n])
            left -= n
        _recv_exact(sock, 1)
        dt = time.perf_counter() - t0
    return {"rtt_s": statistics.median(rtts) if rtts else None,
            "bulk_bytes": bulk, "bulk_s": dt, "bulk_bit_per_s": bulk * 8 / dt}


def check(plan, pings: int = 20, bulk: int = 4 << 20, timeout_s: float = 30.0) -> list[dict]:
    """Every rank > 0 probes rank 0 (sequentially, so uploads do not share rank 0's link)."""
    from netns import exec_prefix  # sibling module; run from this directory

    if plan.ranks < 2:
        return []
    me = [sys.executable, str(Path(__file__).resolve())]
    args = ["--host", plan.addr(0), "--pings", str(pings), "--bulk", str(bulk),
            "--timeout", str(timeout_s)]
    results = []
    for r in range(1, plan.ranks):
        srv = subprocess.Popen(exec_prefix(plan, 0) + me + ["serve", "--clients", "1"] + args,
                               stdout=subprocess.PIPE, text=True)
        try:
            if srv.stdout.readline().strip() != "ready":
                raise RuntimeError("socket check server did not start")
            out = subprocess.run(exec_prefix(plan, r) + me + ["probe"] + args,
                                 capture_output=True, text=True, timeout=timeout_s * 2)
            if out.returncode != 0:
                raise RuntimeError(f"rank {r} cannot reach rank 0 at {plan.addr(0)}: "
                                   f"{out.stderr.strip()[-300:]}")
            res = json.loads(out.stdout.strip().splitlines()[-1])
            res["rank"] = r
            results.append(res)
            srv.wait(timeout_s)
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()
    return results


def main() -> None:
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["serve", "probe"])
    p.add_argument("--host", required=True)
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--pings", type=int, default=20)
    p.add_argument("--bulk", type=int, default=4 << 20)
    p.add_argument("--timeout", type=float, default=30.0)
    a = p.parse_args()
    if a.mode == "serve":
        serve(a.host, a.clients, a.pings, a.bulk, a.timeout)
    else:
        print(json.dumps(probe(a.host, a.pings, a.bulk, a.timeout)))


if __name__ == "__main__":
    main()
