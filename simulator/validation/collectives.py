"""Compare simulated collectives with real A100 nccl-tests measurements.

The data live in ``validation/collectives/`` (repository root):

* ``measurements.csv``: one row per measured size, normalised from
  ``shared/validation-data/nccl-tests`` (see :func:`build_measurements`); every row keeps
  its ``source``. Measured values are copied, never edited; a value computed from another
  (Azure's summary gives time *or* busbw) is named in the ``derived`` column.
* ``cases.yaml``: per ``table_id``, how to simulate it (topology, overrides, ranks, op) and
  its ``split``: ``calibration`` tables may be used to fit constants
  (:mod:`simulator.validation.calibrate`), ``validation`` tables never are.

Accuracy is judged per validation table: median |busbw error| over sizes >= 1 MiB must be
<= :data:`BUSBW_THRESHOLD`, median |time error| over sizes <= 64 KiB <= :data:`TIME_THRESHOLD`.
"""

from __future__ import annotations

import math
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import networkx as nx
import numpy as np
import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.collectives.constants import ModelConstants, load_constants
from simulator.collectives.model import OPS, CollectiveModel, bus_factor
from simulator.collectives.run import build_cluster, run_collective, simulate_plans
from simulator.errors import ConfigError
from simulator.topology.generators import MULTI_NODE
from simulator.topology.loader import resolve_topology, topology_from_dict

SPLITS = ("calibration", "validation")
LARGE_BYTES = 1 << 20          # busbw is judged at sizes >= 1 MiB
SMALL_BYTES = 64 << 10         # time is judged at sizes <= 64 KiB
BUSBW_THRESHOLD = 0.10         # max median |busbw error| per validation table (>= 1 MiB)
TIME_THRESHOLD = 0.30          # max median |time error| per validation table (<= 64 KiB)
GOAL = 0.05                    # what we aim for on busbw

CASES_FILE = "cases.yaml"
MEASUREMENTS_FILE = "measurements.csv"
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


# ----------------------------------------------------------------------------- root
def default_root() -> Path:
    """``validation/collectives`` of the repository holding the ``simulator`` package,
    else of the current directory.

    :raises ConfigError: when neither has a ``cases.yaml``.
    """
    repo = Path(__file__).resolve().parents[2]
    candidates = [repo / "validation" / "collectives", Path.cwd() / "validation" / "collectives"]
    for c in candidates:
        if (c / CASES_FILE).is_file():
            return c
    raise ConfigError(f"no {CASES_FILE} found in {' or '.join(map(str, candidates))}",
                      field="--root")


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
    notes: str = ""


class CasesFile(BaseModel):
    """The top level of ``cases.yaml``."""

    model_config = ConfigDict(extra="forbid")

    description: str = ""
    measurements: str = MEASUREMENTS_FILE
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

    @property
    def op(self) -> str:
        return "+".join(self.ops)


def _pydantic_error(exc: ValidationError, source: str) -> ConfigError:
    errors = exc.errors()
    extra = [e for e in errors if e["type"] == "extra_forbidden"]
    if extra:
        loc = extra[0]["loc"]
        model = CaseSpec if len(loc) == 3 else CasesFile
        keys = ", ".join(repr(str(e["loc"][-1])) for e in extra)
        return ConfigError(f"unknown key(s) {keys}; valid: {', '.join(model.model_fields)}",
                           source=source, field=".".join(map(str, loc)))
    first = errors[0]
    loc = [str(x) for x in first["loc"]
           if not (isinstance(x, str) and (x in ("str", "int") or x.startswith("list[")))]
    reason = "missing required key" if first["type"] == "missing" else first["msg"]
    return ConfigError(reason, source=source, field=".".join(loc))


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated in one mapping (YAML would keep the last)."""


def _construct_unique(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise _DuplicateKey(key, key_node.start_mark.line + 1)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


class _DuplicateKey(Exception):
    def __init__(self, key, line):
        super().__init__(key, line)
        self.key, self.line = key, line


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _construct_unique)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=str(path)) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except _DuplicateKey as exc:
        raise ConfigError(f"duplicate key {exc.key!r} at line {exc.line} (YAML would silently "
                          f"keep only the last one)", source=str(path),
                          field=str(exc.key)) from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else "?"
        raise ConfigError(f"malformed YAML at line {line}: {exc.problem or exc.context}",
                          source=str(path)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"malformed YAML: {' '.join(str(exc).split())}",
                          source=str(path)) from None


def apply_overrides(data: dict, overrides: dict[str, Any], source: str, where: str) -> dict:
    """A deep copy of the topology mapping ``data`` with dotted keys set.

    Every key but the last must name an existing mapping (``params.node.nics`` needs
    ``params.node``); the loader then checks the value.

    :raises ConfigError: field ``<where>.<dotted key>`` when a parent is missing.
    """
    import copy
    out = copy.deepcopy(data)
    for key, value in overrides.items():
        parts = key.split(".")
        cur = out
        for i, part in enumerate(parts[:-1]):
            nxt = cur.get(part) if isinstance(cur, dict) else None
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {key!r}: the topology has no mapping "
                                  f"{'.'.join(parts[:i + 1])!r}", source=source,
                                  field=f"{where}.{key}")
            cur = nxt
        cur[parts[-1]] = value
    return out


def _build_graph(tid: str, spec: CaseSpec, source: str) -> tuple[Path, nx.Graph]:
    where = f"cases.{tid}"
    try:
        path = resolve_topology(spec.topology)
    except ConfigError as exc:
        raise ConfigError(exc.reason, source=source, field=f"{where}.topology") from None
    data = _read_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("params", {}), dict):
        raise ConfigError(f"topology file {path} is not a mapping with params", source=source,
                          field=f"{where}.topology")
    data = apply_overrides(data, spec.overrides, source, f"{where}.overrides")
    nodes = spec.nodes
    if data.get("generator") not in MULTI_NODE:
        if nodes not in (None, 1):
            raise ConfigError(f"topology {spec.topology!r} is a single server; nodes must be 1",
                              source=source, field=f"{where}.nodes")
        nodes = None
    try:
        G = topology_from_dict(data, source=str(path), nodes=nodes)
    except ConfigError as exc:
        f = exc.field or ""
        if f == "--nodes":
            fld = f"{where}.nodes"
        elif any(f == k or f.startswith(k + ".") or k.startswith(f + ".")
                 for k in spec.overrides) and f:
            fld = f"{where}.overrides.{f}"
        else:
            fld = f"{where}.topology"
        raise ConfigError(f"topology {spec.topology!r} ({f or 'file'}): {exc.reason}",
                          source=source, field=fld) from None
    return path, G


def load_measurements(root: Path | str | None = None, table_ids=None,
                      filename: str = MEASUREMENTS_FILE) -> pd.DataFrame:
    """Rows of ``measurements.csv``, only those of ``table_ids`` when given.

    :raises ConfigError: unreadable file or missing columns (named).
    """
    root = Path(root) if root is not None else default_root()
    path = root / filename
    try:
        df = pd.read_csv(path, dtype={"derived": str}, keep_default_na=True)
    except (OSError, pd.errors.ParserError) as exc:
        raise ConfigError(f"cannot read measurements: {exc}", source=str(path)) from None
    missing = [c for c in _REQUIRED if c not in df.columns]
    if missing:
        raise ConfigError(f"missing column(s) {', '.join(missing)}", source=str(path),
                          field=missing[0])
    if table_ids is not None:
        keep = set(table_ids)
        df = df[df["table_id"].isin(keep)]
    df = df.copy()
    df["derived"] = df.get("derived", pd.Series("", index=df.index)).fillna("")
    if "quality" not in df.columns:
        df["quality"] = ""
    df["quality"] = df["quality"].fillna("")
    unknown = sorted(set(df["collective"]) - set(OP_NAMES))
    if unknown:
        raise ConfigError(f"unknown collective(s) {', '.join(unknown)}", source=str(path),
                          field="collective")
    df["op"] = df["collective"].map(OP_NAMES)
    return df.reset_index(drop=True)


def load_cases(root: Path | str | None = None, splits=None) -> list[Case]:
    """Cases of ``<root>/cases.yaml`` with their graphs built and measurements attached.

    ``splits`` (e.g. ``("calibration",)``) keeps only those cases; only their measurement
    rows are read. With all splits, every table of ``measurements.csv`` must have a case and
    every case must have measurements.

    :raises ConfigError: naming ``cases.yaml`` (or ``measurements.csv``) and the dotted field:
        unknown keys, unknown topology, bad overrides, ranks out of range, an op that does
        not match the measured collective, a rank/node count that does not match the table.
    """
    root = Path(root) if root is not None else default_root()
    path = root / CASES_FILE
    source = str(path)
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping with a 'cases' key", source=source)
    try:
        spec = CasesFile.model_validate(data)
    except ValidationError as exc:
        raise _pydantic_error(exc, source) from None
    if splits is not None:
        bad = [s for s in splits if s not in SPLITS]
        if bad:
            raise ConfigError(f"unknown split(s) {bad}; valid: {', '.join(SPLITS)}",
                              field="splits")
    wanted = {tid: c for tid, c in spec.cases.items() if splits is None or c.split in splits}
    meas = load_measurements(root, table_ids=None if splits is None else wanted,
                             filename=spec.measurements)
    meas_source = str(root / spec.measurements)
    if splits is None:
        orphans = sorted(set(meas["table_id"]) - set(spec.cases))
        if orphans:
            raise ConfigError(f"table(s) {', '.join(orphans)} have no entry in {source}",
                              source=meas_source, field="table_id")
    cases = []
    for tid, c in wanted.items():
        where = f"cases.{tid}"
        ops = tuple([c.op] if isinstance(c.op, str) else c.op)
        for op in ops:
            if op not in OPS:
                raise ConfigError(f"unknown op {op!r}; valid: {', '.join(OPS)}", source=source,
                                  field=f"{where}.op")
        topo_path, G = _build_graph(tid, c, source)
        n_gpus = sum(1 for _, k in G.nodes(data="kind") if k == "gpu")
        ranks = list(range(n_gpus)) if c.ranks is None else list(c.ranks)
        if len(ranks) < 2 or len(set(ranks)) != len(ranks) or \
                any(not 0 <= r < n_gpus for r in ranks):
            raise ConfigError(f"ranks must be at least 2 distinct ranks in 0..{n_gpus - 1}, "
                              f"got {c.ranks}", source=source, field=f"{where}.ranks")
        rows = meas[meas["table_id"] == tid].sort_values(["op", "size_bytes"])
        if rows.empty:
            raise ConfigError(f"no rows for table {tid!r} in {meas_source}", source=source,
                              field=where)
        extra_ops = sorted(set(rows["op"]) - set(ops))
        if extra_ops:
            raise ConfigError(f"the table measures {', '.join(extra_ops)}, not listed in op "
                              f"({', '.join(ops)})", source=source, field=f"{where}.op")
        servers = {G.nodes[g]["server"] for g in G.nodes if G.nodes[g].get("kind") == "gpu"
                   and G.nodes[g]["rank"] in set(ranks)}
        m_ranks, m_nodes = set(rows["ranks"]), set(rows["nodes"])
        if m_ranks != {len(ranks)} or m_nodes != {len(servers)}:
            raise ConfigError(f"simulates {len(ranks)} ranks on {len(servers)} server(s) but "
                              f"the table measured {sorted(m_ranks)} ranks on "
                              f"{sorted(m_nodes)} node(s)", source=source,
                              field=f"{where}.ranks" if m_nodes == {len(servers)}
                              else f"{where}.nodes")
        cases.append(Case(tid, c.topology, topo_path, c.nodes, dict(c.overrides), ranks, ops,
                          c.split, c.nccl, c.notes, G, rows.reset_index(drop=True), source))
    return cases


# ----------------------------------------------------------------------- simulation
def _rel_err(sim: float, meas: float) -> float:
    if meas is None or not np.isfinite(meas) or meas <= 0 or not np.isfinite(sim):
        return float("nan")
    return (sim - meas) / meas


def _sendrecv_ring(model: CollectiveModel, size: int, ranks: list[int], fidelity: str):
    """nccl-tests ``sendrecv_perf -g N``: rank i sends to i+1 while receiving from i-1."""
    n = len(ranks)
    plans = [model.plan("send_recv", size, [ranks[i], ranks[(i + 1) % n]]) for i in range(n)]
    ends, _ = simulate_plans(model.cluster, plans, fidelity)
    t = max(ends)
    return t, size / t, plans[0].algo, plans[0].proto


def simulate_rows(case: Case, constants: ModelConstants, fidelity: str = "flow",
                  cluster=None) -> list[dict]:
    """Simulate every measured size of ``case``; one dict per row (see :data:`RESULT_COLUMNS`)."""
    cluster = cluster if cluster is not None else build_cluster(case.graph, constants)
    model = CollectiveModel(cluster, constants)
    out = []
    for r in case.measurements.itertuples(index=False):
        size = int(r.size_bytes)
        if r.op == "send_recv":
            t, busbw, algo, proto = _sendrecv_ring(model, size, case.ranks, fidelity)
        else:
            res = run_collective(model, r.op, size, case.ranks, fidelity=fidelity)
            t, busbw, algo, proto = res.time_s, res.busbw_bytes_per_s, res.algorithm, \
                res.protocol
        sim_time_us, sim_busbw = t * 1e6, busbw / 1e9
        meas_t, meas_b = float(r.time_us), float(r.busbw_GBps)
        out.append({
            "table_id": case.table_id, "split": case.split, "op": r.op, "nodes": int(r.nodes),
            "ranks": int(r.ranks), "size_bytes": size, "meas_time_us": meas_t,
            "meas_busbw_GBps": meas_b, "derived": r.derived or "",
            "sim_time_us": sim_time_us, "sim_busbw_GBps": sim_busbw, "algorithm": algo,
            "protocol": proto, "time_err": _rel_err(sim_time_us, meas_t),
            "busbw_err": _rel_err(sim_busbw, meas_b), "quality": r.quality or "",
        })
    return out


def simulate_case(case: Case, constants: ModelConstants | None = None,
                  fidelity: str = "flow") -> pd.DataFrame:
    """One row per measured size: measured and simulated time/busbw, errors (sim-meas)/meas."""
    k = constants or load_constants()
    try:
        rows = simulate_rows(case, k, fidelity)
    except KeyError as exc:                       # unknown fidelity from make_fabric
        raise ConfigError(str(exc.args[0]) if exc.args else str(exc),
                          field="--fidelity") from None
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def validate(root: Path | str | None = None, constants: ModelConstants | None = None,
             splits=SPLITS, fidelity: str = "flow") -> pd.DataFrame:
    """Simulate every case of the given splits; all rows in one DataFrame.

    ``df.attrs`` records the constants used (``calibrated``: the four fitted values) and the
    fidelity, for the report.
    """
    k = constants or load_constants()
    cases = load_cases(root, splits=None if tuple(splits) == SPLITS else tuple(splits))
    frames = [simulate_case(c, k, fidelity) for c in cases]
    df = pd.concat(frames, ignore_index=True) if frames else \
        pd.DataFrame(columns=RESULT_COLUMNS)
    df.attrs["fidelity"] = fidelity
    df.attrs["constants"] = calibrated_values(k)
    df.attrs["notes"] = {c.table_id: c.notes for c in cases}
    return df


def calibrated_values(k: ModelConstants) -> dict:
    """The calibrated constants of ``k`` (see :mod:`simulator.validation.calibrate`)."""
    from .calibrate import calibrated_values as values
    return values(k)


# ---------------------------------------------------------------------------- summary
def _median_abs(x: pd.Series) -> float:
    x = x.dropna()
    return float(np.median(np.abs(x))) if len(x) else float("nan")


def _max_abs(x: pd.Series) -> float:
    x = x.dropna()
    return float(np.max(np.abs(x))) if len(x) else float("nan")


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per table: split, points, median and max |busbw err| (>= 1 MiB) and |time err|
    (<= 64 KiB), and whether each meets its threshold (``None`` where nothing to judge).

    Errors are only taken on measured (not ``derived``) quantities.
    """
    rows = []
    for tid, g in df.groupby("table_id", sort=False):
        large = g[(g["size_bytes"] >= LARGE_BYTES) & (g["derived"] != "busbw_GBps")]
        small = g[(g["size_bytes"] <= SMALL_BYTES) & (g["derived"] != "time_us")]
        b_med, t_med = _median_abs(large["busbw_err"]), _median_abs(small["time_err"])
        rows.append({
            "table_id": tid, "split": g["split"].iloc[0], "op": "+".join(dict.fromkeys(g["op"])),
            "n": len(g), "n_large": int(large["busbw_err"].notna().sum()),
            "busbw_med": b_med, "busbw_max": _max_abs(large["busbw_err"]),
            "n_small": int(small["time_err"].notna().sum()),
            "time_med": t_med, "time_max": _max_abs(small["time_err"]),
            "busbw_ok": None if math.isnan(b_med) else bool(b_med <= BUSBW_THRESHOLD),
            "time_ok": None if math.isnan(t_med) else bool(t_med <= TIME_THRESHOLD),
            "quality": "WEAK" if (g["quality"] == "WEAK").any() else "",
        })
    return pd.DataFrame(rows, columns=["table_id", "split", "op", "n", "n_large", "busbw_med",
                                       "busbw_max", "n_small", "time_med", "time_max",
                                       "busbw_ok", "time_ok", "quality"])


def format_summary(summary: pd.DataFrame) -> str:
    """The summary as a fixed-width text table (percent errors)."""
    def pct(v):
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}%"

    def ok(v, split):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        mark = "ok" if v else "FAIL"
        return mark if split == "validation" else f"({mark})"

    table = pd.DataFrame({
        "table": summary["table_id"], "split": summary["split"], "op": summary["op"],
        "n": summary["n"],
        "busbw>=1MiB med": summary["busbw_med"].map(pct),
        "max": summary["busbw_max"].map(pct),
        "gate": [ok(v, s) for v, s in zip(summary["busbw_ok"], summary["split"])],
        "time<=64KiB med": summary["time_med"].map(pct),
        "max ": summary["time_max"].map(pct),
        "gate ": [ok(v, s) for v, s in zip(summary["time_ok"], summary["split"])],
        "weak": summary["quality"],
    })
    return table.to_string(index=False)


# ----------------------------------------------------------------------------- report
def _md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines)


def _fmt_size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def _fmt(v, spec="{:.2f}"):
    return "-" if v is None or (isinstance(v, float) and not np.isfinite(v)) else spec.format(v)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def write_report(df: pd.DataFrame, out_dir: Path | str, constants: ModelConstants | None = None,
                 title: str = "Collective validation against A100 nccl-tests") -> dict:
    """Write ``report.md``, ``results.csv`` and PNG plots (one per table, ``overview.png``).

    Returns the paths written, by kind.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create report folder: {exc.strerror or exc}",
                          source=str(out)) from None
    summary = summarize(df)
    results = out / "results.csv"
    df.to_csv(results, index=False)
    plots = {tid: out / f"busbw_{_safe(tid)}.png" for tid in summary["table_id"]}
    for tid, path in plots.items():
        _plot_table(df[df["table_id"] == tid], tid, path)
    overview = out / "overview.png"
    _plot_overview(summary, overview)

    consts = calibrated_values(constants) if constants is not None else \
        df.attrs.get("constants")
    notes = df.attrs.get("notes", {})
    cal = summary[summary["split"] == "calibration"]["table_id"].tolist()
    val = summary[summary["split"] == "validation"]["table_id"].tolist()
    vs = summary[summary["split"] == "validation"]
    fails = [f"{r.table_id} ({'busbw' if r.busbw_ok is False else ''}"
             f"{'+' if r.busbw_ok is False and r.time_ok is False else ''}"
             f"{'time' if r.time_ok is False else ''})"
             for r in vs.itertuples() if r.busbw_ok is False or r.time_ok is False]
    lines = [
        f"# {title}", "",
        "Simulated NCCL collectives compared with published nccl-tests measurements on A100 "
        "systems (`validation/collectives/measurements.csv`; every row keeps its source).", "",
        "**Split.** Calibration constants may be fitted only on the *calibration* tables "
        f"({', '.join(cal) or 'none here'}). The *validation* tables "
        f"({', '.join(val) or 'none here'}) are held out: they are never used to fit or tune "
        "anything, and their errors are the honest measure of accuracy. The only PCIe table "
        "(cn_doc_4x_a100pcie) is a calibration table, so PCIe-only servers have no held-out "
        "check.", "",
        f"**Thresholds** (per validation table): median |busbw error| <= "
        f"{BUSBW_THRESHOLD:.0%} over sizes >= 1 MiB, median |time error| <= "
        f"{TIME_THRESHOLD:.0%} over sizes <= 64 KiB. Goal: {GOAL:.0%} on busbw. "
        "Errors are (simulated - measured) / measured, taken only on measured quantities "
        "(a value marked `derived` is computed from the other one and not judged).", "",
        f"Fidelity: `{df.attrs.get('fidelity', '?')}`." + (
            " Constants: " + ", ".join(f"{k} = {v:.4g}" for k, v in consts.items()) + "."
            if consts else ""), "",
        ("**Validation tables failing a threshold:** " + ", ".join(fails) + ".")
        if fails else "**All validation tables meet the thresholds.**", "",
        "## Summary", "",
        "![overview](overview.png)", "",
    ]
    shown = summary.assign(
        busbw_med=summary["busbw_med"].map(lambda v: _fmt(100 * v, "{:.1f}%")),
        busbw_max=summary["busbw_max"].map(lambda v: _fmt(100 * v, "{:.1f}%")),
        time_med=summary["time_med"].map(lambda v: _fmt(100 * v, "{:.1f}%")),
        time_max=summary["time_max"].map(lambda v: _fmt(100 * v, "{:.1f}%")),
        busbw_ok=summary["busbw_ok"].map(lambda v: "-" if v is None else ("ok" if v else "FAIL")),
        time_ok=summary["time_ok"].map(lambda v: "-" if v is None else ("ok" if v else "FAIL")),
    )
    lines += [_md_table(shown), "",
              "Gates (`busbw_ok`, `time_ok`) apply to validation tables; on calibration "
              "tables they are shown for information only. `quality` WEAK marks tables whose "
              "provenance is weak or partial.", ""]
    for tid in summary["table_id"]:
        g = df[df["table_id"] == tid]
        lines += [f"## {tid} ({g['split'].iloc[0]})", ""]
        if notes.get(tid):
            lines += [" ".join(str(notes[tid]).split()), ""]
        lines += [f"![{tid}]({plots[tid].name})", ""]
        per = pd.DataFrame({
            "op": g["op"], "size": g["size_bytes"].map(_fmt_size),
            "meas time us": g["meas_time_us"].map(lambda v: _fmt(v)),
            "sim time us": g["sim_time_us"].map(lambda v: _fmt(v)),
            "time err": g["time_err"].map(lambda v: _fmt(100 * v, "{:+.1f}%")),
            "meas busbw GB/s": g["meas_busbw_GBps"].map(lambda v: _fmt(v)),
            "sim busbw GB/s": g["sim_busbw_GBps"].map(lambda v: _fmt(v)),
            "busbw err": g["busbw_err"].map(lambda v: _fmt(100 * v, "{:+.1f}%")),
            "algo/proto": g["algorithm"] + "/" + g["protocol"],
            "derived": g["derived"].replace("", "-"),
        })
        lines += [_md_table(per), ""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return {"report": report, "results": results, "plots": [*plots.values(), overview]}


def _figure(w=7.0, h=4.0, ncols=1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(w, h))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols)
    return fig, axes


def _size_label(v: float, _pos=None) -> str:
    n = int(round(v))
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g}{unit}"
    return f"{n}"


def _log_axes(ax, sizes) -> None:
    """log2 size axis with plain labels (mathtext tick labels are slow to lay out)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator
    lo = int(math.floor(math.log2(max(min(sizes), 1))))
    hi = int(math.ceil(math.log2(max(sizes))))
    step = max(1, math.ceil((hi - lo) / 8))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([2.0 ** e for e in range(lo, hi + 1, step)]))
    ax.xaxis.set_major_formatter(FuncFormatter(_size_label))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(2.0 ** (lo - 0.5), 2.0 ** (hi + 0.5))


def _plot_table(g: pd.DataFrame, tid: str, path: Path) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    fig, (ax_b, ax_t) = _figure(11, 4, 2)
    for i, (op, h) in enumerate(g.groupby("op", sort=False)):
        h = h.sort_values("size_bytes")
        color = f"C{i}"
        mb = h[h["meas_busbw_GBps"] > 0]
        ax_b.plot(mb["size_bytes"], mb["meas_busbw_GBps"], "o-", color=color,
                  label=f"{op} measured")
        ax_b.plot(h["size_bytes"], h["sim_busbw_GBps"], "x--", color=color,
                  label=f"{op} simulated")
        ax_t.plot(h["size_bytes"], h["meas_time_us"], "o-", color=color, label=f"{op} measured")
        ax_t.plot(h["size_bytes"], h["sim_time_us"], "x--", color=color,
                  label=f"{op} simulated")
    sizes = g["size_bytes"].tolist()
    for ax in (ax_b, ax_t):
        _log_axes(ax, sizes)
        ax.set_xlabel("size (bytes, log2)")
        ax.grid(True, alpha=0.3)
    ax_b.set_ylabel("busbw (GB/s)")
    ax_b.set_title(f"{tid}: busbw (o measured, x simulated)", fontsize=9)
    ax_b.legend(fontsize=7)
    ax_t.set_yscale("log")
    ax_t.yaxis.set_major_locator(LogLocator(base=10))
    ax_t.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax_t.yaxis.set_minor_formatter(NullFormatter())
    ax_t.set_ylabel("time (us, log)")
    ax_t.set_title(f"{tid}: time", fontsize=9)
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.13, top=0.91, wspace=0.25)
    fig.savefig(path, dpi=80)


def _plot_overview(summary: pd.DataFrame, path: Path) -> None:
    fig, (ax_b, ax_t) = _figure(12, 5, 2)
    y = np.arange(len(summary))
    colors = ["C0" if s == "calibration" else "C1" for s in summary["split"]]
    labels = [f"{t} [{s[:3]}]" for t, s in zip(summary["table_id"], summary["split"])]
    for ax, col, thr, name in ((ax_b, "busbw_med", BUSBW_THRESHOLD, "median |busbw err|, >= 1 MiB"),
                               (ax_t, "time_med", TIME_THRESHOLD, "median |time err|, <= 64 KiB")):
        vals = np.nan_to_num(summary[col].astype(float).to_numpy() * 100, nan=0.0)
        ax.barh(y, vals, color=colors)
        ax.axvline(thr * 100, color="red", ls="--", lw=1, label=f"threshold {thr:.0%}")
        if col == "busbw_med":
            ax.axvline(GOAL * 100, color="green", ls=":", lw=1, label=f"goal {GOAL:.0%}")
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f"{name} (%)")
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(fontsize=7)
    ax_t.set_yticklabels([])
    fig.suptitle("Per-table error (blue: calibration, orange: validation; 0 = no points)",
                 fontsize=9)
    fig.subplots_adjust(left=0.2, right=0.98, bottom=0.1, top=0.92, wspace=0.05)
    fig.savefig(path, dpi=80)


# ------------------------------------------------------------------ measurements.csv
def _quality(provenance: str) -> str:
    p = str(provenance).lower()
    return "WEAK" if ("weak" in p or "partial" in p) else ""


AZURE_TABLES = {(1, 8): "azure_ndmv4_1x8", (2, 1): "azure_ndmv4_2x1", (2, 8): "azure_ndmv4_2x8"}
AZURE_PROVENANCE = ("medium: vendor repo doc at a pinned commit, summary table of 3 sizes; "
                    "in-place numbers; nccl-tests run with CUDA graphs (-G 1) and a custom "
                    "NCCL_TOPO_FILE")
_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def build_measurements(shared_dir: Path | str, root: Path | str) -> pd.DataFrame:
    """Normalise the shared nccl-tests CSVs into ``<root>/measurements.csv`` and copy the raw
    files next to it (``<root>/raw/``). Measured values are copied unchanged.

    nccl-tests rows: out-of-place time and busbw. Azure summary rows: a latency row gives
    ``time_us`` (busbw derived as size/time x bus factor), a busbw row gives ``busbw_GBps``
    (time derived as size / (busbw / bus factor)); ``derived`` names the computed column.
    """
    shared, root = Path(shared_dir), Path(root)
    nt = pd.read_csv(shared / "nccl_tests_a100.csv")
    rows = []
    for r in nt.itertuples(index=False):
        rows.append({
            "table_id": r.table_id, "collective": OP_NAMES[r.collective], "nodes": r.nodes,
            "gpus_per_node": r.gpus_per_node, "ranks": r.ranks, "size_bytes": r.size_bytes,
            "time_us": r.oop_time_us, "busbw_GBps": r.oop_busbw_GBps, "derived": "",
            "placement": "out-of-place", "quality": _quality(r.provenance), "gpu": r.gpu,
            "interconnect": r.interconnect, "nccl": r.nccl, "provenance": r.provenance,
            "source": r.source,
        })
    az = pd.read_csv(shared / "azure_ndmv4_nccl_summary.csv")
    for r in az.itertuples(index=False):
        op = OP_NAMES[r.collective]
        m = re.fullmatch(r"(\d+)([KMG])", str(r.message_size))
        size = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
        bf = bus_factor(op, int(r.ranks))
        if r.metric == "latency":
            assert r.unit == "us"
            time_us = float(r.value)
            busbw = round(size / (time_us * 1e-6) * bf / 1e9, 6)
            derived = "busbw_GBps"
        else:
            assert r.metric == "busbw" and r.unit == "GB/s"
            busbw = float(r.value)
            time_us = round(size / (busbw / bf * 1e9) * 1e6, 3)
            derived = "time_us"
        rows.append({
            "table_id": AZURE_TABLES[(int(r.nodes), int(r.gpus_per_node))], "collective": op,
            "nodes": r.nodes, "gpus_per_node": r.gpus_per_node, "ranks": r.ranks,
            "size_bytes": size, "time_us": time_us, "busbw_GBps": busbw, "derived": derived,
            "placement": r.placement, "quality": "", "gpu": r.gpu,
            "interconnect": r.interconnect, "nccl": r.nccl, "provenance": AZURE_PROVENANCE,
            "source": r.source,
        })
    df = pd.DataFrame(rows, columns=MEASUREMENT_COLUMNS)
    root.mkdir(parents=True, exist_ok=True)
    df.to_csv(root / MEASUREMENTS_FILE, index=False)
    raw = root / "raw"
    raw.mkdir(exist_ok=True)
    for f in ("nccl_tests_a100.csv", "azure_ndmv4_nccl_summary.csv"):
        shutil.copy2(shared / f, raw / f)
    for f in sorted((shared / "raw").glob("*.txt")):
        shutil.copy2(f, raw / f.name)
    return df


__all__ = ["BUSBW_THRESHOLD", "GOAL", "LARGE_BYTES", "SMALL_BYTES", "SPLITS", "TIME_THRESHOLD",
           "Case", "CaseSpec", "apply_overrides", "build_measurements",
           "calibrated_values", "default_root", "format_summary", "load_cases",
           "load_measurements", "simulate_case", "simulate_rows", "summarize", "validate",
           "write_report"]
