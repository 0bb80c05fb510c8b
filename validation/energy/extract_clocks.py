"""Each node's power-log clock against the run's MLLOG clock, and the power runs' intervals
re-read with every node's readings put on the MLLOG clock (``mlperf_power_clocks.csv``,
``mlperf_power_phases_aligned.csv``).

``extract_phases.py`` reads the eight nodes' ``power_reading`` events at their own time
stamps. They are not on the run's clock: at the end of every run each node reads an
evaluation's power (5-7 kW) and then idle (2.9-3.9 kW), but the drop comes 0-18 s before
``run_stop`` depending on the node, and by the same seconds a node in all ten runs
(node 5 about 17 s early, node 0 about 1 s). The nodes end the run together (the last
evaluation's loss is reduced over all of them before ``run_stop`` is logged), so the
difference is each power log's clock. A node's offset is the time of its last reading above
``IDLE_W`` less ``run_stop``; its readings are moved by it, and the intervals of
``extract_phases.py`` are read again (same columns; readings moved before ``run_start`` or
after ``run_stop`` fall in no interval). Read so, the training blocks draw about 8 kW a node
and the evaluations about 6 kW; read on their own clocks each interval mixes the two.
Nothing is typed by hand; validation data only, nothing is fitted on it (setup.yaml).

Usage: python validation/energy/extract_clocks.py CHECKOUT > mlperf_power_clocks.csv and
python validation/energy/extract_clocks.py --aligned CHECKOUT >
mlperf_power_phases_aligned.csv, where CHECKOUT is a checkout of
mlcommons/training_results_v4.1 (or a mirror of it).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from extract_phases import (COLUMNS, NODES, RUNS, SYSTEM, events,  # noqa: E402
                            interval_rows)

# Between a node's idle after the run (2.9-3.9 kW in these logs) and its last evaluation
# (5.3-7.1 kW): the last reading above it is the node's end of the run.
IDLE_W = 4500.0
CLOCK_COLUMNS = ["run", "node", "offset_s", "source"]


def node_readings(root: Path, run: int, node: int) -> list[tuple[float, float]]:
    """(time s on the node's clock, W) of one node's power readings in one run."""
    path = root / SYSTEM / "power" / f"result_{run}" / f"node_{node}.txt"
    return [(e["time_ms"] / 1000, e["value"]) for e in events(path)
            if e["key"] == "power_reading"]


def offset_s(reads: list[tuple[float, float]], run_stop: float) -> float:
    """A node's clock offset: its last reading above :data:`IDLE_W` less ``run_stop``."""
    return max(t for t, w in reads if w > IDLE_W) - run_stop


def _run(root: Path, run: int):
    ev = events(root / SYSTEM / f"result_{run}.txt")
    start = next(e["time_ms"] for e in ev if e["key"] == "run_start") / 1000
    stop = next(e["time_ms"] for e in ev if e["key"] == "run_stop") / 1000
    return ev, start, stop


def clock_rows(root: Path, run: int) -> list[dict]:
    _, _, stop = _run(root, run)
    source = (f"mlcommons/training_results_v4.1:{SYSTEM}/result_{run}.txt + "
              f"{SYSTEM}/power/result_{run}/node_*.txt")
    return [{"run": f"result_{run}", "node": node,
             "offset_s": round(offset_s(node_readings(root, run, node), stop), 3),
             "source": source} for node in range(NODES)]


def aligned_rows(root: Path, run: int) -> list[dict]:
    """``extract_phases.run_rows`` with every node's readings on the MLLOG clock."""
    ev, start, stop = _run(root, run)
    reads = []
    for node in range(NODES):
        mine = node_readings(root, run, node)
        off = offset_s(mine, stop)
        reads += [(t - off, w) for t, w in mine]
    source = (f"mlcommons/training_results_v4.1:{SYSTEM}/result_{run}.txt + "
              f"{SYSTEM}/power/result_{run}/node_*.txt (each node's readings moved by its "
              f"offset in mlperf_power_clocks.csv)")
    return interval_rows(run, ev, start, reads, source)


def main(argv: list[str]) -> int:
    aligned = len(argv) == 3 and argv[1] == "--aligned"
    if len(argv) != 2 and not aligned:
        doc = __doc__.strip()
        print(doc[doc.index("Usage:"):], file=sys.stderr)
        return 2
    root = Path(argv[-1])
    columns, rows_of = (COLUMNS, aligned_rows) if aligned else (CLOCK_COLUMNS, clock_rows)
    w = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    w.writerows(row for run in range(RUNS) for row in rows_of(root, run))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
