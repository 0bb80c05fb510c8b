"""Startup: a command loads only what it needs before it works. The heavy libraries that
only outputs need (pandas for tables and CSV, matplotlib for plots, Dask and pyarrow for
studies) are not imported by a command until it writes them, so `run`, `compare`,
`capacity` and `reliability` start working without them; `--help` and `list` load none of
the numeric stack. (No wall-time assert: the modules are what a test can check; the README
gives `python -X importtime` numbers.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OUTPUT_ONLY = ("pandas", "matplotlib", "dask", "pyarrow", "scipy")
NUMERIC = ("numpy", "networkx", "simpy", "pandas", "matplotlib")


def _loaded(argv: list[str], families: tuple[str, ...]) -> list[str]:
    """Top-level packages of ``families`` in sys.modules after ``clustersim ARGV``."""
    probe = (f"import sys\nfrom simulator.cli import main\ntry:\n    main({argv!r})\n"
             f"except SystemExit:\n    pass\n"
             f"print('LOADED:', *sorted({{m.split('.')[0] for m in sys.modules}} & "
             f"{set(families)!r}), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stderr.splitlines() if x.startswith("LOADED:"))
    return line.split()[1:]


@pytest.mark.parametrize("command", ["run", "compare", "capacity", "reliability", "trace"])
def test_a_command_loads_no_output_library_before_it_works(command):
    # a bad precision stops each command at its first look at the scenario, after every
    # import its body does before working
    argv = [command, "--set", "training.precision=nosuch"]
    argv += ["-o", "unused.json"] if command == "trace" else []
    assert _loaded(argv, OUTPUT_ONLY) == []


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["list", "topologies"],
                                  ["list", "scenarios"], ["--version"]])
def test_help_and_list_load_no_numeric_library(argv):
    assert _loaded(argv, NUMERIC) == []
