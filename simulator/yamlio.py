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
(:mod:`simulator.parsedcache`), so a run parses one only after its text changed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from . import parsedcache
from .errors import ConfigError
from .inputs import check_finite, limit, over_limit, read_text
from .outpaths import atomic_write_text


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a repeated or unhashable key, deep nesting and alias bombs."""

    def __init__(self, stream):
        super().__init__(stream)
        self._start_counts()

    def _start_counts(self):
        self._depth, self._nodes = 0, 0
        self._max_depth, self._max_nodes = limit("yaml_depth"), limit("yaml_nodes")
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent, index):
        alias = self.check_event(yaml.events.AliasEvent)
        mark = self.peek_event().start_mark
        self._depth += 1
        if self._depth > self._max_depth:
            raise _Refused("yaml_depth", "nested too deeply", mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if alias and id(node) not in self._sizes:
            raise _Refused(None, "an alias inside the value it names (a recursive "
                           "document)", mark)
        size = self._sizes.setdefault(id(node), self._size(node))
        self._nodes += size if alias else 1
        if self._nodes > self._max_nodes:
            raise _Refused("yaml_nodes", "too many values once aliases are expanded (an "
                           "alias bomb?)", mark)
        return node

    def _size(self, node) -> int:
        """Values ``node`` stands for with its aliases expanded (its children are done)."""
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            return 1
        return 1 + sum(self._sizes.get(id(child), 1) for child in children)


# YAML 1.1 needs a dot and a signed exponent in a float ("1.0e+300"); YAML 1.2 and JSON
# read 1e300, 3e-4 and 2E9 as numbers too, as people write them.
EXPONENT_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT,
                                       list("-+0123456789"))


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes a string the loader above would read as a number."""


_Dumper.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+0123456789"))


try:                                    # PyYAML built with libyaml (its wheels are)
    from yaml.cyaml import CParser as _CParser
except ImportError:                     # pragma: no cover - a PyYAML without libyaml
    _CParser = None

if _CParser is not None:
    class _FastLoader(_CParser, _UniqueKeyLoader):
        """:class:`_UniqueKeyLoader` on libyaml's parser: the events come from C, the nodes
        from :class:`_UniqueKeyLoader`'s composer (with its limits), the values from its
        constructor."""

        check_node, get_node = Composer.check_node, Composer.get_node
        get_single_node = Composer.get_single_node

        def __init__(self, stream):
            _CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self._start_counts()
else:                                   # pragma: no cover
    _FastLoader = None


SHIPPED_DATA = str(Path(__file__).resolve().parent / "data") + os.sep


def _parse(text: str, shipped: bool) -> Any:
    """The document ``text``: a ``shipped`` data file by :class:`_FastLoader` where there is
    one; anything else, and whatever that refuses, by the pure-Python
    :class:`_UniqueKeyLoader` (which words the refusal)."""
    if shipped and _FastLoader is not None:
        try:
            return yaml.load(text, Loader=_FastLoader)  # noqa: S506 (a SafeLoader)
        except Exception:               # noqa: BLE001 - the pure parser decides and words it
            pass
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)


class _Refused(Exception):
    def __init__(self, limit_name, got, mark):
        super().__init__(got)
        self.limit_name, self.got, self.line = limit_name, got, mark.line + 1 if mark else "?"


class _DuplicateKey(Exception):
    def __init__(self, key, line):
        super().__init__(key, line)
        self.key, self.line = key, line


class _BadKey(Exception):
    def __init__(self, key, line):
        super().__init__(key, line)
        self.key, self.line = key, line


def _construct_unique(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, (list, dict, set)) or key is None or isinstance(key, bool):
            raise _BadKey(key, key_node.start_mark.line + 1)
        if key in seen:
            raise _DuplicateKey(key, key_node.start_mark.line + 1)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _construct_unique)


def read_yaml(path, what: str = "file") -> Any:
    """The YAML document at ``path`` (a path or an importlib resource), through the input
    boundary (:func:`simulator.inputs.read_text`) and :func:`load_yaml`.

    :raises ConfigError: (source = the file) as :func:`simulator.inputs.read_bytes` and
        :func:`simulator.inputs.decode_text`, or as :func:`load_yaml`.
    """
    source = str(path)
    text = read_text(path, what)
    if not source.startswith(SHIPPED_DATA):
        return load_yaml(text, source)
    return parsedcache.parsed(source, text, lambda: load_yaml(text, source, shipped=True))


def load_yaml(text: str, source: str, field: str | None = None, shipped: bool = False) -> Any:
    """The checked YAML document ``text`` read from ``source`` (``shipped``: a file of
    ``simulator/data/``, parsed by libyaml where there is one).

    :raises ConfigError: (naming ``source`` and ``field``) ``malformed YAML at line N``,
        ``duplicate key``, a key that is not a string or a number, nesting past
        ``CLUSTERSIM_MAX_YAML_DEPTH``, more values than ``CLUSTERSIM_MAX_YAML_NODES`` with
        aliases expanded, or an ``inf``/``nan`` number (with its dotted key).
    """
    try:
        data = _parse(text, shipped)
    except _DuplicateKey as exc:
        raise ConfigError(f"duplicate key {exc.key!r} at line {exc.line} (YAML would silently "
                          f"keep only the last one)", source=source,
                          field=field or str(exc.key)) from None
    except _BadKey as exc:
        kind = "null" if exc.key is None else type(exc.key).__name__
        raise ConfigError(f"a key at line {exc.line} is a {kind}; keys must be names or "
                          f"numbers", source=source, field=field) from None
    except _Refused as exc:
        got = f"malformed YAML at line {exc.line}: {exc.got}"
        if exc.limit_name is None:
            raise ConfigError(got, source=source, field=field) from None
        raise over_limit(exc.limit_name, got, source, field) from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else "?"
        raise ConfigError(f"malformed YAML at line {line}: {exc.problem or exc.context}",
                          source=source, field=field) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"malformed YAML: {' '.join(str(exc).split())}",
                          source=source, field=field) from None
    except (ValueError, TypeError, OverflowError) as exc:   # a tag its text cannot be:
        reason = " ".join(str(exc).split())[:80]            # !!int 1e3, !!timestamp 2020-13
        raise ConfigError(f"malformed YAML: a value its tag cannot hold ({reason})",
                          source=source, field=field) from None
    return check_finite(data, source, field or "")


def parse_value(text: str, source: str, field: str) -> Any:
    """A command-line value (``--set KEY=VALUE``) read as YAML with :func:`load_yaml`'s
    checks; text that is not YAML at all stays the string it is."""
    try:
        yaml.compose(text, Loader=yaml.BaseLoader)      # syntax only, nothing constructed
    except yaml.YAMLError:
        return text
    except RecursionError:
        pass                                       # too deep: load_yaml says so
    return load_yaml(text, source, field)


def write_yaml(path, data: Any, header: str = "") -> Path:
    """Write ``data`` as YAML (keys in insertion order) after a ``header`` comment block,
    creating the folder; a failure is one ConfigError naming the file."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, header + yaml.dump(data, Dumper=_Dumper, sort_keys=False,
                                                    width=100))
    except OSError as exc:
        raise ConfigError(f"cannot write: {exc.strerror or exc}", source=str(path)) from None
    return path
