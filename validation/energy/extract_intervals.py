"""Split the MLPerf v4.1 Llama 2 70B LoRA runs of other H100 systems of the same NeMo code
into their training blocks and evaluations (``mlperf_v41_intervals.csv``): a check of the
evaluation pass on runs that are not the power runs (NVIDIA's one-node and eight-node DGX
H100 runs, whose configurations are in their implementation folders) beside Dell's power
runs, and the same setup a rank on more nodes (NVIDIA's 128-node, Oracle's 8-, 16- and
64-node runs: ``evaluation_pace`` in setup.yaml). One row per interval: its times from run_start and its training steps (samples /
global batch), read from the run's MLLOG events (block_start/block_stop, eval_start/
eval_stop, samples_count). Nothing is typed by hand; validation data only, nothing is
fitted on it (setup.yaml).

Usage: python validation/energy/extract_intervals.py CHECKOUT > mlperf_v41_intervals.csv,
where CHECKOUT is a checkout of mlcommons/training_results_v4.1 (or a mirror of it).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from extract_phases import events, intervals, write_csv  # noqa: E402

# (results folder, its configuration file in the submitter's implementation folder)
SYSTEMS = (
    ("NVIDIA/results/eos_ngc24.09_nemo", "NVIDIA/benchmarks/llama2_70b_lora/implementations/"
     "eos_ngc24.09_nemo/config_DGXH100_1x8x4xtp4pp1cp1.sh"),
    ("NVIDIA/results/eos_n8_ngc24.09_nemo", "NVIDIA/benchmarks/llama2_70b_lora/"
     "implementations/eos_n8_ngc24.09_nemo/config_DGXH100_8x8x1xtp4pp1cp2.sh"),
    ("Dell/results/8xXE9680x8H100-SXM-80GB-POWER", "Dell/benchmarks/llama2_70b_lora/"
     "implementations/nemo/configs/config_DGXH100_8x8x1xtp4pp1cp2.sh"),
    # Added 2026-12-05 (energy helper): the same setup a rank (TP4 x CP2, one sample a
    # rank, CUDA graphs) on more nodes, so fewer evaluation batches (ceil(173 / global
    # batch): 22, 11, 3, 2): an evaluation's per-batch and per-evaluation seconds apart.
    # Configurations as mlperf_v41_steps.csv names them (NVIDIA's README; Oracle's matched
    # by nodes, GPUs and global batch).
    ("NVIDIA/results/eos_n128_ngc24.09_nemo", "NVIDIA/benchmarks/llama2_70b_lora/"
     "implementations/eos_n128_ngc24.09_nemo/config_DGXH100_128x8x1xtp4pp1cp2.sh"),
    ("Oracle/results/64xBM.GPU.H100.8", "Oracle/benchmarks/llama2_70b_lora/BM.GPU.H100.128/"
     "configs/config.bak/config_DGXH100_8x8x1xtp4pp1cp2.sh"),
    ("Oracle/results/128xBM.GPU.H100.8", "Oracle/benchmarks/llama2_70b_lora/"
     "BM.GPU.H100.128/configs/config_DGXH100_16x8x1xtp4pp1cp2.sh"),
    ("Oracle/results/512xBM.GPU.H100.8", "Oracle/benchmarks/llama2_70b_lora/"
     "BM.GPU.H100.128/configs/config.bak/config_DGXH100_64x8x1xtp4pp1cp2.sh"),
)
RUNS = 10
COLUMNS = ["system", "run", "interval", "index", "start_s", "stop_s", "steps", "config",
           "source"]


def run_rows(root: Path, system: str, config: str, run: int) -> list[dict]:
    path = f"{system}/llama2_70b_lora/result_{run}.txt"
    ev = events(root / path)
    gbs = next(e["value"] for e in ev if e["key"] == "global_batch_size")
    start = next(e["time_ms"] for e in ev if e["key"] == "run_start") / 1000
    rows = [{"system": system.split("/")[-1], "run": f"result_{run}", "interval": kind,
             "index": i, "start_s": round(lo - start, 3), "stop_s": round(hi - start, 3),
             "steps": steps, "config": config,
             "source": f"mlcommons/training_results_v4.1:{path}"}
            for kind, i, lo, hi, steps in intervals(ev, gbs)]
    return sorted(rows, key=lambda r: r["start_s"])


def main(argv: list[str]) -> int:
    return write_csv(argv, COLUMNS, lambda root: [
        row for system, config in SYSTEMS for run in range(RUNS)
        for row in run_rows(root, system, config, run)], __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
