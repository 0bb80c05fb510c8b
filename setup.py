"""Build step: the wheel carries the shipped scenarios, studies and topologies.

They stay at the repository's top (``scenarios/``, ``topologies/``); building a wheel copies
every ``*.yaml`` of those folders, by pattern, into ``simulator/_shipped/`` where
:mod:`simulator.shipped` finds them with :mod:`importlib.resources`. An editable install
reads the repository's folders directly, so nothing is copied then. Everything else about
the package is in ``pyproject.toml``.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = {"scenarios": ("*.yaml", "studies/*.yaml"), "topologies": ("*.yaml",)}


class BuildPyWithShipped(build_py):
    """``build_py`` plus the copies of the shipped YAML files."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for folder, patterns in SHIPPED.items():
            for pattern in patterns:
                for src in sorted(Path(folder).glob(pattern)):
                    dest = Path(self.build_lib, "simulator", "_shipped", folder,
                                src.relative_to(folder))
                    self.mkpath(str(dest.parent))
                    self.copy_file(str(src), str(dest))


setup(cmdclass={"build_py": BuildPyWithShipped})
