"""How long each command takes before it starts working, whole process, as a user runs it.

"Before it starts working" is measured as a run that stops at the command's first look at
its input, after every import its body does first (the last two cases are whole runs:
the quick start and an all_reduce of 1 GiB on the 8 GPUs of one DGX A100, issue 43's
<= 0.3 s and <= 0.1 s): a scenario with an unknown precision
(``--set training.precision=nosuch``, exit 2) for the commands that take a scenario, a study
file that does not exist for ``study``, an unknown topology for ``topology`` and
``collective``, a trace file that does not exist for ``replay``, an output file that exists
for ``import``. The commands read and check their input before they import the simulator
(numpy, networkx, SimPy, the engine), so for most of them that is the time to refuse a bad
input; the time to start the work on a good one is in the last case, the whole
``clustersim run`` of the quick start. What loads only once the work has begun (the
simulator, a strategy's own module, pandas for a study's parts, matplotlib for ``--out``)
is not in the first numbers; it is in the whole quick-start ``run``.

Two settings, each the median of ``--repeat`` runs, wall and CPU (user + system) seconds:

* ``cached``: Python's compiled bytecode cache in use, as after ``pip install`` (which
  compiles it) or after the first run of an editable install; the cache is a fresh folder
  (``PYTHONPYCACHEPREFIX``) filled by one untimed run of each case first.
* ``no writes``: ``PYTHONDONTWRITEBYTECODE=1`` and no cache folder, as on a machine that sets
  that variable (this project's build machine does): Python reads the bytecode that exists
  and compiles the rest from source on every run. The libraries have the bytecode pip
  wrote; clustersim's own modules have it in their ``__pycache__`` folders when the editable
  install wrote it (setup.py ``compile_sources``; an install of an older commit did not, so
  there every run compiled them), except a module edited since.

The two whole runs also give their simulated events (``--format json``'s ``events``, read
from one untimed run; the collective's JSON has none, so ``-``) and events per second of
the cached CPU time: a start-up case is nearly all imports, so these say how little of it
is simulation.

With ``--before OTHER`` (another install's ``clustersim``, e.g. the main branch's) each run
of this one alternates with a run of OTHER, so that both see the same load, and each cell
is ``before -> now``.

Usage: ``python benchmarks/bench_startup.py [--repeat 3] [--clustersim PATH] [--before PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BAD = ["--set", "training.precision=nosuch"]
CASES = {
    "--help": ["--help"],
    "list": ["list"],
    "run": ["run", *BAD],
    "compare": ["compare", *BAD],
    "capacity": ["capacity", *BAD],
    "reliability": ["reliability", *BAD],
    "plan": ["plan", *BAD],
    "trace": ["trace", *BAD, "-o", os.devnull],
    "study": ["study", "/nonexistent/study.yaml"],
    "topology": ["topology", "nosuch-topology"],
    "collective": ["collective", "all_reduce", "--topology", "nosuch-topology"],
    "replay": ["replay", "/nonexistent/trace.json"],
    "import": ["import", "pytorch", "/nonexistent/trace.json", "-o", os.devnull],
    "run (quick start, whole)": ["run", "-q"],
    "collective (8 GPUs, whole)": ["collective", "all_reduce", "-b", "1G", "-e", "1G"],
}


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one process."""
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run(argv, capture_output=True, env=env)
    wall = time.perf_counter() - t0
    after = os.times()
    return wall, (after.children_user - before.children_user
                  + after.children_system - before.children_system)


def environments(cache_dir: str) -> dict[str, dict[str, str]]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    return {"cached": {**base, "PYTHONPYCACHEPREFIX": cache_dir},
            "no writes": {**base, "PYTHONDONTWRITEBYTECODE": "1"}}


def events(tool: str, argv: list[str], env: dict[str, str]) -> int | None:
    """The simulated events of ``tool ARGV --format json`` (None where its JSON has none)."""
    done = subprocess.run([tool, *argv, "--format", "json"], capture_output=True, text=True,
                          env=env)
    try:
        found = json.loads(done.stdout)
    except ValueError:
        return None
    return found.get("events") if isinstance(found, dict) else None


def medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def event_cells(tools: list[str], argv: list[str], env: dict[str, str],
                cpu: list[float]) -> list[str]:
    """The events and events per CPU second cells of a whole run, ``before -> now``."""
    counts = [events(tool, argv, env) for tool in tools]
    if any(n is None for n in counts):
        return ["-", "-"]
    return [" -> ".join(f"{n:,}" for n in counts),
            " -> ".join(f"{n / s:,.0f}" for n, s in zip(counts, cpu))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--clustersim", default=str(Path(sys.executable).with_name("clustersim")))
    ap.add_argument("--before", default=None, help="another clustersim to alternate with")
    args = ap.parse_args()
    tools = [args.before, args.clustersim] if args.before else [args.clustersim]
    with tempfile.TemporaryDirectory(prefix="clustersim-pyc-") as cache_dir:
        envs = environments(cache_dir)
        for tool in tools:
            for argv in CASES.values():        # fill the cache (untimed)
                subprocess.run([tool, *argv], capture_output=True, env=envs["cached"])
        load = os.getloadavg()[0]
        print(f"{' vs '.join(tools)}, median of {args.repeat}, load average {load:.1f} at start")
        print("| command | wall s (cached) | CPU s (cached) | wall s (no writes) "
              "| CPU s (no writes) | events | events/s (cached CPU) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, argv in CASES.items():
            cells, cpu = [], None
            for env in envs.values():
                runs = {tool: [] for tool in tools}
                for _ in range(args.repeat):
                    for tool in tools:
                        runs[tool].append(timed([tool, *argv], env))
                per_tool = [medians(runs[tool]) for tool in tools]
                cells += [" -> ".join(f"{m[i]:.2f}" for m in per_tool) for i in (0, 1)]
                cpu = cpu or [m[1] for m in per_tool]          # the cached setting's
            whole = "whole" in name
            cells += event_cells(tools, argv, envs["cached"], cpu) if whole else ["", ""]
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
        print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
