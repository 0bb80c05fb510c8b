"""Things built on first use, so that a command loads only what it runs (start-up time,
docs/speed.md).

:class:`LazyDict`, a mapping whose values are built on first lookup: registries use it to
list their names without importing what each entry needs (the strategies,
:data:`simulator.strategies.STRATEGIES`, and the ``validate`` subcommands,
:mod:`simulator.cli.validate`). :class:`LazyModule`, a module imported on first attribute
lookup, for a module whose functions need a heavy library that importing the module should
not load.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from types import ModuleType
from typing import Any

_PENDING = object()


class LazyDict(MutableMapping):
    """``name -> value``: the ``ready`` entries, then the ``deferred`` names, whose value
    ``load(name)`` returns on the first lookup (and is kept). Iterating gives the names in
    that order and loads nothing."""

    def __init__(self, ready: dict[str, Any], deferred: Iterable[str],
                 load: Callable[[str], Any]):
        self._entries = {**ready, **dict.fromkeys(deferred, _PENDING)}
        self._load = load

    def __getitem__(self, name: str) -> Any:
        value = self._entries[name]
        if value is _PENDING:
            value = self._entries[name] = self._load(name)
        return value

    def __setitem__(self, name: str, value: Any) -> None:
        self._entries[name] = value

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


class LazyModule:
    """``np = LazyModule("numpy")``: the module ``name``, imported by the first lookup of
    one of its attributes (``np.asarray``), not by the line that names it."""

    def __init__(self, name: str):
        self._name, self._module = name, None

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.module(), attr)

    def module(self) -> ModuleType:
        """The module itself (imported now if it was not yet)."""
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return self._module

    def __repr__(self) -> str:
        state = "loaded" if self._module is not None else "not loaded yet"
        return f"<LazyModule {self._name!r}, {state}>"
