"""Constants, file layout and the ``cases.yaml`` schema of the collective validation
(:mod:`simulator.validation.collectives.validate`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import networkx as nx
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.errors import ConfigError, validation_error
from simulator.validation.common import (CASES_FILE, MEASUREMENTS_FILE, SPLITS, CasesFileBase,
                                         find_root)

LARGE_BYTES = 1 << 20          # busbw is judged at sizes >= 1 MiB
SMALL_BYTES = 64 << 10         # time is judged at sizes <= 64 KiB
BUSBW_THRESHOLD = 0.10         # max median |busbw error| per validation table (>= 1 MiB)
TIME_THRESHOLD = 0.30          # max median |time error| per validation table (<= 64 KiB)
GOAL = 0.05                    # what we aim for on busbw

MEASUREMENT_COLUMNS = ["table_id", "collective", "nodes", "gpus_per_node", "ranks",
                       "size_bytes", "time_us", "busbw_GBps", "derived", "placement",
                       "quality", "gpu", "interconnect", "nccl", "provenance", "source"]
_REQUIRED = ["table_id", "collective", "nodes", "gpus_per_node", "ranks", "size_bytes",
             "time_us", "busbw_GBps", "source"]

# nccl-tests / NCCL spellings -> our op names
OP_NAMES = {"all_reduce": "all_reduce", "allreduce": "all_reduce",
            "all_gather": "all_gather", "allgather": "all_gather",
            "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
            "broadcast": "broadcast", "reduce": "reduce",
            "alltoall": "all_to_all", "all_to_all": "all_to_all",
            "sendrecv": "send_recv", "send_recv": "send_recv"}

RESULT_COLUMNS = ["table_id", "split", "op", "nodes", "ranks", "size_bytes", "meas_time_us",
                  "meas_busbw_GBps", "derived", "sim_time_us", "sim_busbw_GBps", "algorithm",
                  "protocol", "time_err", "busbw_err", "quality"]


def default_root() -> Path:
    """``validation/collectives`` of the repository holding the ``simulator`` package,
    else of the current directory.

    :raises ConfigError: when neither has a ``cases.yaml``.
    """
    return find_root("collectives")


# ---------------------------------------------------------------------- cases.yaml
class CaseSpec(BaseModel):
    """One entry of ``cases.yaml`` (keyed by ``table_id``)."""

    model_config = ConfigDict(extra="forbid")

    topology: str
    nodes: int | None = Field(default=None, ge=1)
    overrides: dict[str, Any] = Field(default_factory=dict)
    ranks: list[int] | None = None
    op: str | list[str]
    split: Literal["calibration", "validation"]
    nccl: str = ""
    # nccl-tests -G: the measured loop was replayed from a CUDA graph, so the per-call
    # launch overhead of the model (calibration.yaml launch_overhead_us) is not paid.
    cuda_graph: bool = False
    # A calibration table that informs only these fitted constants (simulator/validation/
    # collectives/fitted.py); None: every constant.
    fits: list[str] | None = None
    notes: str = ""


class CasesFile(CasesFileBase):
    """The top level of ``cases.yaml``."""

    cases: dict[str, CaseSpec]


@dataclass
class Case:
    """A measured table and how to simulate it (graph built, measurements attached)."""

    table_id: str
    topology: str
    topology_path: Path
    nodes: int | None
    overrides: dict
    ranks: list[int]
    ops: tuple[str, ...]
    split: str
    nccl: str
    notes: str
    graph: nx.Graph = field(repr=False)
    measurements: pd.DataFrame = field(repr=False)
    source: str = ""
    cuda_graph: bool = False
    fits: tuple[str, ...] | None = None

    @property
    def op(self) -> str:
        return "+".join(self.ops)


def _pydantic_error(exc: ValidationError, source: str) -> ConfigError:
    """A cases file's error as one line: an unknown key lists the valid keys of its level
    (a case's, or the file's)."""
    return validation_error(exc, source=source, style="keys", skip=("str", "int", "list["),
                            valid=lambda loc: (CaseSpec if len(loc) == 3
                                               else CasesFile).model_fields)


__all__ = ["BUSBW_THRESHOLD", "CASES_FILE", "GOAL", "LARGE_BYTES", "MEASUREMENTS_FILE",
           "MEASUREMENT_COLUMNS", "OP_NAMES", "RESULT_COLUMNS", "SMALL_BYTES", "SPLITS",
           "TIME_THRESHOLD", "Case", "CaseSpec", "CasesFile", "default_root"]
