"""The study file: a base scenario, the axes to vary, the command, plots and questions.

A study is YAML::

    name: scaling-linearity
    command: run                          # run | compare | reliability (COMMANDS)
    options: {}                           # the command's own settings (e.g. trials)
    base: {scenario: llama2-7b-fsdp-128gpu, set: {training.micro_batch: 1}}
    seed: 0                               # written to simulation.seed of every point
    axes:
      grid: {cluster.nodes: [1, 2, 4]}    # cartesian product
      zip: {training.grad_accum: [...]}   # lists of equal length, varied together
    plots: [{kind: line, x: gpus, y: samples_per_s, ideal: linear, knee: 0.9}]
    questions: [{kind: scaling, ask: "Where does scaling stop being linear?"}]

Axis keys are dotted scenario keys (``cluster.links.ib-hdr.bw``) or, with the prefix
``topology.``, keys of the cluster's topology file (``topology.params.oversubscription``).
Every mistake is one :class:`~simulator.errors.ConfigError` naming the file and the field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import ConfigError, validation_error
from ..outpaths import confined
from ..shipped import file_or_shipped

MAX_POINTS = 100_000
TOPOLOGY_PREFIX = "topology."


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Base(_Strict):
    scenario: str = "quickstart"      # a shipped name, or a path (relative to the study file)
    set: dict[str, Any] = Field(default_factory=dict, description="dotted key -> value")


class Axes(_Strict):
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    zip: dict[str, list[Any]] = Field(default_factory=dict)


class LinePlot(_Strict):
    kind: Literal["line"]
    x: str
    y: str
    series: str | None = None          # one line per value of this column
    ideal: Literal["linear"] | None = None   # y0 * x / x0 from the first point
    anchor: Any = None                 # an x value whose y is drawn as a reference line
    knee: float | None = Field(None, gt=0, le=1)   # mark where y / ideal drops below this
    log_x: bool = False
    log_y: bool = False
    at: dict[str, Any] = Field(default_factory=dict)   # other axes pinned (default: first)
    title: str = ""
    file: str | None = None


class HeatmapPlot(_Strict):
    kind: Literal["heatmap"]
    x: str
    y: str
    z: str
    title: str = ""
    file: str | None = None


class ScalingQuestion(_Strict):
    """Speedup and efficiency of ``metric`` against ``x`` (ideal: proportional to x)."""

    kind: Literal["scaling"]
    ask: str
    x: str = "gpus"
    metric: str = "samples_per_s"
    threshold: float = Field(0.9, gt=0, le=1, description="efficiency that ends 'linear'")
    saturated: float = Field(0.8, gt=0, le=1, description="link utilisation called saturated")


class EffectQuestion(_Strict):
    """How ``metric`` changes along ``axis`` (other axes at ``at`` or their first value)."""

    kind: Literal["effect"]
    ask: str
    axis: str
    metric: str
    per: str | None = None             # one clause per value of this axis
    at: dict[str, Any] = Field(default_factory=dict)


class BestQuestion(_Strict):
    """The point with the lowest or highest ``metric`` (per value of ``per``)."""

    kind: Literal["best"]
    ask: str
    metric: str
    goal: Literal["min", "max"]
    per: str | None = None
    among: dict[str, list[Any]] = Field(default_factory=dict)   # only rows with these values


Plot = Annotated[LinePlot | HeatmapPlot, Field(discriminator="kind")]
Question = Annotated[ScalingQuestion | EffectQuestion | BestQuestion,
                     Field(discriminator="kind")]


class Study(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = ""
    command: str = "run"
    options: dict[str, Any] = Field(default_factory=dict, description="the command's own")
    base: Base = Field(default_factory=Base)
    seed: int = 0
    axes: Axes
    labels: dict[str, str] = Field(default_factory=dict, description="column -> label")
    plots: list[Plot] = Field(default_factory=list)
    questions: list[Question] = Field(default_factory=list)

    @field_validator("command")
    @classmethod
    def _command(cls, v: str) -> str:
        from .commands import COMMANDS
        if v not in COMMANDS:
            raise ValueError(f"unknown command {v!r}; valid: {', '.join(COMMANDS)}")
        return v

    def axis_keys(self) -> list[str]:
        return [*self.axes.grid, *self.axes.zip]

    def naming_keys(self) -> list[str]:
        """The axis keys that name a point in a sentence: every grid key and, of the zipped
        keys (varied together), the first whose values tell its points apart (all of them
        when none does)."""
        zipped = self.axes.zip
        named = next(([k] for k, values in zipped.items()
                      if len({repr(v) for v in values}) == len(values)), list(zipped))
        return [*self.axes.grid, *named]

    def label(self, column: str) -> str:
        return self.labels.get(column, column)


def parse_study(data: Any, source: str) -> Study:
    """Validate the top level of a study file (not yet its points)."""
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping (name, command, base, axes, ...)",
                          source=source)
    try:
        study = Study.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc, source) from None
    check_axes(study.axes, source)
    return study


def check_axes(axes: Axes, source: str) -> None:
    """Empty axes, empty lists, zip lists of unequal length, overlapping keys."""
    if not axes.grid and not axes.zip:
        raise ConfigError("no axis to vary; give grid: and/or zip: with at least one key",
                          source=source, field="axes")
    for kind, group in (("grid", axes.grid), ("zip", axes.zip)):
        for key, values in group.items():
            if not key or any(not part for part in key.split(".")):
                raise ConfigError("axis key must be a dotted key such as cluster.nodes",
                                  source=source, field=f"axes.{kind}.{key}")
            if not values:
                raise ConfigError("empty list; give at least one value", source=source,
                                  field=f"axes.{kind}.{key}")
    lengths = {k: len(v) for k, v in axes.zip.items()}
    if len(set(lengths.values())) > 1:
        text = ", ".join(f"{k}: {n}" for k, n in lengths.items())
        raise ConfigError(f"zip lists must have equal lengths, got {text}", source=source,
                          field="axes.zip")
    keys = [*axes.grid, *axes.zip]
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if a == b or a.startswith(b + ".") or b.startswith(a + "."):
                raise ConfigError(f"axes {a!r} and {b!r} set the same key", source=source,
                                  field=f"axes.{'zip' if a in axes.zip else 'grid'}.{a}")
    n = 1
    for values in axes.grid.values():
        n *= len(values)
    n *= max(lengths.values(), default=1)
    if n > MAX_POINTS:
        raise ConfigError(f"{n:,} points is more than {MAX_POINTS:,}; split the study",
                          source=source, field="axes")


def check_columns(study: Study, columns: list[str], source: str) -> None:
    """Plots and questions name columns of the results table and axes of the study."""
    axes = study.axis_keys()

    def need(value, field, choices, what="column"):
        if value is not None and value not in choices:
            raise ConfigError(f"unknown {what} {value!r}; choose from {', '.join(choices)}",
                              source=source, field=field)

    for i, p in enumerate(study.plots):
        for name in ("x", "y", "series", "z"):
            need(getattr(p, name, None), f"plots[{i}].{name}", columns)
        for key in getattr(p, "at", {}):
            need(key, f"plots[{i}].at.{key}", axes, "axis")
    for i, q in enumerate(study.questions):
        for name in ("x", "metric"):
            need(getattr(q, name, None), f"questions[{i}].{name}", columns)
        need(getattr(q, "axis", None), f"questions[{i}].axis", axes, "axis")
        need(getattr(q, "per", None), f"questions[{i}].per", columns)
        for key in getattr(q, "at", {}):
            need(key, f"questions[{i}].at.{key}", axes, "axis")
        for key in getattr(q, "among", {}):
            need(key, f"questions[{i}].among.{key}", columns)


def plot_file(plot, i: int) -> str:
    """The PNG name of ``study.plots[i]``: its ``file`` (with ``.png``), or one made from
    its columns."""
    if plot.file is not None:
        return plot.file if plot.file.endswith(".png") else f"{plot.file}.png"
    what = f"{plot.z}_by_{plot.x}_and_{plot.y}" if isinstance(plot, HeatmapPlot) \
        else f"{plot.y}_vs_{plot.x}"
    return f"{i + 1:02d}_{re.sub(r'[^A-Za-z0-9_.-]+', '-', what)}.png"


def plot_paths(study: Study, out: Path, source: str) -> list[Path]:
    """Where each plot of ``study`` goes in the output folder ``out``: a ``file`` the study
    names stays inside ``out`` (:func:`simulator.outpaths.confined`) and is not another
    plot's.

    :raises ConfigError: naming the study file ``source`` and ``plots[i].file``.
    """
    paths: dict[Path, int] = {}
    for i, p in enumerate(study.plots):
        field = f"plots[{i}].file"
        if p.file is not None:
            confined(out, p.file, field, source)           # as the study spells it
        path = confined(out, plot_file(p, i), field, source)
        if path in paths:
            raise ConfigError(f"{path.name!r} is also plots[{paths[path]}]'s file; name "
                              f"another", source=source, field=field)
        paths[path] = i
    return list(paths)


def _config_error(exc: ValidationError, source: str) -> ConfigError:
    return validation_error(exc, source=source, style="paren", brackets=True)


def resolve_study(name_or_path: str | Path) -> Path:
    """A study file path, or a bare name looked up in ``scenarios/studies/`` (cwd, then
    the shipped ones)."""
    return file_or_shipped(name_or_path, Path(name_or_path), "studies", "study")
