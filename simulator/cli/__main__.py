"""``python -m simulator.cli``: the console script."""

from . import main

main()
