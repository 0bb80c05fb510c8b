"""Network namespaces with shaped links, one per rank, for capturing real distributed runs.

Layout (a one-switch star, like ranks on one leaf switch)::

    ns <prefix>-r0: eth0 198.18.0.1/24 ─veth─ <prefix>r0h ┐
    ns <prefix>-r1: eth0 198.18.0.2/24 ─veth─ <prefix>r1h ┼─ br0 in ns <prefix>-hub
    ...                                                   ┘

Each rank's link is shaped in both directions with ``tc qdisc ... tbf`` (rank egress on
``eth0``, rank ingress on the hub end of its veth), optionally behind a ``netem delay``.
Addresses come from 198.18.0.0/15, the range RFC 2544 reserves for benchmarking; no packet
leaves the namespaces.

Command construction is pure (:func:`setup_commands`, :func:`teardown_commands`,
:func:`exec_prefix`), so it is unit-tested without root. :func:`shaped_network` runs them
and removes everything it created on exit, on an exception, and on SIGTERM/SIGINT/SIGHUP.
Standard library only.
"""

from __future__ import annotations

import re
import signal
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

IFNAMSIZ = 15  # Linux interface names are at most 15 characters
_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}


def parse_rate_bit_per_s(text: str) -> float:
    """``"10gbit"`` -> 1e10, ``"200mbit"`` -> 2e8 (tc's decimal bit units; unit required)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]+)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"rate(={text!r}) must be a number with a unit in "
                         f"{sorted(_UNITS)}, e.g. '1gbit'")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise ValueError(f"rate(={text!r}) must be > 0")
    return value


def rate_label(rate_bit_per_s: float) -> str:
    """1e10 -> ``"10gbit"``, 2e8 -> ``"200mbit"`` (exact tc string, also used in file names)."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        q = rate_bit_per_s / scale
        if q >= 1 and abs(q - round(q)) < 1e-9:
            return f"{int(round(q))}{unit}"
    return f"{int(round(rate_bit_per_s))}bit"


@dataclass(frozen=True)
class LinkShape:
    """How each rank's link is shaped (both directions).

    ``burst_bytes`` defaults to max(64 KiB, 1 ms of traffic at the rate): tbf needs a bucket
    of at least one GSO super-packet, and one timer tick's worth to reach the rate.
    ``tbf_latency_s`` is tbf's queueing limit (how long a packet may wait), not a delay.
    ``delay_s`` is a one-way propagation delay per direction added with netem (0: none).
    """

    rate_bit_per_s: float
    burst_bytes: int | None = None
    tbf_latency_s: float = 0.05
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.rate_bit_per_s <= 0:
            raise ValueError(f"rate_bit_per_s(={self.rate_bit_per_s}) must be > 0")
        if self.burst_bytes is not None and self.burst_bytes < 1600:
            raise ValueError(f"burst_bytes(={self.burst_bytes}) must be >= 1600 (one MTU)")
        if self.tbf_latency_s <= 0:
            raise ValueError(f"tbf_latency_s(={self.tbf_latency_s}) must be > 0")
        if self.delay_s < 0:
            raise ValueError(f"delay_s(={self.delay_s}) must be >= 0")

    @property
    def burst(self) -> int:
        if self.burst_bytes is not None:
            return self.burst_bytes
        return max(64 * 1024, int(self.rate_bit_per_s / 8 * 1e-3))

    def qdisc_commands(self, ns: str, dev: str) -> list[list[str]]:
        """``tc`` argv lists that shape egress of ``dev`` inside namespace ``ns``."""
        tbf = ["tbf", "rate", f"{int(self.rate_bit_per_s)}bit", "burst", str(self.burst),
               "latency", f"{self.tbf_latency_s * 1e3:g}ms"]
        base = ["tc", "-n", ns, "qdisc", "add", "dev", dev]
        if self.delay_s == 0:
            return [base + ["root", "handle", "1:"] + tbf]
        netem = ["netem", "delay", f"{self.delay_s * 1e6:g}us", "limit", "100000"]
        return [base + ["root", "handle", "1:"] + netem,
                base + ["parent", "1:1", "handle", "10:"] + tbf]


@dataclass(frozen=True)
class NetnsPlan:
    """Names and addresses of one star of ``ranks`` namespaces (validated on creation)."""

    ranks: int
    shape: LinkShape | None = None
    prefix: str = "cs"
    subnet: str = "198.18.0"
    bridge: str = "br0"
    rank_dev: str = "eth0"
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.ranks <= 200:
            raise ValueError(f"ranks(={self.ranks}) must be in 1..200")
        if not re.fullmatch(r"[a-z][a-z0-9]{0,5}", self.prefix):
            raise ValueError(f"prefix(={self.prefix!r}) must be 1-6 lowercase letters/digits, "
                             "starting with a letter")
        if not re.fullmatch(r"\d{1,3}\.\d{1,3}\.\d{1,3}", self.subnet):
            raise ValueError(f"subnet(={self.subnet!r}) must be the first three octets of a /24")

    @property
    def hub(self) -> str:
        return f"{self.prefix}-hub"

    def ns(self, rank: int) -> str:
        self._check_rank(rank)
        return f"{self.prefix}-r{rank}"

    def hub_dev(self, rank: int) -> str:
        self._check_rank(rank)
        name = f"{self.prefix}r{rank}h"
        assert len(name) <= IFNAMSIZ
        return name

    def addr(self, rank: int) -> str:
        self._check_rank(rank)
        return f"{self.subnet}.{rank + 1}"

    def namespaces(self) -> list[str]:
        return [self.ns(r) for r in range(self.ranks)] + [self.hub]

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.ranks:
            raise ValueError(f"rank(={rank}) must be in 0..{self.ranks - 1}")


def setup_commands(plan: NetnsPlan) -> list[list[str]]:
    """Every command that builds ``plan``, in order (hub and bridge, then one veth per rank)."""
    hub, br = plan.hub, plan.bridge
    cmds = [["ip", "netns", "add", hub],
            ["ip", "-n", hub, "link", "set", "lo", "up"],
            ["ip", "-n", hub, "link", "add", br, "type", "bridge"],
            ["ip", "-n", hub, "link", "set", br, "up"]]
    for r in range(plan.ranks):
        ns, hdev, rdev = plan.ns(r), plan.hub_dev(r), plan.rank_dev
        cmds += [["ip", "netns", "add", ns],
                 ["ip", "-n", ns, "link", "set", "lo", "up"],
                 # created inside the hub with its peer inside the rank namespace, so an
                 # interruption never leaves an interface in the root namespace
                 ["ip", "-n", hub, "link", "add", hdev, "type", "veth",
                  "peer", "name", rdev, "netns", ns],
                 ["ip", "-n", hub, "link", "set", hdev, "master", br],
                 ["ip", "-n", hub, "link", "set", hdev, "up"],
                 ["ip", "-n", ns, "addr", "add", f"{plan.addr(r)}/24", "dev", rdev],
                 ["ip", "-n", ns, "link", "set", rdev, "up"]]
        if plan.shape is not None:
            cmds += plan.shape.qdisc_commands(ns, rdev)
            cmds += plan.shape.qdisc_commands(hub, hdev)
    return cmds


def teardown_commands(plan: NetnsPlan) -> list[list[str]]:
    """Commands that remove ``plan`` (deleting a namespace removes its veths and qdiscs)."""
    return [["ip", "netns", "del", ns] for ns in plan.namespaces()]


def exec_prefix(plan: NetnsPlan, rank: int, cpus: str | None = None) -> list[str]:
    """argv prefix that runs a command in ``rank``'s namespace, pinned to ``cpus`` if given."""
    argv = ["ip", "netns", "exec", plan.ns(rank)]
    if cpus is not None:
        argv += ["taskset", "-c", str(cpus)]
    return argv


def existing_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def qdiscs_in(ns: str) -> str:
    return subprocess.run(["tc", "-n", ns, "qdisc", "show"], capture_output=True, text=True,
                          check=False).stdout


def run_command(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(argv)}: "
                           f"{proc.stderr.strip()}")
    return proc


def _kill_namespace_processes(ns: str) -> None:
    """SIGKILL the processes still inside ``ns`` (all started by this helper's caller)."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    for pid in out.stdout.split():
        subprocess.run(["kill", "-9", pid], capture_output=True)


def teardown(plan: NetnsPlan, runner: Callable = run_command) -> None:
    if runner is run_command:
        for ns in plan.namespaces():
            _kill_namespace_processes(ns)
    for cmd in teardown_commands(plan):
        runner(cmd, check=False)


class _Interrupted(BaseException):
    """Raised from a signal handler so ``finally`` blocks run (SIGTERM, SIGHUP)."""


@contextmanager
def shaped_network(plan: NetnsPlan, runner: Callable = run_command) -> Iterator[NetnsPlan]:
    """Create ``plan``'s namespaces, links and qdiscs; remove them all on any exit.

    Leftovers of an earlier run with the same names are removed first. SIGTERM and SIGHUP
    raise inside the ``with`` body so teardown still runs; SIGINT already does.
    """
    def _raise(signum, _frame):
        raise _Interrupted(f"signal {signum}")

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            previous[sig] = signal.signal(sig, _raise)
        except ValueError:  # not the main thread: leave handlers alone
            pass
    try:
        teardown(plan, runner)
        for cmd in setup_commands(plan):
            runner(cmd, check=True)
        yield plan
    finally:
        teardown(plan, runner)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(description="create or remove shaped rank namespaces")
    p.add_argument("action", choices=["up", "down", "show", "print"])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rate", default=None, help="e.g. 1gbit; omit for unshaped links")
    p.add_argument("--delay-us", type=float, default=0.0)
    p.add_argument("--prefix", default="cs")
    a = p.parse_args(argv)
    shape = (LinkShape(parse_rate_bit_per_s(a.rate), delay_s=a.delay_us * 1e-6)
             if a.rate else None)
    plan = NetnsPlan(a.ranks, shape, prefix=a.prefix)
    if a.action == "print":
        for cmd in setup_commands(plan):
            print(" ".join(cmd))
    elif a.action == "up":
        for cmd in setup_commands(plan):
            run_command(cmd)
    elif a.action == "down":
        teardown(plan)
    else:
        for ns in plan.namespaces():
            print(ns, qdiscs_in(ns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
