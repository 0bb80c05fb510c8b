"""Start one process per rank inside its namespace, pinned; kill them all on any failure.

Standard library only. Each rank runs in its own session (process group) so a failure,
a timeout or an interrupt ends every rank and its children, and nothing else.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from netns import NetnsPlan, exec_prefix


def cpu_for_rank(rank: int, ncpu: int | None = None) -> str:
    """Round-robin pinning: rank r on core r mod ncpu (4 ranks on 2 cores: two per core)."""
    ncpu = ncpu or os.cpu_count() or 1
    return str(rank % ncpu)


def read_loadavg() -> tuple[float, float, float]:
    one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    return float(one), float(five), float(fifteen)


def read_cpu_jiffies() -> tuple[int, int]:
    """(busy, steal) jiffies of all CPUs since boot, from /proc/stat (busy excludes idle,
    iowait and steal)."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (f + [0] * 8)[:8]
    return user + nice + system + irq + softirq, steal


def own_cpu_s() -> float:
    """CPU seconds of this process plus its reaped children (the ranks, once waited for)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


class LoadSampler:
    """While in use: the 1-minute load average every ``period_s`` (it counts our own ranks
    too, and lags by about a minute), and the CPU time spent by *other* processes: all busy
    CPU time minus this process's and its reaped children's. The kernel's network work on
    behalf of our ranks (softirq) is not charged to them, so ``cpu_other_frac`` is an upper
    bound on interference, as a fraction of all CPUs over the wall time."""

    def __init__(self, period_s: float = 2.0):
        self.period_s = period_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(read_loadavg()[0])
            self._stop.wait(self.period_s)

    def __enter__(self) -> "LoadSampler":
        self.before = read_loadavg()[0]
        self._t0, self._own0, self._jif0 = time.monotonic(), own_cpu_s(), read_cpu_jiffies()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.after = read_loadavg()[0]
        wall = time.monotonic() - self._t0
        busy, steal = (b - a for a, b in zip(self._jif0, read_cpu_jiffies()))
        hz, ncpu = os.sysconf("SC_CLK_TCK"), os.cpu_count() or 1
        other = max(0.0, busy / hz - (own_cpu_s() - self._own0))
        self.cpu_other_frac = other / (wall * ncpu) if wall > 0 else 0.0
        self.cpu_steal_frac = steal / hz / (wall * ncpu) if wall > 0 else 0.0

    def summary(self) -> dict:
        s = self.samples or [self.before]
        return {"loadavg_1m_before": self.before, "loadavg_1m_mean": sum(s) / len(s),
                "loadavg_1m_max": max(s), "loadavg_1m_after": self.after,
                "cpu_other_frac": self.cpu_other_frac, "cpu_steal_frac": self.cpu_steal_frac}


@dataclass
class RankResult:
    rank: int
    returncode: int | None
    log: Path


class RanksFailed(RuntimeError):
    pass


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def run_ranks(plan: NetnsPlan, argv_for: Callable[[int], Sequence[str]],
              env_for: Callable[[int], dict], log_dir: Path, timeout_s: float,
              pin: bool = True) -> list[RankResult]:
    """Run every rank to completion; raise :class:`RanksFailed` (after killing the rest) if
    one exits non-zero or the job outlives ``timeout_s``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    procs, logs = [], []
    try:
        for r in range(plan.ranks):
            log = log_dir / f"rank{r}.log"
            logs.append(log)
            cpus = cpu_for_rank(r) if pin else None
            with open(log, "w") as fh:
                procs.append(subprocess.Popen(
                    exec_prefix(plan, r, cpus) + list(argv_for(r)),
                    env={**os.environ, **env_for(r)}, stdout=fh, stderr=subprocess.STDOUT,
                    start_new_session=True))
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in procs):
            bad = [i for i, p in enumerate(procs) if p.poll() not in (None, 0)]
            if bad:
                raise RanksFailed(f"rank {bad[0]} exited with {procs[bad[0]].returncode}; "
                                  f"log tail:\n{_tail(logs[bad[0]])}")
            if time.monotonic() > deadline:
                raise RanksFailed(f"job did not finish in {timeout_s:.0f} s")
            time.sleep(0.2)
        bad = [i for i, p in enumerate(procs) if p.returncode != 0]
        if bad:
            raise RanksFailed(f"rank {bad[0]} exited with {procs[bad[0]].returncode}; "
                              f"log tail:\n{_tail(logs[bad[0]])}")
        return [RankResult(r, p.returncode, logs[r]) for r, p in enumerate(procs)]
    finally:
        for p in procs:
            _kill_group(p)


def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"
