"""``python -m simulator.validation.reliability [--workers N]``: run the reliability checks
and write ``validation/reliability/report.md``."""

from __future__ import annotations

import argparse
import os

from simulator.outpaths import atomic_write_text
from simulator.validation.reliability.checks import CASES
from simulator.validation.reliability.report import report


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m simulator.validation.reliability")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    text = report(args.workers)
    path = CASES.parent / "report.md"
    atomic_write_text(path, text)
    print(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
