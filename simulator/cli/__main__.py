"""``python -m simulator.cli``: the console script."""

from . import entry

entry()
