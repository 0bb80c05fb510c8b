"""Forked worker processes for independent simulations built in this process.

A command that has already built what its simulations read (reliability's degraded fabrics
and stragglers, plan's candidate setups) puts it in a module global and maps over indices
in a pool of forked processes: each child inherits the built objects instead of receiving
them pickled, and sends back only its small result. Every simulation is deterministic, so
the answers are the same numbers whichever process runs them.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor


def fork_pool(workers: int) -> ProcessPoolExecutor | None:
    """A pool of ``workers`` forked processes, or None for fewer than 2 or where processes
    cannot be forked (the caller then runs its simulations here, one after the other)."""
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    return ProcessPoolExecutor(max_workers=workers,
                               mp_context=multiprocessing.get_context("fork"))
