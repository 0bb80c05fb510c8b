"""``python -m simulator``: the ``clustersim`` console script."""

from simulator.cli import entry

entry()
