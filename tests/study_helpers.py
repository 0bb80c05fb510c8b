"""Shared pieces of the study tests: tiny study files and two cheap point commands.

``probe`` and ``slow`` stand in for a simulation where the runner, not the simulator, is
under test: ``probe`` fails for ``training.micro_batch`` 3 (a failing point) and otherwise
returns numbers derived from the scenario; ``slow`` sleeps so a study can be killed
mid-way. They are registered as commands by :func:`register` (in the test process, or in a
subprocess running the CLI); points carry the function's name, so worker processes import
this module by itself.
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from simulator.study.commands import COMMANDS, Command

TINY_SET = {"model": "gpt2-small", "training.seq_len": 128, "training.micro_batch": 1}
SLOW_S = 0.25


def probe(scn, point):
    if scn.training.micro_batch == 3:
        raise RuntimeError("probe refuses micro_batch 3")
    mb, gpus = scn.training.micro_batch, scn.cluster.gpus or 8
    return [{"value": mb * gpus, "seed_seen": scn.simulation.seed}]


def slow(scn, point):
    time.sleep(SLOW_S)
    return [{"value": scn.training.micro_batch}]


def register() -> None:
    COMMANDS["probe"] = Command("study_helpers:probe", None, ("value", "seed_seen"), "test")
    COMMANDS["slow"] = Command("study_helpers:slow", None, ("value",), "test")


def write_study(folder: Path, name: str = "tiny", **fields) -> Path:
    """A study file in ``folder``: quickstart shrunk to GPT-2 small, plus ``fields``."""
    data = {"name": name, "command": "run",
            "base": {"scenario": "quickstart", "set": dict(TINY_SET)},
            "axes": {"grid": {"cluster.gpus": [2, 4]}}}
    data.update(fields)
    path = Path(folder) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
