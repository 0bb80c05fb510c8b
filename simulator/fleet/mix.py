"""Job mix files: many jobs for one cluster (``clustersim cluster``, docs/cluster.md).

A mix is YAML::

    name: two-jobs
    cluster: {topology: dgx-a100-superpod, nodes: 8}   # the one cluster every job shares
    scheduler: easy                     # fifo | easy | priority (simulator.fleet.schedulers)
    placement: topology                 # packed | spread | topology (simulator.fleet.placement)
    jobs:
      - {name: a, arrival: 0 s, scenario: quickstart, gpus: 16, steps: 500}
      - {name: b, arrival: 10 min, scenario: quickstart, gpus: 8, duration: 2 h,
         priority: 1, checkpoint: {interval: 30 min, save: 20 s, restore: 1 min}}

or, instead of ``jobs``, a ``generate`` section (:mod:`simulator.fleet.generate`) that draws
a seeded mix from a published cluster's job statistics. Every value is checked before
anything is simulated; a mistake is one :class:`~simulator.errors.ConfigError` naming the
file and the field (``jobs[3].gpus``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)
from pydantic_core import PydanticCustomError

from ..errors import ConfigError, validation_error
from ..reliability.config import Duration, PositiveDuration, RateText, exactly_one
from ..reliability.quantities import parse_duration
from ..scenario import ClusterCfg
from ..shipped import file_or_shipped
from ..inputs import path_name, regular_file
from ..yamlio import read_yaml

SCHEDULER_NAMES = ("fifo", "easy", "priority")
PLACEMENT_NAMES = ("packed", "spread", "topology")
MAX_JOBS = 100_000          # of a mix: the scheduler's queue and the tables stay small
_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class CheckpointPolicy(BaseModel):
    """A job's checkpoints: one every ``interval`` of its running time, each ``save`` long
    (the job stops meanwhile); a restart costs ``restore`` and loses the work done since
    the last checkpoint."""

    model_config = _STRICT
    interval: PositiveDuration
    save: Duration = "0 s"
    restore: Duration = "0 s"


class JobEntry(BaseModel):
    """One job of a mix: when it arrives, what it runs (a scenario, its GPU count) and for
    how long (``steps``, or ``duration``: its running time alone on the cluster)."""

    model_config = _STRICT
    name: str | None = Field(None, min_length=1, max_length=200)
    arrival: Duration
    scenario: str = Field(min_length=1)
    gpus: int = Field(gt=0, le=1 << 20)
    steps: int | None = Field(None, gt=0, le=10 ** 12)
    duration: PositiveDuration | None = None
    priority: int = Field(0, ge=-1000, le=1000)
    checkpoint: CheckpointPolicy | None = None
    set: dict[str, Any] = Field(default_factory=dict,
                                description="scenario key -> value, as --set")

    @model_validator(mode="after")
    def _one_length(self):
        exactly_one(self, ("steps", "duration"))
        return self


class Generate(BaseModel):
    """A seeded mix drawn from one cluster of a published job trace's summary
    (:mod:`simulator.fleet.generate`)."""

    model_config = _STRICT
    trace: Literal["acme"] = "acme"
    cluster: Literal["Seren", "Kalos", "Philly", "Helios"] = "Seren"
    jobs: int = Field(gt=0, le=MAX_JOBS)
    load: float = Field(0.7, gt=0.0, le=10.0, description="offered GPU-time / the cluster's")
    scenarios: dict[str, Annotated[int, Field(gt=0)]] = Field(
        min_length=1, description="scenario -> the fewest GPUs it runs on")
    min_gpus: int = Field(1, gt=0, description="jobs drawn smaller are this size")
    max_gpus: int | None = Field(None, gt=0, description="jobs drawn larger are this size")
    high_priority: float = Field(0.0, ge=0.0, le=1.0)
    checkpoint: CheckpointPolicy | None = None


class ScheduledFailure(BaseModel):
    """A failure at a fixed time: ``{at: 3 h, node: 12}`` (servers numbered from 0), or a
    component by its topology name: ``{at: 3 h, switch: leaf.r0.g1}`` (a leaf or spine
    switch), ``{gpu: n3.gpu2}``, ``{nic: n3.nic0}``, ``{link: [leaf.r0.g0, spine.3]}``."""

    model_config = _STRICT
    at: Duration
    node: int | None = Field(None, ge=0)
    switch: str | None = Field(None, min_length=1)
    gpu: str | None = Field(None, min_length=1)
    nic: str | None = Field(None, min_length=1)
    link: list[Annotated[str, Field(min_length=1)]] | None = Field(None, min_length=2,
                                                                   max_length=2)

    @model_validator(mode="after")
    def _one_target(self):
        exactly_one(self, ("node", "switch", "gpu", "nic", "link"))
        return self


class FleetFailures(BaseModel):
    """Failures across the fleet, each class at its rate (per component-time, or per node-
    or gpu-time of the whole cluster) and back after its repair time: ``node`` (``repair``),
    ``leaf_switch`` (``leaf_repair``), ``gpu``, ``nic``, ``link`` and ``spine_switch``
    (``<class>_repair``); and the failures of ``schedule``. What each stops or slows is in
    :mod:`simulator.fleet.failures`; the jobs stopped restart from their last checkpoint."""

    model_config = _STRICT
    node: RateText = "0 per day"
    repair: PositiveDuration = "24 h"
    leaf_switch: RateText = "0 per day"
    leaf_repair: PositiveDuration = "4 h"
    gpu: RateText = "0 per day"
    gpu_repair: PositiveDuration = "24 h"
    nic: RateText = "0 per day"
    nic_repair: PositiveDuration = "24 h"
    link: RateText = "0 per day"
    link_repair: PositiveDuration = "4 h"
    spine_switch: RateText = "0 per day"
    spine_repair: PositiveDuration = "4 h"
    schedule: list[ScheduledFailure] = Field(default_factory=list, max_length=MAX_JOBS)


MAX_FAILURES = 1e5     # failures a run may draw: 9.6e4 node failures took 4.9 s of CPU here
                       # (2026-12-05; each stops, requeues and restarts jobs)


class Limits(BaseModel):
    """Bounds on the work, checked before anything is simulated."""

    model_config = _STRICT
    max_work: float = Field(2e8, gt=0, description="simulated op-iterations (estimate)")
    max_failures: float = Field(MAX_FAILURES, gt=0, allow_inf_nan=False,
                                description="failures expected before the horizon (the "
                                "rates x the components x the horizon)")
    horizon: PositiveDuration = "365 d"


class Mix(BaseModel):
    model_config = _STRICT
    name: str = Field(min_length=1)
    description: str = ""
    cluster: ClusterCfg = Field(default_factory=ClusterCfg)
    scheduler: Literal["fifo", "easy", "priority"] = "easy"
    placement: Literal["packed", "spread", "topology"] = "packed"
    seed: int = Field(0, ge=0, lt=1 << 64)
    jobs: list[JobEntry] | None = Field(None, min_length=1, max_length=MAX_JOBS)
    generate: Generate | None = None
    failures: FleetFailures = Field(default_factory=FleetFailures)
    limits: Limits = Field(default_factory=Limits)
    power_budget_kw: float | None = Field(None, gt=0, allow_inf_nan=False)  # the site's

    @model_validator(mode="after")
    def _one_source(self):
        exactly_one(self, ("jobs", "generate"))
        return self

    @field_validator("cluster")
    @classmethod
    def _whole(cls, v: ClusterCfg) -> ClusterCfg:
        if v.gpus is not None:
            raise PydanticCustomError("whole", "a mix uses the whole cluster (each job says "
                                      "its gpus): remove cluster.gpus")
        return v


def resolve_mix(name_or_path: str | Path) -> Path:
    """A mix file, or a bare name looked up in ``scenarios/mixes/`` (the current folder's,
    then the shipped ones)."""
    path = path_name(name_or_path, "mix")
    if path.exists() and not path.is_file():
        regular_file(path, "mix file")
    return file_or_shipped(name_or_path, path, "mixes", "mix")


def load_mix(name_or_path: str | Path, sets: list[str] | None = None) -> tuple[Mix, str]:
    """Read and check a mix (a file or a shipped name), and the file it came from;
    ``sets``: ``KEY=VALUE`` overrides as ``--set``.

    :raises ConfigError: naming the file and the field of the first mistake.
    """
    from ..scenario import apply_sets
    path = resolve_mix(name_or_path)
    source = str(path)
    data = read_yaml(path, "mix file")
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", source=source)
    data = apply_sets(data, sets or [], source)
    try:
        mix = Mix.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, source=source, style="paren", brackets=True,
                               skip=("function-after[_one_length()]",
                                     "function-after[_one_source()]")) from None
    _check_names(mix, source)
    return mix, source


def _check_names(mix: Mix, source: str) -> None:
    seen: dict[str, int] = {}
    for i, job in enumerate(mix.jobs or []):
        name = job_name(job, i)
        if name in seen:
            raise ConfigError(f"name {name!r} is also jobs[{seen[name]}]'s", source=source,
                              field=f"jobs[{i}].name")
        seen[name] = i


def job_name(job: JobEntry, index: int) -> str:
    return job.name if job.name is not None else f"job{index}"


def arrival_s(job: JobEntry) -> float:
    return parse_duration(job.arrival)
