"""Constants, file layout and the ``cases.yaml`` schema of the training validation
(:mod:`simulator.validation.training.validate`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from simulator.errors import ConfigError, validation_error
from simulator.pipeline import Setup
from simulator.scenario import Scenario
from simulator.validation.common import (CASES_FILE, MEASUREMENTS_FILE, SPLITS, CasesFileBase,
                                         find_root)

THROUGHPUT_METRICS = ("samples_per_s", "tflops_per_gpu")
METRICS = THROUGHPUT_METRICS + ("scaling_efficiency",)
THROUGHPUT_THRESHOLD = 0.15    # max |relative error| of a validation throughput case
SCALING_THRESHOLD = 0.05       # max |error| of a validation scaling efficiency (5 points)
MEASUREMENT_COLUMNS = ["measurement_id", "framework", "model", "hardware", "gpu", "nodes",
                       "gpus", "precision", "precision_label", "micro_batch", "seq_len",
                       "grad_accum", "metric", "unit", "value", "value_raw", "scaling_factor",
                       "scaling_raw", "scaling_type", "settings_note", "notes", "source"]
_REQUIRED = ["measurement_id", "gpu", "gpus", "precision", "micro_batch", "seq_len",
             "grad_accum", "metric", "value", "scaling_factor", "source"]
RESULT_COLUMNS = ["case", "split", "metric", "measurement", "measured", "simulated", "error",
                  "error_kind", "threshold", "ok", "model", "gpus", "precision",
                  "iteration_time_s", "mfu", "compute_s", "exposed_comm_s",
                  "peak_memory_gib", "oom"]

SOURCE_FILES = ("dle_a100_training_scaling.csv", "fsdp_a100_published_throughput.csv",
                "tf_distribution_a100_measurements.csv")


def default_root() -> Path:
    """``validation/training`` of the repository holding ``simulator``, else of the cwd.

    :raises ConfigError: when neither has a ``cases.yaml``.
    """
    return find_root("training")


# ---------------------------------------------------------------------- cases.yaml
class ScalingSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    of: str                 # the N-GPU case
    baseline: str           # the 1-GPU case


class CaseSpec(BaseModel):
    """One entry of ``cases.yaml`` (keyed by case id)."""

    model_config = ConfigDict(extra="forbid")

    scenario: str | dict[str, Any] | None = None
    set: list[str] = []
    scaling: ScalingSpec | None = None
    metric: Literal["samples_per_s", "tflops_per_gpu", "scaling_efficiency"]
    # how the source counted the FLOPs of its TFLOP/s: model FLOPs (6 N s + 12 L h s^2 per
    # sequence, the simulator's metric) or Megatron's formula with recomputation
    flops: Literal["model", "megatron-recompute"] = "model"
    measurement: str
    measured: float
    split: Literal["calibration", "validation"]
    notes: str = ""


class CasesFile(CasesFileBase):
    cases: dict[str, CaseSpec]


@dataclass
class Case:
    """A measured number and how to simulate it (setup built, measurement attached)."""

    case_id: str
    split: str
    metric: str
    measurement_id: str
    measured: float
    notes: str
    measurement: dict = field(repr=False)
    flops: str = "model"                 # tflops_per_gpu counting (CaseSpec.flops)
    scenario: Scenario | None = field(default=None, repr=False)
    scenario_ref: str = ""               # shipped name/path, or "inline"
    sets: tuple[str, ...] = ()
    setup: Setup | None = field(default=None, repr=False)
    of: "Case | None" = field(default=None, repr=False)
    baseline: "Case | None" = field(default=None, repr=False)
    source: str = ""

    @property
    def is_scaling(self) -> bool:
        return self.metric == "scaling_efficiency"

    def dependencies(self) -> list["Case"]:
        return [self.of, self.baseline] if self.is_scaling else []


def _pydantic_error(exc: ValidationError, source: str) -> ConfigError:
    """A cases file's first error as one line."""
    return validation_error(exc, source=source, style="keys",
                            skip=("str", "float", "int", "ScalingSpec", "list[", "dict[",
                                  "literal["))


__all__ = ["CASES_FILE", "MEASUREMENTS_FILE", "MEASUREMENT_COLUMNS", "METRICS", "RESULT_COLUMNS",
           "SCALING_THRESHOLD", "SOURCE_FILES", "SPLITS", "THROUGHPUT_METRICS",
           "THROUGHPUT_THRESHOLD", "Case", "CaseSpec", "CasesFile", "ScalingSpec",
           "default_root"]
