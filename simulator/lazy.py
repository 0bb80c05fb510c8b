"""A mapping whose values are built on first lookup.

Registries use it to list their names without importing what each entry needs: the
strategies (:data:`simulator.strategies.STRATEGIES`) and the ``validate`` subcommands
(:mod:`simulator.cli.validate`), so a command loads only what it runs (start-up time,
README "Speed").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, MutableMapping
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
