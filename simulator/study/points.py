"""From a study to its points: axes expanded, each point's scenario resolved and checked.

A point is a plain, picklable mapping that holds everything a worker needs, so it runs the
same on this machine or on a Dask worker elsewhere: the resolved scenario data, the
topology file's data (after ``topology.*`` keys) and the model file's text when the model
is a file. Its ``id`` is a hash of exactly that (plus the command), so resuming does not
depend on the order of the axes or of their values.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..scenario import resolve_scenario, scenario_from_dict
from ..topology.loader import resolve_topology
from ..inputs import read_text
from ..yamlio import read_yaml
from .spec import TOPOLOGY_PREFIX, Study


@dataclass
class LoadedStudy:
    """A validated study: its spec, its file, and its points in axis order."""

    spec: Study
    source: str
    points: list[dict]


def set_dotted(data: dict, key: str, value: Any) -> None:
    """``data[a][b][c] = value`` for ``key = "a.b.c"``, creating mappings on the way.

    :raises ConfigError: (field = key) when a part on the way is not a mapping.
    """
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise ConfigError(f"{part!r} is not a mapping, cannot set {key}", field=key)
    node[parts[-1]] = copy.deepcopy(value)


def canonical(value: Any) -> Any:
    """``value`` with mapping keys as strings, so it serialises the same way every time."""
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def cell(value: Any):
    """A table cell: scalars as they are, anything else as JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(canonical(value), sort_keys=True, default=str)


def point_id(command: str, scenario: dict, topology: dict, model_text: str | None,
             options: dict | None = None) -> str:
    """A stable hash of what a point computes (16 hex digits)."""
    blob = json.dumps(canonical({"command": command, "scenario": scenario,
                                 "topology": topology, "model": model_text,
                                 "options": options or {}}),
                      sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def axis_values(study: Study) -> list[dict[str, Any]]:
    """Every combination of axis values: the grid's product times the zip's rows."""
    grid = study.axes.grid
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    z = study.axes.zip
    rows = [dict(zip(z, values)) for values in zip(*z.values())] if z else [{}]
    return [{**c, **r} for c in combos for r in rows]


class _Resolver:
    """Reads the base scenario, topologies and model files once; resolves each point."""

    def __init__(self, study: Study, source: str):
        self.study, self.source = study, source
        self.folder = Path(source).parent
        try:
            path = self._find(study.base.scenario, resolve_scenario)
        except ConfigError as exc:
            raise ConfigError(exc.reason, source=source, field="base.scenario") from None
        self.scenario_path = str(path)
        data = read_yaml(path, "scenario file")
        if not isinstance(data, dict):
            raise ConfigError("top level must be a mapping", source=str(path))
        self.base = data
        self._files: dict[str, Any] = {}

    def _find(self, name: str, resolve) -> Path:
        """A path relative to the study file, else what ``resolve`` finds (cwd, shipped)."""
        local = self.folder / name
        return local if local.is_file() else resolve(name)

    def resolve(self, values: dict[str, Any]) -> tuple[dict, dict, str | None]:
        data = copy.deepcopy(self.base)
        set_dotted(data, "simulation.seed", self.study.seed)
        topo_sets = {}
        for where, items in (("base.set", self.study.base.set), ("axes", values)):
            for key, value in items.items():
                if key.startswith(TOPOLOGY_PREFIX):
                    topo_sets[key[len(TOPOLOGY_PREFIX):]] = value
                    continue
                try:
                    set_dotted(data, key, value)
                except ConfigError as exc:
                    raise self.error(exc.reason, key, values, where) from None
        self._not_overridden(data, topo_sets, values)
        topology = self._topology(data, topo_sets, values)
        return data, topology, self._model_text(data)

    def _not_overridden(self, data: dict, topo_sets: dict, values: dict) -> None:
        """A ``topology.params.nodes`` the scenario's ``cluster.nodes`` would override (the
        generator takes the scenario's count): refused, not silently ignored."""
        nodes = (data.get("cluster") or {}).get("nodes") if isinstance(
            data.get("cluster"), dict) else None
        if "params.nodes" in topo_sets and nodes is not None:
            raise self.error(f"the scenario's cluster.nodes ({nodes!r:.20}) overrides it, so "
                             f"every point would have {nodes!r:.20} nodes; vary cluster.nodes "
                             f"instead", TOPOLOGY_PREFIX + "params.nodes", values,
                             "axes" if TOPOLOGY_PREFIX + "params.nodes" in values
                             else "base.set")

    def _topology(self, data: dict, sets: dict, values: dict) -> dict:
        name = str((data.get("cluster") or {}).get("topology", "dgx-a100"))
        try:
            path = self._find(name, resolve_topology)
        except ConfigError as exc:
            raise self._located(exc, "cluster.topology", values) from None
        topology = copy.deepcopy(self._read(path, "topology file"))
        if not isinstance(topology, dict):
            raise ConfigError("top level must be a mapping", source=str(path))
        for key, value in sets.items():
            try:
                set_dotted(topology, key, value)
            except ConfigError as exc:
                raise self._located(exc, TOPOLOGY_PREFIX + key, values) from None
        return topology

    def _model_text(self, data: dict) -> str | None:
        name = data.get("model")
        if not isinstance(name, str) or not name.endswith((".yaml", ".yml")):
            return None
        path = self.folder / name if (self.folder / name).is_file() else Path(name)
        if not path.is_file():
            return None                       # the worker reports the missing file
        return self._read(path, None)

    def _read(self, path: Path, what: str | None):
        key = str(path)
        if key not in self._files:
            self._files[key] = read_yaml(path, what) if what else read_text(path, "model file")
        return self._files[key]

    # ---------------------------------------------------------------- error location
    def _located(self, exc: ConfigError, field: str, values: dict) -> ConfigError:
        return self.error(exc.reason, field, values)

    def error(self, reason: str, field: str, values: dict, where: str = "") -> ConfigError:
        """Attribute a problem with scenario key ``field`` to the axis or ``base.set`` key
        that set it, else to the base scenario file."""
        def owner(keys):
            return next((k for k in keys if field == k or field.startswith(k + ".")
                         or k.startswith(field + ".")), None)
        axes = self.study.axes
        key = owner(values) if where != "base.set" else None
        if key is not None:
            kind = "zip" if key in axes.zip else "grid"
            value = "" if "(got " in reason else f" (value {values[key]!r})"
            return ConfigError(reason + value, source=self.source, field=f"axes.{kind}.{key}")
        key = owner(self.study.base.set)
        if key is not None:
            return ConfigError(reason, source=self.source, field=f"base.set.{key}")
        return ConfigError(f"{reason} (in the base scenario {self.scenario_path})",
                           source=self.source, field=field)


def expand(study: Study, source: str, check=None, options: dict | None = None) -> list[dict]:
    """The study's points, each validated: its scenario, then ``check(scenario, topology)``
    (the command's own checks, e.g. that the model and strategy exist).

    :raises ConfigError: naming the study file and the axis or key at fault, before any
        point runs.
    """
    from .commands import COMMANDS
    target = COMMANDS[study.command].target
    resolver = _Resolver(study, source)
    points, seen = [], {}
    for index, values in enumerate(axis_values(study)):
        data, topology, model_text = resolver.resolve(values)
        try:
            scn = scenario_from_dict(data, resolver.scenario_path)
            if check is not None:
                check(scn, topology)
        except ConfigError as exc:
            raise resolver.error(exc.reason, _scenario_field(exc), values) from None
        pid = point_id(study.command, data, topology, model_text, options)
        if pid in seen:
            raise ConfigError(f"points {seen[pid]} and {index} are the same scenario "
                              f"({values}); remove the repeated value", source=source,
                              field="axes")
        seen[pid] = index
        points.append({"id": pid, "index": index, "command": study.command, "target": target,
                       "params": values, "scenario": data, "topology": topology,
                       "model_text": model_text, "options": options or {},
                       "source": source})
    return points


def _scenario_field(exc: ConfigError) -> str:
    """The scenario key an error is about (topology errors map to ``topology.*`` or
    ``cluster.links``)."""
    field = exc.field or ""
    if exc.source == "cluster.links":
        return "cluster." + field
    if field == "--nodes":
        return "cluster.nodes"
    if exc.source == "topology":
        return TOPOLOGY_PREFIX + field
    return field
