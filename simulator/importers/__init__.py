"""Importers: real profiler traces -> the project's :class:`~simulator.trace.Trace`.

``import_trace("pytorch", files)`` reads PyTorch profiler (Kineto) Chrome traces, one per
rank; ``import_trace("tensorflow", files)`` reads TensorFlow profiler output (``*.xplane.pb``
or the trace JSON TensorBoard writes), one per worker; ``import_trace("chakra", files)``
Chakra execution traces (ASTRA-sim's ``.et``), one per rank (:mod:`.chakra_read`). Each importer reduces every file to
one iteration (:class:`~simulator.importers.ir.RankTrace`); the builder turns it into ops
with dependencies and the ranks are assembled into one Trace. See docs/importers.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..errors import ConfigError
from ..trace.schema import Trace
from .assemble import assemble


def _pytorch(paths: list[Path], step: int | None, sizes: dict[str, int]) -> Trace:
    from .kineto import read_kineto
    from .pytorch import choose_step, rank_trace

    profiles = [read_kineto(p) for p in paths]
    chosen = choose_step(profiles, step)
    return assemble([rank_trace(p, chosen, sizes) for p in profiles], "pytorch")


def _tensorflow(paths: list[Path], step: int | None, sizes: dict[str, int]) -> Trace:
    from .tensorflow import import_tensorflow

    return assemble(import_tensorflow(paths, step, sizes), "tensorflow")


def _chakra(paths: list[Path], step: int | None, sizes: dict[str, int]) -> Trace:
    from .chakra_read import read_chakra    # Chakra traces are one iteration, with sizes

    return read_chakra(paths)


IMPORTERS: dict[str, Callable[..., Trace]] = {"pytorch": _pytorch, "tensorflow": _tensorflow,
                                              "chakra": _chakra}


def import_trace(kind: str, paths, step: int | None = None,
                 collective_bytes: dict[str, int] | None = None) -> Trace:
    """Import profiler files ``paths`` of framework ``kind`` (pytorch or tensorflow).

    ``step``: the iteration to take (``ProfilerStep#N`` / TensorFlow ``step_num``); by
    default a steady-state one. ``collective_bytes``: sizes for collectives whose size the
    profile does not record, by op name or collective (``{"all_reduce": 1 << 20}``).

    :raises ConfigError: naming the file and what is wrong with it.
    """
    if kind not in IMPORTERS:
        raise ConfigError(f"unknown trace kind {kind!r}; choose {', '.join(IMPORTERS)}")
    paths = [Path(p) for p in paths]
    if not paths:
        raise ConfigError("no trace files given")
    return IMPORTERS[kind](paths, step, dict(collective_bytes or {}))


__all__ = ["IMPORTERS", "import_trace"]
