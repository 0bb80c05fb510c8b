"""The input boundary: the first checks on every file and value a user hands clustersim.

Every reader goes through here before it parses anything: :func:`read_bytes` (a regular
file, not a FIFO or a device; at most a size limit), :func:`decode_text` (UTF-8, with a
clear word for a binary or UTF-16 file and the line of a bad byte), and
:func:`check_finite` (no ``inf``/``nan`` anywhere in a parsed document). The YAML layer
(:mod:`simulator.yamlio`) and the trace importers build on these, so a new reader gets the
same guards by calling them: bytes -> checked text -> checked document.

The limits (:data:`LIMITS`) are documented in docs/inputs.md; each can be raised with its
environment variable (``CLUSTERSIM_MAX_YAML_BYTES=4M``...). Every refusal is one
:class:`~simulator.errors.ConfigError` naming the file.
"""

from __future__ import annotations

import contextlib
import gzip
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .units import UnitError, parse_size


@dataclass(frozen=True)
class Limit:
    """A bound on input, overridable by the environment variable ``env``."""

    env: str
    default: int
    what: str                       # what it bounds, as its refusal says it

    def value(self) -> int:
        """The bound in force: one a command option set (:func:`limit_set`), else ``$env``
        when set (a count or a size such as ``64M``), else the default."""
        if self.env in _SET:
            return _SET[self.env]
        text = os.environ.get(self.env, "").strip()
        if not text:
            return self.default
        try:
            value = parse_size(text)
        except UnitError as exc:
            raise ConfigError(f"cannot read {text!r}: {exc}", source=self.env) from None
        if value <= 0:
            raise ConfigError(f"must be > 0, got {text!r}", source=self.env)
        return value


KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
GZIP_MAGIC = b"\x1f\x8b"
RATIO_AFTER_BYTES = 64 * MiB      # small files may compress better than any bomb ratio
LIMITS = {
    "yaml_bytes": Limit("CLUSTERSIM_MAX_YAML_BYTES", 1 * MiB, "bytes in a YAML file"),
    "yaml_depth": Limit("CLUSTERSIM_MAX_YAML_DEPTH", 64, "levels of nesting in a YAML file"),
    "yaml_nodes": Limit("CLUSTERSIM_MAX_YAML_NODES", 200_000,
                        "values in a YAML file, aliases expanded"),
    "config_bytes": Limit("CLUSTERSIM_MAX_CONFIG_BYTES", 1 * MiB,
                          "bytes in a framework config file (TOML, JSON, Megatron arguments)"),
    "config_depth": Limit("CLUSTERSIM_MAX_CONFIG_DEPTH", 32,
                          "levels of nesting in a framework config file"),
    "trace_bytes": Limit("CLUSTERSIM_MAX_TRACE_BYTES", 8 * GiB,
                         "bytes in a trace file after decompression"),
    "trace_file_bytes": Limit("CLUSTERSIM_MAX_TRACE_FILE_BYTES", 2 * GiB,
                              "bytes in a clustersim Trace file (replay) after decompression"),
    "trace_ratio": Limit("CLUSTERSIM_MAX_TRACE_RATIO", 200,
                         "decompressed bytes per compressed byte"),
    "trace_string": Limit("CLUSTERSIM_MAX_TRACE_STRING", 1 * MiB,
                          "bytes in one string or key of a trace"),
    "trace_depth": Limit("CLUSTERSIM_MAX_TRACE_DEPTH", 32, "levels of nesting in a trace"),
    "trace_events": Limit("CLUSTERSIM_MAX_TRACE_EVENTS", 1_000_000, "events in a trace file"),
}
_SET: dict[str, int] = {}        # limits a command-line option set for this process


@contextlib.contextmanager
def limit_set(name: str, value: int | None):
    """Within the block, :data:`LIMITS` ``[name]`` is ``value`` (a command's option such as
    ``import --max-events``; it wins over the environment variable); None: unchanged."""
    env = LIMITS[name].env
    old = _SET.get(env)
    if value is not None:
        _SET[env] = value
    try:
        yield
    finally:
        if old is None:
            _SET.pop(env, None)
        else:
            _SET[env] = old


def limit(name: str) -> int:
    """The bound :data:`LIMITS` ``[name]`` in force."""
    return LIMITS[name].value()


def over_limit(name: str, got: str, source: str, field: str | None = None) -> ConfigError:
    """The refusal of input past :data:`LIMITS` ``[name]``: what was found, the bound, and
    how to raise it."""
    lim = LIMITS[name]
    return ConfigError(f"{got}; the limit is {lim.value():,} {lim.what} (raise it with "
                       f"{lim.env}=N)", source=source, field=field)


MAX_PATH_BYTES, MAX_NAME_BYTES = 4096, 255        # Linux PATH_MAX and NAME_MAX


def path_name(value: Any, field: str | None = None) -> Path:
    """``value`` (a file name a user gave, in a file or an option) as a Path, if the system
    can look it up.

    :raises ConfigError: naming ``field`` for a non-string, a NUL byte, or a name longer
        than the system allows (checking such a path raises instead of saying "no").
    """
    if not isinstance(value, (str, Path)):
        raise ConfigError(f"must be a name or a path, got {type(value).__name__}", field=field)
    raw = os.fsencode(value)
    if b"\0" in raw:
        raise ConfigError("a path cannot hold a NUL byte", field=field)
    if len(raw) > MAX_PATH_BYTES or any(len(p) > MAX_NAME_BYTES for p in raw.split(b"/")):
        raise ConfigError(f"path too long ({len(raw):,} bytes; at most {MAX_PATH_BYTES:,}, "
                          f"{MAX_NAME_BYTES} per name)", field=field)
    return Path(value)


def regular_file(path: str | Path, what: str = "file") -> Path:
    """``path`` if it is a regular file (a link to one is fine).

    :raises ConfigError: naming the file when it is missing, a folder, a FIFO, a device or
        a socket (reading those can block forever or never end).
    """
    path, source = Path(path), str(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"cannot read {what}: no such file", source=source) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror or exc}", source=source) from None
    if stat.S_ISDIR(mode):
        raise ConfigError(f"cannot read {what}: is a folder, not a file", source=source)
    if not stat.S_ISREG(mode):
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
                "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise ConfigError(f"cannot read {what}: {kind}, not a regular file", source=source)
    return path


def read_bytes(path, what: str = "file", limit_name: str = "yaml_bytes") -> bytes:
    """The bytes of the regular file (or importlib resource) ``path``, refused past the
    size limit :data:`LIMITS` ``[limit_name]`` before they are read.

    :raises ConfigError: naming the file, as :func:`regular_file`, for an unreadable file,
        or one over the limit.
    """
    source = str(path)
    if not isinstance(path, (str, Path)):              # an importlib resource (shipped)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read {what}: {exc.strerror or exc}",
                              source=source) from None
    path = regular_file(path, what)
    most = limit(limit_name)
    try:
        with path.open("rb") as fh:
            data = fh.read(most + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror or exc}", source=source) from None
    if len(data) > most:
        raise over_limit(limit_name, f"{what} is larger than {most:,} bytes", source)
    return data


def decode_text(data: bytes, source: str, what: str = "file") -> str:
    """``data`` as UTF-8 text (a UTF-8 byte-order mark dropped).

    :raises ConfigError: naming ``source`` for a UTF-16/32 file, a binary file (NUL bytes)
        or a byte that is not UTF-8 (with its line and column).
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ConfigError(f"{what} is UTF-16 or UTF-32 text; save it as UTF-8", source=source)
    if b"\0" in data:
        raise ConfigError(f"{what} is binary (it holds NUL bytes), not UTF-8 text",
                          source=source)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(f"{what} is not UTF-8 text: byte 0x{data[exc.start]:02x} at line "
                          f"{line}, column {column}", source=source) from None


def read_text(path, what: str = "file") -> str:
    """:func:`read_bytes` then :func:`decode_text`: the checked text of a user's file."""
    return decode_text(read_bytes(path, what), str(path), what)


class BudgetReader:
    """A regular binary file, gunzipped on the fly when it is gzip, that refuses to give
    out more than ``most_bytes`` (default: the limit ``limit_name``) in all, or more than
    ``CLUSTERSIM_MAX_TRACE_RATIO`` bytes per compressed byte once 64 MiB are out (a gzip
    bomb: 10 GiB of zeros in 10 MB)."""

    def __init__(self, path: Path, most_bytes: int | None = None,
                 limit_name: str = "trace_bytes"):
        self.source = str(path)
        self._raw = regular_file(path, "trace file").open("rb")
        self.gzip = self._raw.read(2) == GZIP_MAGIC
        self._raw.seek(0)
        self._fh = gzip.GzipFile(fileobj=self._raw, mode="rb") if self.gzip else self._raw
        self._most = most_bytes or limit(limit_name)
        self._limit_name = limit_name
        self._ratio = limit("trace_ratio")
        self.out_bytes = 0

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            return self.read_all()
        data = self._fh.read(n)
        self.out_bytes += len(data)
        if self.out_bytes > self._most:
            raise over_limit(self._limit_name, f"more than {self._most:,} bytes "
                             f"(decompressed)", self.source)
        if self.gzip and self.out_bytes > RATIO_AFTER_BYTES:
            packed = max(self._raw.tell(), 1)
            if self.out_bytes > self._ratio * packed:
                raise over_limit("trace_ratio", f"{packed:,} compressed bytes decompress to "
                                 f"more than {self.out_bytes:,} (a decompression bomb?)",
                                 self.source)
        return data

    def read_all(self, chunk: int = 1 << 20) -> bytes:
        parts = []
        while True:
            data = self.read(chunk)
            if not data:
                return b"".join(parts)
            parts.append(data)

    def close(self) -> None:
        self._fh.close()
        self._raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_finite(data: Any, source: str, prefix: str = "") -> Any:
    """``data`` (a parsed document) if no number in it is ``inf`` or ``nan``.

    :raises ConfigError: naming the dotted key of the first such number.
    """
    stack = [(prefix, data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"must be a finite number, got {value}", source=source,
                              field=where or None)
        if isinstance(value, dict):
            stack.extend((_join(where, k), v) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(value))))
    return data


def _join(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)
