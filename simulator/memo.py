"""Values worked out once from one cluster and kept beside it.

Modules that derive tables from a :class:`~simulator.cluster.Cluster` (columns per server,
the NICs each GPU drives, routes to host memory) keep them in the cluster's
:class:`Memo` (``cluster.memo``) rather than on the cluster itself: the cluster stays the
index of its graph, and each table stays its user's, under its user's key.
"""

from __future__ import annotations

from typing import Callable, Hashable, TypeVar

T = TypeVar("T")
_MISSING = object()


class Memo:
    """A value per key, made on the first ask and kept for the life of its owner.

    A key begins with its user's name (e.g. ``("columns", "gpu places")``), so two users
    never share a value by accident. A value kept is never made again: one that must grow
    (a dict filled as look-ups come) is kept as that container.
    """

    def __init__(self):
        self._values: dict = {}

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        """The value kept under ``key``; on the first ask, ``make()``'s, then kept.

        :raises TypeError: if ``key`` is not hashable.
        Whatever ``make`` raises passes through, and nothing is kept under ``key`` then.
        """
        found = self._values.get(key, _MISSING)
        if found is _MISSING:
            found = self._values[key] = make()
        return found
