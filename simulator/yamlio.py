"""Reading YAML files people write: one error line naming the file, never a traceback.

Every user-facing YAML file (topologies, scenarios, model files, catalogs, calibration and
validation cases) is read here, so they all fail the same way: a missing file, malformed
YAML (with the line) and a key repeated in one mapping (YAML would silently keep the last).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated in one mapping."""


class _DuplicateKey(Exception):
    def __init__(self, key, line):
        super().__init__(key, line)
        self.key, self.line = key, line


def _construct_unique(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise _DuplicateKey(key, key_node.start_mark.line + 1)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _construct_unique)


def read_yaml(path, what: str = "file") -> Any:
    """The YAML document at ``path`` (a path or an importlib resource).

    :raises ConfigError: (source = the file) ``cannot read <what>`` for an unreadable file,
        ``malformed YAML at line N`` or ``duplicate key``.
    """
    source = str(path)
    try:
        text = path.read_text() if hasattr(path, "read_text") else Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror or exc}", source=source) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except _DuplicateKey as exc:
        raise ConfigError(f"duplicate key {exc.key!r} at line {exc.line} (YAML would silently "
                          f"keep only the last one)", source=source,
                          field=str(exc.key)) from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else "?"
        raise ConfigError(f"malformed YAML at line {line}: {exc.problem or exc.context}",
                          source=source) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"malformed YAML: {' '.join(str(exc).split())}",
                          source=source) from None


def write_yaml(path, data: Any, header: str = "") -> Path:
    """Write ``data`` as YAML (keys in insertion order) after a ``header`` comment block,
    creating the folder; a failure is one ConfigError naming the file."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(header + yaml.safe_dump(data, sort_keys=False, width=100))
    except OSError as exc:
        raise ConfigError(f"cannot write: {exc.strerror or exc}", source=str(path)) from None
    return path
