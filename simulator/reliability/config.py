"""The ``reliability:`` section of a scenario: typed, unit-checked, defaults from a data file.

Every value with a dimension is a string with its unit (``"10 min"``, ``"2 TB/s"``,
``"6.5 per 1000 node-days"``); a bare number is refused. The section is merged over
``simulator/data/reliability.yaml`` (``defaults``) key by key before validation, so a
scenario states only what differs, and unknown keys are errors. Checks that need the
cluster (a scheduled node that does not exist, a spare pool larger than the cluster) are made
when the job plan is built (:mod:`simulator.reliability.plan`).
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from simulator.units import UnitError, parse_bandwidth, parse_size
from simulator.yamlio import read_yaml

from .quantities import parse_duration, parse_rate
from ..yamlio import data_file

CLASSES = ("node", "gpu", "nic", "link", "leaf_switch", "spine_switch", "software")
MECHANISMS = ("process_exit", "heartbeat", "health_check", "collective_timeout")
Mechanism = Literal["process_exit", "heartbeat", "health_check", "collective_timeout"]
# Counts (iterations, replicas...) past a quadrillion are typos; a float cannot hold past 1e308
MAX_COUNT = 10 ** 15
_EXCLUSIVE = {"checkpoint": ("interval", "every_iterations", "keras"),
              "job": ("iterations", "duration")}


def _invalid(message: str) -> PydanticCustomError:
    return PydanticCustomError("invalid", "{reason}", {"reason": message})


def exactly_one(model: BaseModel, keys: tuple[str, ...]) -> None:
    """Refuse ``model`` unless exactly one of ``keys`` is set (not None).

    :raises PydanticCustomError: ``give exactly one of a, b or c``.
    """
    if sum(getattr(model, k) is not None for k in keys) != 1:
        names = ", ".join(keys[:-1]) + f" or {keys[-1]}"
        raise _invalid(f"give exactly one of {names}")


def _checked(parse, positive: bool = False, what: str = "value"):
    """A before-validator that parses ``value`` with ``parse`` and keeps the text."""
    def check(value):
        try:
            parsed = parse(value)
        except UnitError as exc:
            raise _invalid(str(exc)) from None
        if positive and parsed <= 0:
            raise _invalid(f"{what} must be > 0")
        return value
    return BeforeValidator(check)


Duration = Annotated[str, _checked(parse_duration)]
PositiveDuration = Annotated[str, _checked(parse_duration, True, "duration")]
RateText = Annotated[str, _checked(lambda v: parse_rate(v).per_s)]
Bandwidth = Annotated[str, _checked(parse_bandwidth, True, "bandwidth")]
Size = Annotated[str | int, _checked(parse_size, True, "size")]


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FailureClass(_Cfg):
    """One component class: its failure process, repair time and how failures are seen."""

    rate: RateText = "0 per day"
    distribution: Literal["exponential", "weibull"] = "exponential"
    shape: float = Field(1.0, gt=0, description="Weibull shape k (k < 1: infant mortality)")
    repair: Duration = "24 h"
    repair_distribution: Literal["fixed", "exponential"] = "fixed"
    detected_by: list[Mechanism] = Field(default_factory=lambda: ["collective_timeout"],
                                         min_length=1)
    effect: Literal["auto", "interrupt", "reroute"] = "auto"


class Stragglers(_Cfg):
    rate: RateText = "0 per day"
    factor: float = Field(1.5, ge=1.0, description="compute slowdown of the slow GPU")
    duration: PositiveDuration = "1 h"


class ScheduledEvent(_Cfg):
    """A failure at a fixed wall-clock time: ``{at: 3 h, component: node, id: n12}``."""

    at: Duration
    component: Literal["node", "gpu", "nic", "link", "leaf_switch", "spine_switch",
                       "software", "straggler"]
    id: str | list[str] | None = None
    rank: int | None = Field(None, ge=0, le=MAX_COUNT)
    factor: float | None = Field(None, ge=1.0)
    duration: PositiveDuration | None = None


class Failures(_Cfg):
    baseline: Literal["llama3", "none"] = "llama3"
    node: FailureClass = FailureClass()
    gpu: FailureClass = FailureClass()
    nic: FailureClass = FailureClass()
    link: FailureClass = FailureClass()
    leaf_switch: FailureClass = FailureClass()
    spine_switch: FailureClass = FailureClass()
    software: FailureClass = FailureClass()
    stragglers: Stragglers = Stragglers()
    schedule: list[ScheduledEvent] = Field(default_factory=list)


class Detection(_Cfg):
    collective_timeout: PositiveDuration = "10 min"
    heartbeat_interval: PositiveDuration = "5 s"
    heartbeat_timeout: PositiveDuration = "30 s"
    health_check_interval: PositiveDuration = "5 min"
    monitor_interval: Duration = "0.1 s"

    @model_validator(mode="after")
    def _heartbeat(self):
        if parse_duration(self.heartbeat_timeout) < parse_duration(self.heartbeat_interval):
            raise _invalid("heartbeat_timeout must be >= heartbeat_interval")
        return self


class CommInit(_Cfg):
    """Communicator set-up time ``time * (gpus / at_gpus) ** exponent``."""

    time: Duration = "5 s"
    at_gpus: int = Field(2048, gt=0, le=MAX_COUNT)
    exponent: float = Field(1.0, ge=0.0)


class Restart(_Cfg):
    spare_nodes: int | None = Field(None, ge=0, le=MAX_COUNT)
    spare_fraction: float = Field(0.094, ge=0.0, le=1.0)
    spare_swap: Duration = "5 min"
    requeue_wait: Duration = "0 s"
    teardown: Duration = "10 s"
    diagnostics: Duration = "0 s"
    process_start: Duration = "60 s"
    comm_init: CommInit = CommInit()


class Keras(_Cfg):
    """TensorFlow ``BackupAndRestore(save_freq=...)``: restore goes back to the epoch start."""

    save_freq: Literal["epoch"] | Annotated[int, Field(gt=0, le=MAX_COUNT)] = "epoch"
    iterations_per_epoch: int = Field(gt=0, le=MAX_COUNT)


class Checkpoint(_Cfg):
    interval: PositiveDuration | None = None
    every_iterations: int | None = Field(None, gt=0, le=MAX_COUNT)
    keras: Keras | None = None
    mode: Literal["sync", "async"] = "async"
    state_dict: Literal["sharded", "full"] | None = None
    target: Literal["shared_fs", "local_nvme", "peer_memory"] = "shared_fs"
    replicas: int = Field(1, ge=1, le=MAX_COUNT)
    copy_to_shared_every: int | None = Field(None, ge=1, le=MAX_COUNT)
    size: Size | None = None
    overhead: Duration = "0 s"
    persist_overhead: Duration = "0 s"
    persist_slowdown: float = Field(0.0, ge=0.0)
    load: Literal["all_ranks", "rank0_broadcast"] = "all_ranks"

    @model_validator(mode="after")
    def _one_interval(self):
        exactly_one(self, _EXCLUSIVE["checkpoint"])
        if self.copy_to_shared_every and self.target == "shared_fs":
            raise _invalid("copy_to_shared_every needs target local_nvme or peer_memory")
        return self


class Storage(_Cfg):
    shared_fs_bandwidth: Bandwidth = "2 TB/s"
    shared_fs_read_bandwidth: Bandwidth | None = None
    per_node_bandwidth: Bandwidth = "25 GB/s"
    nvme_write_bandwidth: Bandwidth = "8 GB/s"
    nvme_read_bandwidth: Bandwidth = "12 GB/s"
    host_copy_bandwidth: Bandwidth | None = None


class Job(_Cfg):
    iterations: int | None = Field(None, gt=0, le=MAX_COUNT)
    duration: PositiveDuration | None = None
    iteration_time: PositiveDuration | None = None

    @model_validator(mode="after")
    def _one_length(self):
        exactly_one(self, _EXCLUSIVE["job"])
        return self


class Search(_Cfg):
    points: int = Field(13, ge=0, le=60, description="0 turns the interval search off")
    method: Literal["bracket", "grid"] = Field(
        "bracket", description="bracket: only the grid points around the best; grid: all")
    span: float = Field(8.0, gt=1.0)
    trials: int | None = Field(None, gt=0, le=1_000_000)


class ReliabilityCfg(_Cfg):
    """The whole section; see docs/reliability.md for every field."""

    job: Job = Job(duration="30 d")
    failures: Failures = Failures()
    detection: Detection = Detection()
    restart: Restart = Restart()
    checkpoint: Checkpoint = Checkpoint(interval="30 min")
    storage: Storage = Storage()
    search: Search = Search()

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            return data
        return merge_defaults(data)


BASELINE_KEY = "reliability.failures.baseline"


def drop_scenario_rates(data: dict, set_keys: set[str]) -> list[str]:
    """``--set reliability.failures.baseline=none`` on a scenario: the failure rates the
    scenario file itself gives are dropped too (every class starts at 0, as the option
    reads), except those given on the command line as well (``set_keys``: the --set keys).
    ``data`` (the scenario mapping) is changed in place; returns the classes dropped."""
    failures = (data.get("reliability") or {}).get("failures")
    if not isinstance(failures, dict):
        return []
    dropped = []
    for name in CLASSES:
        cls = failures.get(name)
        key = f"reliability.failures.{name}"
        if isinstance(cls, dict) and "rate" in cls and not {key, f"{key}.rate"} & set_keys:
            del cls["rate"]
            dropped.append(name)
    return dropped


def merge_defaults(data: dict) -> dict:
    """``data`` merged over the data file's defaults (lists and scalars replace)."""
    base = copy.deepcopy(default_section())
    failures = data.get("failures")
    if isinstance(failures, dict) and failures.get("baseline") == "none":
        for name in CLASSES:
            base["failures"][name]["rate"] = "0 per day"
    for section, keys in _EXCLUSIVE.items():
        given = data.get(section)
        if isinstance(given, dict) and any(k in given for k in keys):
            for k in keys:
                base[section].pop(k, None)
    return _deep_merge(base, data)


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


@lru_cache(maxsize=1)
def _data() -> dict:
    return read_yaml(data_file("reliability.yaml"),
                     "reliability data file")


def default_section() -> dict:
    """The ``defaults`` mapping of ``simulator/data/reliability.yaml``."""
    return _data()["defaults"]


def default_sources() -> dict:
    """Where each default comes from (``sources`` of the data file)."""
    return _data()["sources"]
