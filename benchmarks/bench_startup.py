"""How long each command takes before it starts working, whole process, as a user runs it.

"Before it starts working" is measured as a run that stops at the command's first look at
its input, after every import its body does first: a scenario with an unknown precision
(``--set training.precision=nosuch``, exit 2) for the commands that take a scenario, a study
file that does not exist for ``study``, an unknown topology for ``topology``. Then the whole
``clustersim run`` of the quick start. Median of ``--repeat`` runs, wall and CPU (user +
system) seconds. Usage: ``python benchmarks/bench_startup.py [--repeat 5] [--clustersim PATH]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
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
    "trace": ["trace", *BAD, "-o", os.devnull],
    "study": ["study", "/nonexistent/study.yaml"],
    "topology": ["topology", "nosuch-topology"],
    "run (quick start, whole)": ["run", "-q"],
}


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one process."""
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run(argv, capture_output=True)
    wall = time.perf_counter() - t0
    after = os.times()
    return wall, (after.children_user - before.children_user
                  + after.children_system - before.children_system)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--clustersim", default=str(Path(sys.executable).with_name("clustersim")))
    args = ap.parse_args()
    print(f"{args.clustersim}, median of {args.repeat}")
    print("| command | wall s | CPU s |")
    print("|---|---:|---:|")
    for name, argv in CASES.items():
        runs = [timed([args.clustersim, *argv]) for _ in range(args.repeat)]
        print(f"| {name} | {statistics.median(w for w, _ in runs):.2f} | "
              f"{statistics.median(c for _, c in runs):.2f} |", flush=True)


if __name__ == "__main__":
    main()
