"""Where a study's points run: this process, local worker processes, or a Dask cluster.

Each executor maps a function over points and yields ``(point, result)`` as points finish,
in any order; ``result`` is the function's value or the exception that stopped the point
outside it (a worker process that died, a cancelled task). Creating a Dask executor
connects to the scheduler first, so an unreachable one fails within
:data:`CONNECT_TIMEOUT_S` before anything is written.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Callable, Iterator

from ..errors import ConfigError

CONNECT_TIMEOUT_S = 5.0
WORKERS_TIMEOUT_S = 30.0
EXIT_PARENT_GONE = 3              # a local worker's exit status when the study died
_DASK = re.compile(r"^dask://(?P<host>[^:/\s]+):(?P<port>\d{1,5})$")
_PRELOAD = ["simulator.study.commands", "simulator.pipeline"]


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                    # not on Linux
        return os.cpu_count() or 1


class SerialExecutor:
    """Points one after the other in this process (``--workers 1``)."""

    def __init__(self):
        self.description = "local, 1 process"

    def run(self, fn: Callable, points: list[dict]) -> Iterator[tuple[dict, object]]:
        for p in points:
            yield p, fn(p)

    def close(self) -> None:
        pass


class ProcessExecutor:
    """Local worker processes (forked from a server that has imported the simulator), each
    ending as soon as this process ends, however it ends (:func:`end_with_parent`)."""

    def __init__(self, workers: int):
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                                        initializer=end_with_parent)
        self.description = f"local, {workers} processes"

    def run(self, fn: Callable, points: list[dict]) -> Iterator[tuple[dict, object]]:
        pending = {self.pool.submit(fn, p): p for p in points}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                point = pending.pop(fut)
                exc = fut.exception()
                yield point, exc if exc is not None else fut.result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def end_with_parent() -> None:
    """In a worker process: end it, at once, when the process that started it is gone.

    The pool's workers otherwise outlive a parent killed with ``kill -9`` (each holds both
    ends of its task queue, so it never sees end-of-file and waits, or computes, forever).
    multiprocessing gives every child a parent sentinel: the read end of a pipe whose only
    write end is held by the parent (the forkserver and the other workers do not have it),
    so the kernel closes it when the parent dies, for any reason. A daemon thread waits on
    it and exits the process: no polling, no process id that could be reused, no
    Linux-only ``prctl`` (whose death signal would follow the forkserver, the worker's
    parent in the kernel's eyes, not the study).
    """
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_after, args=(parent,), daemon=True,
                         name="clustersim-parent-watch").start()


def _exit_after(parent) -> None:
    parent.join()                 # returns when the sentinel reads end-of-file
    os._exit(EXIT_PARENT_GONE)


class DaskExecutor:
    """Tasks on an existing Dask distributed scheduler (``dask://HOST:PORT``)."""

    def __init__(self, address: str, connect_timeout_s: float = CONNECT_TIMEOUT_S):
        from distributed import Client
        self.address = address
        try:
            self.client = Client(address, timeout=connect_timeout_s, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise ConfigError(f"cannot reach the Dask scheduler at {address} within "
                              f"{connect_timeout_s:g} s ({' '.join(str(exc).split())}); start "
                              f"one with `dask scheduler` (docs/studies.md)",
                              field="--executor") from None
        try:
            self.client.wait_for_workers(1, timeout=WORKERS_TIMEOUT_S)
        except (OSError, TimeoutError):
            self.client.close()
            raise ConfigError(f"the Dask scheduler at {address} has no workers after "
                              f"{WORKERS_TIMEOUT_S:g} s; start some with `dask worker "
                              f"{address}`", field="--executor") from None
        self._check_environment()
        n = len(self.client.scheduler_info().get("workers", {}))
        self.description = f"dask, {address}, {n} worker(s) at start"

    def _check_environment(self) -> None:
        """One probe task: the scheduler unpickles tasks and the workers run them, so both
        need this clustersim; failing here beats every point failing the same way."""
        from .. import __version__
        try:
            theirs = self.client.submit(clustersim_version, pure=False).result(
                timeout=WORKERS_TIMEOUT_S)
        except Exception as exc:             # noqa: BLE001 (any failure says the same)
            self.client.close()
            cause = exc.__cause__ or exc
            raise ConfigError(f"the Dask cluster at {self.address} cannot run clustersim "
                              f"({type(cause).__name__}: {' '.join(str(cause).split())[:200]}); "
                              f"install the same clustersim on the scheduler and every worker",
                              field="--executor") from None
        if theirs != __version__:
            self.client.close()
            raise ConfigError(f"the Dask workers at {self.address} run clustersim {theirs}, "
                              f"this is {__version__}; install the same version",
                              field="--executor")

    def run(self, fn: Callable, points: list[dict]) -> Iterator[tuple[dict, object]]:
        from distributed import as_completed
        futures = {self.client.submit(fn, p, pure=False): p for p in points}
        try:
            with self.client.as_current():
                finished = as_completed(list(futures))
            for fut in finished:
                point = futures[fut]
                try:
                    yield point, fut.result()
                except Exception as exc:      # noqa: BLE001 (the task died, not the point)
                    yield point, exc
        finally:
            self.client.cancel([f for f in futures if not f.done()])

    def close(self) -> None:
        self.client.close()


def clustersim_version() -> str:
    """The version of clustersim where this runs (the Dask probe task)."""
    from .. import __version__
    return __version__


def make_executor(spec: str, workers: int | None, n_points: int):
    """``local`` (``workers`` processes, default min(cores, points)) or ``dask://HOST:PORT``.

    :raises ConfigError: (field ``--executor`` or ``--workers``) for a bad spec, workers
        with Dask, or an unreachable scheduler.
    """
    if spec == "local":
        n = workers if workers is not None else max(1, min(cores(), n_points))
        if n < 1:
            raise ConfigError(f"must be >= 1, got {n}", field="--workers")
        return SerialExecutor() if n == 1 else ProcessExecutor(n)
    match = _DASK.match(spec)
    if not match or not 0 < int(match["port"]) < 65536:
        raise ConfigError(f"expected local or dask://HOST:PORT (e.g. dask://10.0.0.5:8786), "
                          f"got {spec!r}", field="--executor")
    if workers is not None:
        raise ConfigError("applies only to --executor local; a Dask cluster runs as many "
                          "points at once as it has worker threads", field="--workers")
    return DaskExecutor(f"tcp://{match['host']}:{match['port']}")
