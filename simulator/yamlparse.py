"""The PyYAML side of :mod:`simulator.yamlio`: the checked loaders (repeated keys, nesting and
alias limits, YAML 1.2's exponent floats), libyaml's parser for the package's own data
files, and the dumper. Split off so that a run whose YAML files all come from
:mod:`simulator.parsedcache` never imports PyYAML (~10 ms of every start: its reader and
resolver compile their regular expressions at import; docs/speed.md); :mod:`simulator.yamlio`
imports this module the first time it parses or writes.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from .errors import ConfigError
from .inputs import limit, over_limit


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


def load(text: str, source: str, field: str | None = None, shipped: bool = False) -> Any:
    """The document ``text`` read from ``source``, its errors as one ConfigError each (see
    :func:`simulator.yamlio.load_yaml`, which also refuses ``inf``/``nan``)."""
    try:
        return _parse(text, shipped)
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


def is_yaml(text: str) -> bool:
    """Whether ``text`` is a YAML document by its syntax alone (nothing constructed); one
    nested past the recursion limit counts as YAML (:func:`load` then says it is too deep)."""
    try:
        yaml.compose(text, Loader=yaml.BaseLoader)
    except yaml.YAMLError:
        return False
    except RecursionError:
        pass
    return True


def dump(data: Any) -> str:
    """``data`` as YAML text, keys in insertion order, strings that read as numbers quoted."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=100)
