"""What a process that ends with ``os._exit`` need not free.

The ``clustersim`` executable ends with ``os._exit`` (:func:`simulator.cli.entry`): the
operating system takes the whole memory back at once. Freeing a replay's working objects
(its plans, remembered solves, events and link classes) or a command's setup and
timeline one by one just before that is wasted work, so in
that process :func:`keep` holds them instead. It holds one object per name: keeping the
next one under a name frees the one before (a command that replays many times holds one
replay's worth of memory more, never a growing heap). Anywhere else (the library, tests calling
:func:`simulator.cli.main`) :func:`keep` does nothing and objects are freed as usual.
"""

from __future__ import annotations

_ENDS_WITH_EXIT = False
_kept: dict = {}


def ends_with_exit() -> None:
    """Declare that this process ends with ``os._exit`` (only the console script does)."""
    global _ENDS_WITH_EXIT
    _ENDS_WITH_EXIT = True


def keep(name: str, obj) -> None:
    """Hold ``obj`` under ``name`` until the process ends (freeing the one held there
    before), where the process ends with ``os._exit``; else nothing."""
    if _ENDS_WITH_EXIT:
        _kept[name] = obj
