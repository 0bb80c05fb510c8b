"""The parsed contents of the package's own data files, kept beside them as Python keeps
bytecode (start-up, docs/speed.md).

Every run reads a dozen of ``simulator/data/``'s YAML files (catalogs, calibrations, NCCL
constants): parsing them took 30-45 ms of the quick start's ~0.35 s, where reading back
the values :mod:`marshal` wrote takes under 1 ms. So the values of a shipped file, once
parsed and checked, are written to ``__pycache__/<name>.<cache tag>.marshal`` beside it (or
under ``PYTHONPYCACHEPREFIX``), with the SHA-256 of the text they came from: a file whose
text has changed since is parsed again, as Python recompiles a module. The same rules as
bytecode: nothing is written where ``PYTHONDONTWRITEBYTECODE`` is set, a folder that cannot
be written is left as it is (silently: only slower), and a cache file that cannot be read
or holds values marshal cannot is ignored. Only the package's own files take this path
(:func:`simulator.yamlio.read_yaml`: its data files, and the scenarios and topologies it
ships); files people write are parsed every time.
"""

from __future__ import annotations

import hashlib
import marshal
import sys
from pathlib import Path
from typing import Any, Callable

from .errors import ConfigError
from .outpaths import atomic_write_bytes


def cache_path(source: str) -> Path:
    """Where the parsed values of the file ``source`` are kept: its folder's
    ``__pycache__``, or the same folder under ``sys.pycache_prefix`` as Python's bytecode."""
    path = Path(source).resolve()
    name = f"{path.name}.{sys.implementation.cache_tag}.marshal"
    if sys.pycache_prefix:
        return Path(sys.pycache_prefix, *path.parent.parts[1:], name)
    return path.parent / "__pycache__" / name


def parsed(source: str, text: str, parse: Callable[[], Any]) -> Any:
    """``parse()``'s values for ``text`` (the file ``source``), from the cache when it holds
    them for this very text; otherwise parsed, and stored when bytecode may be written."""
    digest = hashlib.sha256(text.encode()).digest()
    where = cache_path(source)
    try:
        stored, data = marshal.loads(where.read_bytes())
        if stored == digest:
            return data
    except (OSError, EOFError, ValueError, TypeError):
        pass                             # none yet, or unreadable: parsed below
    data = parse()
    if not sys.dont_write_bytecode:
        _store(where, digest, data)
    return data


def _store(where: Path, digest: bytes, data: Any) -> None:
    """Write (digest, data) to ``where``; values marshal cannot hold, or a folder that
    cannot be written, leave it unwritten."""
    try:
        blob = marshal.dumps((digest, data))
        where.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(where, blob)
    except (ValueError, OSError, ConfigError):
        pass


def fresh_copy(data: Any) -> Any:
    """A deep copy of parsed values: marshal's round trip (in C, types and key order kept)
    where they are all of marshal's kinds, as every parsed YAML document of plain values is;
    :func:`copy.deepcopy` otherwise (a date, say). ~20x faster than deepcopy alone, which
    took ~2% of the quick start copying the NCCL constants for each reader (docs/speed.md)."""
    try:
        return marshal.loads(marshal.dumps(data))
    except ValueError:                   # a value marshal cannot hold
        import copy
        return copy.deepcopy(data)
