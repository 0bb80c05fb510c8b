"""The captured CPU runs: replay, what-if across link bandwidths, and 2 -> 4 rank scaling.

Data (``validation/traces/``, README in ``captured/``): ``captured_runs.csv`` (one row per
run: job, ranks, shaped bandwidth, measured ``iter_time_median_s`` over the unprofiled timed
steps) and ``captured/<run_id>/`` (one profiler trace per rank, ``steps.json``). Every case
imports a run's trace, replays each *profiled* step on the capture machine
(:mod:`.machine`) and takes the mean of the simulated iteration times; the error is
``simulated / measured - 1`` against the target run's ``iter_time_median_s``:

* **replay** (bound ``REPLAY_BOUND``): a run from its own trace, at its own bandwidth;
* **what-if** (``WHATIF_BOUND``): a run's trace on the description at another bandwidth
  (only the link and the gloo constants measured at it change), against the run of the same
  job and ranks at that bandwidth; every ordered pair of bandwidths captured;
* **scaling** (``SCALING_BOUND``): a 2-rank trace mapped to 4 ranks
  (:func:`.scaling.to_ranks`), against the 4-rank run at the same bandwidth.

Known misses are declared in ``validation/known_misses.yaml`` with their reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import pandas as pd

from simulator.errors import ConfigError
from simulator.importers import import_trace
from simulator.trace.schema import Trace

from simulator.validation.captured.calibration import load_description, traces_root
from simulator.validation.captured.machine import description, replay_on
from simulator.validation.captured.scaling import to_ranks

RUNS_CSV = "captured_runs.csv"
REPLAY_BOUND = 0.10
WHATIF_BOUND = 0.15
SCALING_BOUND = 0.15
KINDS = {"replay": REPLAY_BOUND, "what-if": WHATIF_BOUND, "scaling": SCALING_BOUND}
LOSS_BYTES = 4           # the loss all-reduce of the TensorFlow step (one float32)
INDEX_BYTES = 4          # int32 token ids: the embedding gradient's indices


@dataclass(frozen=True)
class Run:
    run_id: str
    job: str
    framework: str
    ranks: int
    bandwidth: str
    measured_s: float              # iter_time_median_s (unprofiled timed steps)
    profiled_s: float              # profiled_iter_time_median_s
    files: tuple[Path, ...]
    steps: tuple[int, ...]         # profiled step numbers (ProfilerStep#N / step_num)
    model: dict = field(compare=False)   # the job's model config (steps.json)


def load_runs(root: Path | None = None) -> list[Run]:
    """The captured runs.

    :raises ConfigError: unreadable CSV, missing columns or trace files.
    """
    root = Path(root) if root is not None else traces_root()
    path = root / RUNS_CSV
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError) as exc:
        raise ConfigError(f"cannot read captured runs: {exc}", source=str(path)) from None
    need = ["run_id", "job", "framework", "ranks", "bandwidth", "iter_time_median_s",
            "profiled_iter_time_median_s", "trace_files"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ConfigError(f"missing column(s) {', '.join(missing)}", source=str(path))
    runs = []
    for r in df.itertuples(index=False):
        files = tuple(root / f for f in str(r.trace_files).split(";"))
        for f in files:
            if not f.is_file():
                raise ConfigError(f"run {r.run_id}: no trace file {f}", source=str(path))
        steps, model = _steps(files[0].parent / "steps.json")
        runs.append(Run(r.run_id, r.job, r.framework, int(r.ranks), r.bandwidth,
                        float(r.iter_time_median_s), float(r.profiled_iter_time_median_s),
                        files, steps, model))
    return runs


def _steps(path: Path) -> tuple[tuple[int, ...], dict]:
    """Profiled step numbers and the model config from a run's ``steps.json``."""
    try:
        data = json.loads(path.read_text())
        rank0 = data["ranks"][0]
        steps = tuple(i for i, k in enumerate(rank0["step_kind"]) if k == "profiled")
        return steps, dict(rank0.get("model", {}))
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ConfigError(f"unreadable steps.json ({exc})", source=str(path)) from None


def tf_sizes(run: Run) -> tuple[dict[str, int], int]:
    """Sizes of the TensorFlow step's collectives (TensorFlow records none), from the job's
    model (``tf_job.py``): the dense gradients go in one packed RING all-reduce; the token
    embedding's gradient is IndexedSlices, all-gathered as its row count, values and
    indices (``CollectiveGatherV2``, ``cond/.../CollectiveGatherV2``, ``..._1``); the
    step's last all-reduce is the loss. Returns (sizes by op name, dense gradient bytes)."""
    m, n = run.model, run.ranks
    rows = int(m["batch_per_rank"]) * int(m["seq_len"])
    dense = 4 * (int(m["params"]) - int(m["vocab"]) * int(m["d_model"]))
    sizes = {"CollectiveReduceV2": LOSS_BYTES, "CollectiveGatherV2": n * INDEX_BYTES,
             "cond/then/_0/cond/CollectiveGatherV2": n * rows * int(m["d_model"]) * 4,
             "cond/then/_0/cond/CollectiveGatherV2_1": n * rows * INDEX_BYTES}
    return sizes, dense


def _with_dense_gradients(trace: Trace, dense: int) -> Trace:
    """Every all-reduce of a class but its last (the loss) shares the dense gradients."""
    classes = []
    for cls in trace.classes:
        red = [op.id for op in cls.ops if op.kind == "collective"
               and op.collective == "all_reduce"][:-1]
        ops = [replace(op, size_bytes=dense // len(red)) if op.id in red else op
               for op in cls.ops]
        classes.append(replace(cls, ops=ops))
    return replace(trace, classes=classes)


@cache
def import_run(run: Run, step: int) -> Trace:
    """The run's profiled step ``step`` as a Trace (TensorFlow sizes filled in)."""
    if run.framework == "tensorflow":
        sizes, dense = tf_sizes(run)
        return _with_dense_gradients(import_trace("tensorflow", run.files, step, sizes), dense)
    return import_trace(run.framework, run.files, step)


def simulate(run: Run, bandwidth: str, ranks: int | None = None,
             data: dict | None = None) -> dict[int | None, float | str]:
    """Simulated iteration time of each profiled step of ``run`` at ``bandwidth`` (on
    ``ranks`` ranks: the 2 -> 4 mapping of :mod:`.scaling`), by step; a step the
    importer refuses (e.g. a rank's trace lacks a collective the other has: a profiler
    stopping mid-step) gets the reason instead.

    :raises ConfigError: when no profiled step can be imported.
    """
    desc = description(bandwidth, data)
    data = data if data is not None else load_description()
    out: dict[int | None, float | str] = {}
    for step in run.steps or (None,):
        try:
            trace = import_run(run, step)
        except ConfigError as exc:
            out[step] = str(exc)
            continue
        if ranks is not None and ranks != trace.world_size:
            trace = to_ranks(trace, ranks, run, data)
        out[step] = replay_on(trace, desc).iteration_time_s
    if not any(isinstance(v, float) for v in out.values()):
        raise ConfigError(f"run {run.run_id}: no profiled step can be replayed: "
                          f"{'; '.join(map(str, out.values()))}")
    return out


def plan_cases(runs: list[Run]) -> list[dict]:
    """Every case the captured data allow: (kind, source run, target run)."""
    by = {(r.job, r.ranks, r.bandwidth): r for r in runs}
    cases = [{"kind": "replay", "source": r, "target": r} for r in runs]
    for r in runs:
        for (job, n, bw), t in by.items():
            if job == r.job and n == r.ranks and bw != r.bandwidth:
                cases.append({"kind": "what-if", "source": r, "target": t})
    for r in runs:
        t = by.get((r.job, 2 * r.ranks, r.bandwidth))
        if r.ranks == 2 and t is not None:
            cases.append({"kind": "scaling", "source": r, "target": t})
    return cases


def case_id(kind: str, source: Run, target: Run) -> str:
    if kind == "replay":
        return f"captured/replay/{source.run_id}"
    if kind == "what-if":
        return f"captured/what-if/{source.run_id}->{target.bandwidth}"
    return f"captured/scaling/{source.run_id}->{target.ranks}r"


def run_case(case: dict, data: dict | None = None) -> dict:
    src, tgt, kind = case["source"], case["target"], case["kind"]
    steps = simulate(src, tgt.bandwidth, tgt.ranks if kind == "scaling" else None, data)
    sims = [v for v in steps.values() if isinstance(v, float)]
    sim = sum(sims) / len(sims)
    return {"case": case_id(kind, src, tgt), "kind": kind, "job": src.job,
            "source": src.run_id, "target": tgt.run_id, "ranks": tgt.ranks,
            "bandwidth": tgt.bandwidth, "source_bandwidth": src.bandwidth,
            "simulated_s": sim, "simulated_steps_s": steps, "measured_s": tgt.measured_s,
            "profiled_s": tgt.profiled_s, "error": sim / tgt.measured_s - 1,
            "bound": KINDS[kind]}


def validate(root: Path | None = None, kinds=tuple(KINDS), data: dict | None = None
             ) -> pd.DataFrame:
    """Every case of ``kinds``, one row each (times in seconds; ``ok``: within bound)."""
    runs = load_runs(root)
    rows = [run_case(c, data) for c in plan_cases(runs) if c["kind"] in kinds]
    df = pd.DataFrame(rows)
    df["ok"] = df.error.abs() <= df.bound
    return df


__all__ = ["KINDS", "REPLAY_BOUND", "Run", "SCALING_BOUND", "WHATIF_BOUND", "case_id",
           "import_run", "load_runs", "plan_cases", "run_case", "simulate", "validate"]
