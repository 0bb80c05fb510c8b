"""Split each MLPerf v4.1 Dell LoRA power run into its training blocks and evaluations and
write the measured node power of each (``mlperf_power_phases.csv``).

The run window that ``mlperf_power_h100.csv`` averages over (run_start to run_stop) is not
all training: after every 48 steps NeMo evaluates on 173 samples (about 10 s; the first
evaluation about 24 s), and the first block holds about 19 s of warm-up. This script reads
the run's MLLOG events (block_start/block_stop, eval_start/eval_stop, samples_count) and the
eight nodes' power logs (power_reading, one a second a node) and writes one row per
interval: its times from run_start, its training steps (samples / global batch 8), how many
readings fall in it and their mean. Nothing is typed by hand; the mean over all intervals of
a run, weighted by readings, is the run's avg_node_power_W (tests/test_validation_energy.py
checks it). Validation data only: nothing is fitted on it (setup.yaml).

Usage: python validation/energy/extract_phases.py CHECKOUT > mlperf_power_phases.csv, where
CHECKOUT is a checkout of mlcommons/training_results_v4.1 (or a mirror of it).
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

SYSTEM = "Dell/results/8xXE9680x8H100-SXM-80GB-POWER/llama2_70b_lora"
GLOBAL_BATCH = 8
NODES = 8
RUNS = 10
COLUMNS = ["run", "interval", "index", "start_s", "stop_s", "steps", "readings",
           "mean_node_w", "source"]


def events(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        at = line.find(":::MLLOG")
        if at >= 0:
            out.append(json.loads(line[at + len(":::MLLOG"):]))
    return out


def intervals(ev: list[dict], gbs: int) -> list[tuple[str, int, float, float, int]]:
    """(kind train|eval, index, start s, stop s, training steps) of a run's MLLOG events:
    its training blocks and evaluations, steps = samples / global batch ``gbs``."""
    out = []
    for kind, open_key, close_key in (("train", "block_start", "block_stop"),
                                      ("eval", "eval_start", "eval_stop")):
        opens = [e for e in ev if e["key"] == open_key]
        closes = [e for e in ev if e["key"] == close_key]
        for i, (a, b) in enumerate(zip(opens, closes)):
            steps = ((b["metadata"]["samples_count"] - a["metadata"]["samples_count"]) // gbs
                     if kind == "train" else 0)
            out.append((kind, i, a["time_ms"] / 1000, b["time_ms"] / 1000, steps))
    return out


def run_rows(root: Path, run: int) -> list[dict]:
    ev = events(root / SYSTEM / f"result_{run}.txt")
    start = next(e["time_ms"] for e in ev if e["key"] == "run_start") / 1000
    reads = [(e["time_ms"] / 1000, e["value"]) for node in range(NODES)
             for e in events(root / SYSTEM / "power" / f"result_{run}" / f"node_{node}.txt")
             if e["key"] == "power_reading"]
    source = (f"mlcommons/training_results_v4.1:{SYSTEM}/result_{run}.txt + "
              f"{SYSTEM}/power/result_{run}/node_*.txt")
    return interval_rows(run, ev, start, reads, source)


def interval_rows(run: int, ev: list[dict], start: float,
                  reads: list[tuple[float, float]], source: str) -> list[dict]:
    """One row per training block and evaluation of a run's MLLOG events ``ev``: its times
    from ``start``, steps, and the readings ``reads`` (time s, W) that fall in it."""
    rows = []
    for kind, i, lo, hi, steps in intervals(ev, GLOBAL_BATCH):
        inside = [w for t, w in reads if lo <= t <= hi]
        rows.append({"run": f"result_{run}", "interval": kind, "index": i,
                     "start_s": round(lo - start, 3), "stop_s": round(hi - start, 3),
                     "steps": steps, "readings": len(inside),
                     "mean_node_w": round(sum(inside) / len(inside), 1) if inside else "",
                     "source": source})
    return sorted(rows, key=lambda r: r["start_s"])


def write_csv(argv: list[str], columns: list[str], rows_of, doc: str) -> int:
    """The command line of this script and its sibling: ``rows_of(CHECKOUT)``'s rows as CSV
    on stdout (the usage line of ``doc`` and 2 without one argument)."""
    if len(argv) != 2:
        print(doc.strip().splitlines()[-2], file=sys.stderr)
        return 2
    w = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    w.writerows(rows_of(Path(argv[1])))
    return 0


def main(argv: list[str]) -> int:
    return write_csv(argv, COLUMNS, lambda root: [row for run in range(RUNS)
                                                  for row in run_rows(root, run)], __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
