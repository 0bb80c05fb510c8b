"""Shared pieces of the study tests: tiny study files and two cheap point commands.

``probe`` and ``slow`` stand in for a simulation where the runner, not the simulator, is
under test: ``probe`` fails for ``training.micro_batch`` 3 (a failing point) and otherwise
returns numbers derived from the scenario; ``slow`` sleeps so a study can be killed
mid-way. They are registered as commands by :func:`register` (in the test process, or in a
subprocess running the CLI); points carry the function's name, so worker processes import
this module by itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from simulator.study.commands import COMMANDS, Command
from simulator.study.store import finished_parts

REPO = Path(__file__).resolve().parents[1]
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


# ------------------------------------------------------------------ a study in a subprocess
def study_command(path: Path, out: Path, workers: int) -> tuple[list[str], dict]:
    """Arguments and environment of ``clustersim study`` in a fresh interpreter that knows
    the test commands."""
    code = ("import sys, study_helpers; study_helpers.register(); "
            "from simulator.cli import main; main(sys.argv[1:])")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    return [sys.executable, "-c", code, "study", str(path), "--out", str(out),
            "--workers", str(workers), "--no-progress"], env


def start_study(path: Path, out: Path, workers: int, parts: int) -> subprocess.Popen:
    """``clustersim study`` started in a subprocess, once ``parts`` points are stored (or
    60 s have passed)."""
    args, env = study_command(path, out, workers)
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(finished_parts(out)) < parts and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


# ------------------------------------------------------------------ processes (Linux /proc)
def _proc_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, start time) of every process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            table[int(entry.name)] = (int(fields[1]), fields[0], fields[19])
    return table


def descendants(root: int) -> dict[int, str]:
    """Every process below ``root``: pid -> its start time (to tell a reused pid apart)."""
    table, found, frontier = _proc_table(), {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _, start) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = start
                frontier.append(pid)
    return found


def still_running(procs: dict[int, str]) -> list[int]:
    """The processes of ``procs`` (from :func:`descendants`) that have not ended."""
    table = _proc_table()
    return [pid for pid, start in procs.items()
            if pid in table and table[pid][2] == start and table[pid][1] not in "ZX"]
