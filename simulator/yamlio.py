"""Reading YAML files people write: one error line naming the file, never a traceback.

Every user-facing YAML file (topologies, scenarios, model files, catalogs, calibration and
validation cases, studies) and every ``--set`` value is read here, on top of the input
boundary (:mod:`simulator.inputs`: a regular file, a size limit, UTF-8), so they all fail
the same way: a missing file, malformed YAML (with the line), a key repeated in one mapping
(YAML would silently keep the last), a key that is a list or a mapping, nesting deeper than
a limit, more values than a limit once aliases are expanded (a "billion laughs" bomb), and
a number that is ``inf`` or ``nan``. A number in exponent form without a dot or an
exponent sign (``1e300``, ``3e-4``, ``2E9``) is read as the float YAML 1.2 and JSON make
of it, not as the string YAML 1.1 does (and written back quoted where it is a string). Call :func:`read_yaml` for a file, :func:`load_yaml`
for text already read, :func:`parse_value` for one command-line value.

The package's own data files (``simulator/data/``: catalogs, calibrations, some 40 of them
read by every run) are parsed by libyaml's C parser where PyYAML has it, about 5x faster:
it makes the events, while composing them, the limits, the key checks and the values stay
in Python (a test checks that every shipped data file reads the same both ways). Whatever
it refuses is read again by the pure-Python parser, so an error is worded as always. Files
people write keep the pure-Python parser alone: libyaml accepts some documents it refuses
(a tab in some places), and their errors and verdicts stay what they were. The package's
files' parsed values are also kept beside them as Python keeps bytecode
(:mod:`simulator.parsedcache`), so a run parses one only after its text changed; so are the
shipped scenarios' and topologies' (parsed as files people write). PyYAML itself
(:mod:`simulator.yamlparse`) is imported only once something is parsed, so a run whose
files all come from those caches never loads it.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import parsedcache
from .errors import ConfigError
from .inputs import check_finite, read_text
from .outpaths import atomic_write_text

SHIPPED_DATA = str(Path(__file__).resolve().parent / "data") + os.sep


def read_yaml(path, what: str = "file") -> Any:
    """The YAML document at ``path`` (a path or an importlib resource), through the input
    boundary (:func:`simulator.inputs.read_text`) and :func:`load_yaml`.

    :raises ConfigError: (source = the file) as :func:`simulator.inputs.read_bytes` and
        :func:`simulator.inputs.decode_text`, or as :func:`load_yaml`.
    """
    source = str(path)
    text = read_text(path, what)
    if source.startswith(SHIPPED_DATA):
        return parsedcache.parsed(source, text, lambda: load_yaml(text, source, shipped=True))
    if source.startswith(shipped_inputs()):
        return parsedcache.parsed(source, text, lambda: load_yaml(text, source))
    return load_yaml(text, source)


@lru_cache(maxsize=1)
def shipped_inputs() -> tuple[str, ...]:
    """The folders of the scenarios and topologies the package ships (the repository's and
    a wheel's copy, :mod:`simulator.shipped`): their files are parsed as files people write
    (the pure-Python parser, its errors), and their values kept as the data files' are."""
    from .shipped import packaged_dir, source_dir
    return tuple(str(where(kind).resolve()) + os.sep for kind in ("scenarios", "topologies")
                 for where in (source_dir, packaged_dir))


def load_yaml(text: str, source: str, field: str | None = None, shipped: bool = False) -> Any:
    """The checked YAML document ``text`` read from ``source`` (``shipped``: a file of
    ``simulator/data/``, parsed by libyaml where there is one).

    :raises ConfigError: (naming ``source`` and ``field``) ``malformed YAML at line N``,
        ``duplicate key``, a key that is not a string or a number, nesting past
        ``CLUSTERSIM_MAX_YAML_DEPTH``, more values than ``CLUSTERSIM_MAX_YAML_NODES`` with
        aliases expanded, or an ``inf``/``nan`` number (with its dotted key).
    """
    from . import yamlparse             # PyYAML only once something is parsed
    return check_finite(yamlparse.load(text, source, field, shipped), source, field or "")


def parse_value(text: str, source: str, field: str) -> Any:
    """A command-line value (``--set KEY=VALUE``) read as YAML with :func:`load_yaml`'s
    checks; text that is not YAML at all stays the string it is."""
    from . import yamlparse
    return load_yaml(text, source, field) if yamlparse.is_yaml(text) else text


def write_yaml(path, data: Any, header: str = "") -> Path:
    """Write ``data`` as YAML (keys in insertion order) after a ``header`` comment block,
    creating the folder; a failure is one ConfigError naming the file."""
    from . import yamlparse
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, header + yamlparse.dump(data))
    except OSError as exc:
        raise ConfigError(f"cannot write: {exc.strerror or exc}", source=str(path)) from None
    return path


def data_file(name: str):
    """The shipped data file (or folder) ``simulator/data/<name>``, found from the
    package's own folder (not ``simulator.data``'s namespace reader, which lists the
    folder at every lookup)."""
    from importlib import resources
    return resources.files("simulator") / "data" / name
