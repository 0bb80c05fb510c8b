"""The commands a study can run per point, and the worker's entry point :func:`evaluate`.

A command is a point function, ``(scenario, point) -> list of result rows`` (the point's
``options`` are the study's options for the command, validated), named as
``"module:function"`` and imported only in the process that runs it (so the study runner
does not import every command's dependencies), plus an optional check run on every
point's scenario before anything runs, and the columns its rows have (plots and questions
are checked against them when the study is loaded).
"""

from __future__ import annotations

import importlib
import os
import socket
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import yaml

from pydantic import ValidationError

from ..errors import ClusterSimError, ConfigError, validation_error
from .adapters import COMPARE_COLUMNS, RELIABILITY_COLUMNS

# Columns every row has, whatever the command.
BASE_COLUMNS = ("point", "index", "status", "error", "wall_s", "worker")

RUN_COLUMNS = (
    "iteration_time_s", "samples_per_s", "tokens_per_s", "tokens_per_s_per_gpu",
    "tflops_per_gpu", "mfu", "compute_s", "comm_s", "exposed_comm_s", "wait_s",
    "memory_wait_s", "gpu_utilization", "peak_memory_gib", "oom", "oom_at", "events",
    "gpus", "global_batch", "exposed_comm_share", "busiest_link", "busiest_link_type",
    "busiest_link_util", "busiest_phase", "busiest_phase_util", "top_exposed_phase",
    "link_util_by_role", "exposed_by_phase", "extrapolated",
)


@dataclass(frozen=True)
class Command:
    target: str                   # "module:function": (Scenario, point) -> list[dict]
    check: str | None             # "module:function": (Scenario, topology dict) -> None
    columns: tuple[str, ...]      # the columns of its rows (besides BASE_COLUMNS)
    help: str
    keys: tuple[str, ...] = ()    # columns that tell a point's rows apart (e.g. strategy)
    options: str | None = None    # "module:Model": a pydantic model of the study's options


COMMANDS: dict[str, Command] = {
    "run": Command("simulator.study.runpoint:run_point", "simulator.study.runpoint:check_point",
                   RUN_COLUMNS, "one training iteration per point, as `clustersim run`"),
    "compare": Command("simulator.study.adapters:compare_point",
                       "simulator.study.runpoint:check_common", COMPARE_COLUMNS,
                       "strategies side by side per point, as `clustersim compare`",
                       keys=("strategy",), options="simulator.study.adapters:CompareOptions"),
    "reliability": Command("simulator.study.adapters:reliability_point",
                           "simulator.study.runpoint:check_point", RELIABILITY_COLUMNS,
                           "the whole job with failures per point, as `clustersim reliability`",
                           options="simulator.study.adapters:ReliabilityOptions"),
}


def resolve(target: str):
    """The function named ``"module:function"``."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def parse_options(command: str, options: dict, source: str) -> dict:
    """The study's ``options`` validated by the command's model (defaults filled in).

    :raises ConfigError: (field ``options.<key>``) for an unknown key or a bad value, or
        any option given to a command that has none.
    """
    target = COMMANDS[command].options
    if target is None:
        if options:
            raise ConfigError(f"command {command!r} takes no options", source=source,
                              field="options")
        return {}
    try:
        return resolve(target).model_validate(options).model_dump(mode="json")
    except ValidationError as exc:
        raise validation_error(exc, source=source, prefix="options", style="paren") from None


def checker(command: str):
    """The command's per-point check, or None."""
    target = COMMANDS[command].check
    return resolve(target) if target else None


def evaluate(point: dict) -> list[dict]:
    """Run one point (in whatever process gets it); never raises for a failing point.

    Returns the command's rows with ``status`` ``ok``, or one row with ``status`` ``error``
    and the error in one line. ``wall_s`` and ``worker`` say how long it took and where.
    """
    start = time.perf_counter()
    try:
        from ..scenario import scenario_from_dict
        with tempfile.TemporaryDirectory(prefix="clustersim-point-") as tmp:
            data = materialise(point, Path(tmp))
            scn = scenario_from_dict(data, f"point {point['id']}")
            rows = [{"status": "ok", "error": "", **row}
                    for row in resolve(point["target"])(scn, point)]
    except Exception as exc:                 # noqa: BLE001 (a failing point is data)
        rows = [{"status": "error", "error": error_line(exc)}]
    wall = time.perf_counter() - start
    where = f"{socket.gethostname()}:{os.getpid()}"
    return [{**row, "wall_s": wall, "worker": where} for row in rows]


def materialise(point: dict, folder: Path) -> dict:
    """The point's scenario data with its topology (and model file) written to ``folder``
    and referred to by path there."""
    data = dict(point["scenario"])
    topo = folder / "topology.yaml"
    topo.write_text(yaml.safe_dump(point["topology"], sort_keys=False))
    data["cluster"] = {**(data.get("cluster") or {}), "topology": str(topo)}
    if point.get("model_text") is not None:
        model = folder / "model.yaml"
        model.write_text(point["model_text"])
        data["model"] = str(model)
    return data


def error_line(exc: BaseException) -> str:
    """A user mistake as its message; anything else with its type and where it happened."""
    text = " ".join(str(exc).split())
    if isinstance(exc, ClusterSimError):
        return text
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {text}{where}"
