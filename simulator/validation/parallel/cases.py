"""The parallel suite's inputs (``validation/parallel/``): ``cases.yaml`` (what is calibrated,
the gates, the data files, the model of each row) and each measured Megatron run as a
:class:`Run`: its model, its :class:`~simulator.strategies.parallel.ParallelPlan` and its training
setup, read from the row's columns."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from simulator.errors import ConfigError, validation_error
from simulator.models import load_model
from simulator.models.spec import ModelSpec
from simulator.strategies.parallel import ParallelPlan
from simulator.validation.common import read_cases_file, read_measurements_csv
from simulator.validation.paths import data_dir

CASES_FILE = "cases.yaml"
RECOMPUTE = {"none": "none", "attn_only": "selective", "full": "full"}   # Calculon's names
RUN_COLUMNS = ["model", "gpus", "tensor_par", "pipeline_par", "data_par", "global_batch",
               "microbatch", "pipeline_interleaving", "activation_recompute",
               "tensor_par_comm_type", "source"]


class Gates(BaseModel):
    model_config = ConfigDict(extra="forbid")
    iteration_median: float
    memory: float


class Files(BaseModel):
    model_config = ConfigDict(extra="forbid")
    iteration: str
    memory: str
    nemo: str
    bridge: str
    bridge_blackwell: str = ""
    simumax: str = ""


class Split(BaseModel):
    """A declared calibration split (``cases.yaml``'s ``blackwell_split``): the constants a
    fit may take, the calibration cases per file, what validates."""
    model_config = ConfigDict(extra="forbid")
    declared: str
    constants: list[str]
    calibration: dict[str, list[str]]
    validation: dict[str, str]


class Recipe(BaseModel):
    """Strategy settings of a release's performance preset for the rows it matches
    (``cases.yaml``'s ``bridge_recipes``), and, where the table's parallel columns disagree
    with the preset the release shipped, the columns as the preset ran them (``layout``:
    ``{"PP": 1, "VP": 1, "EP": 16}``) with the reason (``note``)."""
    model_config = ConfigDict(extra="forbid")
    models: list[str]
    gpus: list[str]
    precisions: list[str]
    releases: list[str]
    strategy: dict[str, bool | int | str | list[str]] = {}    # lists: recompute_modules, cuda_graph_scope
    layout: dict[str, int] = {}
    note: str = ""

    def matches(self, model: str, gpu: str, precision: str, release: str) -> bool:
        """Whether a row of ``model`` on ``gpu`` at ``precision`` of ``release`` ran it."""
        return (model in self.models and gpu in self.gpus and precision in self.precisions
                and release in self.releases)


class Task(BaseModel):
    """A fine-tuning task's setup beyond a pre-training row's (``cases.yaml``'s
    ``bridge_tasks``: the performance configs of the task's rows): strategy and training
    keys, and the note each of its rows carries."""
    model_config = ConfigDict(extra="forbid")
    strategy: dict[str, Any] = {}
    training: dict[str, Any] = {}
    note: str = ""


class MlperfSetup(BaseModel):
    """MLPerf GPT-3 175B rows' setup (``cases.yaml``'s ``mlperf_gpt3``): their file, the
    model, each system's topology, TP/PP where the table has none, and the strategy and
    training keys of the benchmark's config."""
    model_config = ConfigDict(extra="forbid")
    file: str = ""
    model: str = "gpt3-175b"
    topologies: dict[str, str] = {}
    layouts: dict[str, dict[str, int]] = {}
    strategy: dict[str, Any] = {}
    training: dict[str, Any] = {}


class CasesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str = ""
    calibrated: list[str]
    gates: Gates
    files: Files
    topologies: dict[str, str]
    slurm_node_gpus: dict[str, int] = {}
    models: dict[str, str]
    nemo_models: dict[str, str] = {}
    nemo_strategy: dict[str, dict[str, bool | int | str]] = {}
    bridge_recipes: list[Recipe] = []
    bridge_tasks: dict[str, Task] = {}
    nemo_layouts: dict[str, dict[int, str]] = {}
    nemo_not_modelled: dict[str, str] = {}
    nemo_precision: dict[str, dict[str, str]] = {}
    bridge_precision_strategy: dict[str, dict[str, dict[str, bool]]] = {}
    nemo_max_gpus: int = 128
    nemo_max_micro_batches: int = 256
    simumax_models: dict[str, str] = {}
    simumax_not_modelled: dict[str, str] = {}
    simumax_strategy: dict[str, dict[str, bool | int | float | str]] = {}
    selene_max_gpus: int = 64
    blackwell_split: Split | None = None
    mlperf_gpt3: MlperfSetup = MlperfSetup()


def default_root() -> Path:
    """``validation/parallel`` of the repository."""
    return data_dir("parallel")


def load(root: Path | None = None) -> CasesFile:
    """``cases.yaml`` of ``root`` (default :func:`default_root`), checked.

    :raises ConfigError: a missing or malformed file, naming the key.
    """
    root = Path(root) if root is not None else default_root()
    return read_cases_file(root / CASES_FILE, CasesFile,
                           lambda exc, src: validation_error(exc, source=src), None)


def read_rows(root: Path, name: str, required=RUN_COLUMNS) -> pd.DataFrame:
    """One of the suite's CSV files (``name`` as ``cases.yaml`` files it)."""
    return read_measurements_csv(Path(root) / name, required, keep_default_na=False)


def model_for(root: Path, ref: str) -> ModelSpec:
    """A model YAML beside ``cases.yaml`` (``models/x.yaml``) or a catalog name."""
    return load_model(Path(root) / ref if ref.endswith((".yaml", ".yml")) else ref)


def short(label: str) -> str:
    """``"175B (GPT-3)"`` -> ``175b``: the model part of a case id."""
    return label.split()[0].lower()


@dataclass(frozen=True)
class Run:
    """One measured Megatron run: model label, parallel plan and training setup."""

    label: str
    model_ref: str
    gpus: int
    plan: ParallelPlan
    micro_batch: int
    micro_batches: int
    ac: str
    seq_len: int = 2048

    @property
    def mode(self) -> str:
        """``full``, ``seqsel`` (SP + selective), ``seq``, ``sel`` or ``none``."""
        sp, ac = self.plan.sequence_parallel, self.ac
        return {(False, "full"): "full", (True, "selective"): "seqsel",
                (True, "none"): "seq", (False, "selective"): "sel",
                (False, "none"): "none"}.get((sp, ac), f"{'seq' if sp else ''}{ac}")


def _int(row, col: str, source: str) -> int:
    try:
        return int(row[col])
    except (TypeError, ValueError):
        raise ConfigError(f"not an integer: {row[col]!r}", source=source, field=col) from None


def run_of(row, spec: CasesFile, source: str) -> Run:
    """The :class:`Run` of one row of ``korthikanti_selene*.csv``.

    :raises ConfigError: a model without a YAML in ``cases.yaml`` or an unknown recompute.
    """
    label = row["model"]
    if label not in spec.models:
        raise ConfigError(f"no model for {label!r} in {CASES_FILE} (models:)", source=source,
                          field="model")
    if row["activation_recompute"] not in RECOMPUTE:
        raise ConfigError(f"unknown recompute {row['activation_recompute']!r}; valid: "
                          f"{', '.join(RECOMPUTE)}", source=source,
                          field="activation_recompute")
    tp, pp, dp, vp = (_int(row, c, source) for c in ("tensor_par", "pipeline_par",
                                                     "data_par", "pipeline_interleaving"))
    micro = _int(row, "microbatch", source)
    plan = ParallelPlan(pp=pp, dp_shard=dp, tp=tp, vp=vp, dp_mode="ddp",
                        schedule="interleaved_1f1b" if vp > 1 else "1f1b",
                        sequence_parallel=row["tensor_par_comm_type"] == "rs_ag")
    return Run(label, spec.models[label], _int(row, "gpus", source), plan, micro,
               _int(row, "global_batch", source) // (micro * dp),
               RECOMPUTE[row["activation_recompute"]])


NEMO_ID = re.compile(r"[^a-z0-9]+")


def nemo_id(row) -> str:
    """``LLAMA2-70B`` on 64 GPUs -> ``llama2-70b-64gpu``."""
    return f"{NEMO_ID.sub('-', str(row['model']).lower()).strip('-')}-{row['gpus']}gpu"


__all__ = ["CASES_FILE", "CasesFile", "RECOMPUTE", "Recipe", "Run", "default_root", "load",
           "model_for", "nemo_id", "read_rows", "run_of", "short", "Split"]
