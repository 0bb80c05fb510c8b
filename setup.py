"""Build step: the wheel carries the shipped scenarios, studies, configs, topologies and
the validation data.

They stay at the repository's top (``scenarios/``, ``topologies/``, ``validation/``);
building a wheel copies the files of those folders that match :data:`SHIPPED`, by pattern,
into ``simulator/_shipped/`` where
:mod:`simulator.shipped` finds them with :mod:`importlib.resources`. An editable install
reads the repository's folders directly, so nothing is copied then; it compiles the
package's bytecode instead (:func:`compile_sources`). Everything else about the package is in
``pyproject.toml``.
"""

import compileall
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = {"scenarios": ("*.yaml", "studies/*.yaml", "mixes/*.yaml", "configs/*"),
           "topologies": ("*.yaml",),
           # what `clustersim validate` reads: the measurements, cases, splits and known
           # misses (data files only: no reports, plots or capture scripts)
           "validation": tuple(f"**/*.{ending}" for ending in
                               ("csv", "yaml", "json", "txt", "gz"))}


def compile_sources(package_dir) -> None:
    """Compile the package at ``package_dir`` in place, once, at an editable install.

    pip writes the bytecode of every package it installs (a wheel's modules, the
    dependencies), but an editable install runs the sources where they are, so without this
    their bytecode would exist only once Python may write it: never where
    ``PYTHONDONTWRITEBYTECODE`` is set, which would then compile every module from source at
    every start (docs/speed.md, start-up). Python reads existing bytecode whatever that
    variable says and ignores a file whose source has changed since. The files go where
    Python looks for them (``__pycache__``, or ``PYTHONPYCACHEPREFIX``); a folder that cannot
    be written is left as it is, silently (the install still works, only slower to start).
    """
    compileall.compile_dir(str(package_dir), quiet=2)


class BuildPyWithShipped(build_py):
    """``build_py`` plus the copies of the shipped YAML files (the bytecode, editable)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            compile_sources(Path(__file__).resolve().parent / "simulator")
            return
        for folder, patterns in SHIPPED.items():
            for pattern in patterns:
                for src in sorted(Path(folder).glob(pattern)):
                    if not src.is_file():
                        continue
                    dest = Path(self.build_lib, "simulator", "_shipped", folder,
                                src.relative_to(folder))
                    self.mkpath(str(dest.parent))
                    self.copy_file(str(src), str(dest))


if __name__ == "__main__":          # as pip's build backend and `python setup.py` run it
    setup(cmdclass={"build_py": BuildPyWithShipped})
