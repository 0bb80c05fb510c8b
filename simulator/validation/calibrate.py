"""Fit the collective model's calibration constants on the calibration split only.

Four constants are fitted, within bounds:

=========================  ==========  =====================================================
``launch_overhead_s``      0 - 60 us   per-collective launch cost added to every latency
``link_efficiency.nvlink`` 0.5 - 1.0   usable fraction of NVLink bandwidth
``link_efficiency.net``    0.5 - 1.0   usable fraction of NIC / network bandwidth
``pcie_p2p_efficiency``    0.05 - 1.0  GPU-to-GPU over PCIe (no NVLink), fraction of links
=========================  ==========  =====================================================

The objective is the mean over every calibration row (all sizes) of
``log(simulated time / measured time) ** 2``. It is minimised by a bounded Nelder-Mead
(numpy only, deterministic) in coordinates scaled to [0, 1], restarted once from its best
point, then polished by a compass search. Inside the fit the ``analytical`` fidelity is used:
a collective alone on the fabric takes the same time as with ``flow``.

Only tables whose ``split`` is ``calibration`` in ``cases.yaml`` are read; validation tables
are never loaded (checked, not assumed).
"""

from __future__ import annotations

import datetime as _dt
import math
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from simulator.cluster import Cluster
from simulator.collectives.constants import ModelConstants, load_constants
from simulator.errors import ConfigError
from simulator.yamlio import write_yaml
from simulator.validation import collectives as vc

# Fitted constants with their bounds. Names are dotted paths into ModelConstants
# (``field`` or ``field.key`` of a dict field); ``launch_overhead_us`` is in microseconds.
BOUNDS: dict[str, tuple[float, float]] = {
    "launch_overhead_us": (0.0, 60.0),
    "link_efficiency.nvlink": (0.5, 1.0),
    "link_efficiency.net": (0.5, 1.0),
    "pcie_p2p_efficiency": (0.05, 1.0),
    "protocol_bw_efficiency.LL": (0.2, 1.0),
    "protocol_bw_efficiency.LL128": (0.2, 1.0),
    "protocol_latency_factor.LL": (0.5, 3.0),
    "protocol_latency_factor.LL128": (0.5, 3.0),
    "protocol_latency_factor.Simple": (0.5, 3.0),
}
PARAMS = tuple(BOUNDS)
# Two stages. Saturation first: link efficiencies (and Simple's latency, the protocol
# large messages use) on rows of at least 64 MiB, where bandwidth dominates; then the
# launch overhead and the small-message protocols on every row, with stage 1 held fixed.
# Fitting everything at once let noisy mid-size rows drag link efficiencies below what
# large transfers measure.
STAGES: tuple[tuple[int, tuple[str, ...]], ...] = (
    (64 << 20, ("link_efficiency.nvlink", "link_efficiency.net", "pcie_p2p_efficiency",
                "protocol_latency_factor.Simple")),
    (0, ("launch_overhead_us", "protocol_bw_efficiency.LL", "protocol_bw_efficiency.LL128",
         "protocol_latency_factor.LL", "protocol_latency_factor.LL128")),
)
# Where every fit starts, so that refitting reproduces simulator/data/calibration.yaml:
# NCCL's own model (protocol factors 1, no extra launch cost beyond 20 us), the NCCL
# maintainers' "24 GB/s per 200 Gb/s NIC" (0.94 of HDR), NVLink at the 235 GB/s that NCCL's
# tuner assumes for A100 (0.78 of 300), and PCIe P2P at 0.2.
PRIOR: dict[str, float] = {
    "launch_overhead_us": 20.0, "link_efficiency.nvlink": 0.78, "link_efficiency.net": 0.94,
    "pcie_p2p_efficiency": 0.2, "protocol_bw_efficiency.LL": 1.0,
    "protocol_bw_efficiency.LL128": 1.0, "protocol_latency_factor.LL": 1.0,
    "protocol_latency_factor.LL128": 1.0, "protocol_latency_factor.Simple": 1.0,
}
DECIMALS = {p: 3 if p == "launch_overhead_us" else 4 for p in PARAMS}
OBJECTIVE = "mean over calibration rows of log(sim_time / meas_time)^2"
FIT_FIDELITY = "analytical"


def calibrated_values(k: ModelConstants) -> dict:
    """The fitted constants of ``k``, keyed as :data:`PARAMS`."""
    out = {}
    for p in PARAMS:
        if p == "launch_overhead_us":
            out[p] = k.launch_overhead_s * 1e6
            continue
        field, _, key = p.partition(".")
        value = getattr(k, field)
        out[p] = float(value.get(key, 1.0) if key else value)
    return out


def with_values(base: ModelConstants, values: dict) -> ModelConstants:
    """``base`` with the constants named in ``values`` (keys of :data:`PARAMS`) replaced."""
    changes: dict = {}
    for p, v in values.items():
        if p == "launch_overhead_us":
            changes["launch_overhead_s"] = float(v) * 1e-6
            continue
        field, _, key = p.partition(".")
        if key:
            changes.setdefault(field, dict(getattr(base, field)))[key] = float(v)
        else:
            changes[field] = float(v)
    return base.replace(**changes)


class _Problem:
    """The calibration rows and a fast objective (clusters built once, capacities reset)."""

    def __init__(self, cases: list, base: ModelConstants, fidelity: str):
        self.cases, self.base, self.fidelity = cases, base, fidelity
        self.clusters = [Cluster.from_graph(c.graph, base) for c in cases]
        for cl in self.clusters:          # the capacity rule must match Cluster's own
            if not np.allclose(self._capacity(cl, base.link_efficiency),
                               cl.capacity_bytes_per_s):
                raise RuntimeError("link efficiency rule differs from simulator.cluster")
        self.evaluations = 0
        self._memo: dict = {}

    @staticmethod
    def _capacity(cluster, eff: dict) -> np.ndarray:
        factor = np.array([eff.get(t, eff.get(c, 1.0))
                           for t, c in zip(cluster.link_type, cluster.link_class)])
        return cluster.nominal_bytes_per_s * factor

    def rows(self, k: ModelConstants) -> list[dict]:
        out = []
        for case, cl in zip(self.cases, self.clusters):
            cl.capacity_bytes_per_s = self._capacity(cl, k.link_efficiency)
            out += vc.simulate_rows(case, k, self.fidelity, cluster=cl)
        return out

    def loss(self, values: dict, min_bytes: int = 0) -> float:
        key = tuple(round(float(values[p]), 12) for p in PARAMS) + (min_bytes,)
        if key not in self._memo:
            self.evaluations += 1
            rows = self.rows(with_values(self.base, values))
            logs = [math.log(r["sim_time_us"] / r["meas_time_us"]) for r in rows
                    if r["derived"] != "time_us" and r["size_bytes"] >= min_bytes]
            self._memo[key] = float(np.mean(np.square(logs)))
        return self._memo[key]


def _to_values(u: np.ndarray, names=PARAMS) -> dict:
    return {p: BOUNDS[p][0] + float(np.clip(x, 0, 1)) * (BOUNDS[p][1] - BOUNDS[p][0])
            for p, x in zip(names, u)}


def _to_unit(values: dict, names=PARAMS) -> np.ndarray:
    return np.array([np.clip((values[p] - BOUNDS[p][0]) / (BOUNDS[p][1] - BOUNDS[p][0]), 0, 1)
                     for p in names])


def nelder_mead(f, x0: np.ndarray, step: float = 0.15, max_evals: int = 300,
                xtol: float = 1e-4, ftol: float = 1e-10) -> tuple[np.ndarray, float, int]:
    """Minimise ``f`` over the unit box from ``x0`` (points are clipped to [0, 1]).

    Deterministic; returns (best point, its value, evaluations).
    """
    n = len(x0)
    clip = lambda x: np.clip(x, 0.0, 1.0)  # noqa: E731
    pts = [clip(np.asarray(x0, float))]
    for i in range(n):
        e = np.zeros(n)
        e[i] = step if pts[0][i] + step <= 1.0 else -step
        pts.append(clip(pts[0] + e))
    vals = [f(p) for p in pts]
    evals = len(pts)
    while evals < max_evals:
        order = np.argsort(vals, kind="stable")
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        spread = max(np.max(np.abs(p - pts[0])) for p in pts[1:])
        if spread < xtol and vals[-1] - vals[0] < ftol:
            break
        centroid = np.mean(pts[:-1], axis=0)
        xr = clip(centroid + (centroid - pts[-1]))
        fr = f(xr)
        evals += 1
        if fr < vals[0]:
            xe = clip(centroid + 2.0 * (centroid - pts[-1]))
            fe = f(xe)
            evals += 1
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            outside = fr < vals[-1]
            xc = clip(centroid + 0.5 * ((xr if outside else pts[-1]) - centroid))
            fc = f(xc)
            evals += 1
            if fc < min(fr, vals[-1]):
                pts[-1], vals[-1] = xc, fc
            else:                                   # shrink towards the best point
                for i in range(1, len(pts)):
                    pts[i] = clip(pts[0] + 0.5 * (pts[i] - pts[0]))
                    vals[i] = f(pts[i])
                    evals += 1
    best = int(np.argmin(vals))
    return pts[best], float(vals[best]), evals


def compass_search(f, x0: np.ndarray, step: float = 0.05, min_step: float = 1e-4,
                   max_evals: int = 200) -> tuple[np.ndarray, float, int]:
    """Coordinate pattern search on the unit box: try +-step per axis, halve when stuck."""
    x, fx, evals = np.asarray(x0, float), f(x0), 1
    while step >= min_step and evals < max_evals:
        improved = False
        for i in range(len(x)):
            for sign in (1.0, -1.0):
                y = x.copy()
                y[i] = np.clip(y[i] + sign * step, 0.0, 1.0)
                if y[i] == x[i]:
                    continue
                fy = f(y)
                evals += 1
                if fy < fx:
                    x, fx, improved = y, fy, True
                    break
        if not improved:
            step /= 2
    return x, fx, evals


def calibration_cases(root=None) -> list:
    """The calibration cases, checked to contain no validation table."""
    cases = vc.load_cases(root, splits=("calibration",))
    for c in cases:
        tables = set(c.measurements["table_id"])
        if c.split != "calibration" or tables != {c.table_id}:
            raise RuntimeError(f"calibration would read a non-calibration table: "
                               f"{c.table_id} ({c.split}, rows of {sorted(tables)})")
    if not cases:
        raise ConfigError("no case has split 'calibration'", source=str(
            Path(root or vc.default_root()) / vc.CASES_FILE), field="cases")
    return cases


def calibrate(root=None, constants: ModelConstants | None = None, max_evals: int = 1200,
              fidelity: str = FIT_FIDELITY, start: dict | None = None
              ) -> tuple[ModelConstants, dict]:
    """Fit :data:`PARAMS` on the calibration split in :data:`STAGES`; return
    (constants, report).

    ``constants`` (default: the shipped ones) supplies every constant that is not fitted;
    the fit starts from ``start`` (default :data:`PRIOR`), so it does not depend on what
    was fitted before. The fitted values are rounded
    (:data:`DECIMALS`) and the report's objective is evaluated at the rounded values, so
    what is printed, written and returned agree.
    """
    base = constants or load_constants()
    cases = calibration_cases(root)
    prob = _Problem(cases, base, fidelity)
    start = dict(PRIOR if start is None else start)
    f0 = prob.loss(start)
    fitted = dict(start)
    budget = max(max_evals // len(STAGES), 10)
    stages = []
    for min_bytes, names in STAGES:
        def f(u, names=names, min_bytes=min_bytes):
            return prob.loss({**fitted, **_to_values(u, names)}, min_bytes)
        before = prob.loss(fitted, min_bytes)
        u, _, _ = nelder_mead(f, _to_unit(fitted, names), max_evals=budget // 2)
        u, _, _ = nelder_mead(f, u, step=0.05, max_evals=budget // 4)
        u, _, _ = compass_search(f, u, max_evals=budget // 4)
        fitted.update({p: round(v, DECIMALS[p]) for p, v in _to_values(u, names).items()})
        stages.append({"min_bytes": min_bytes, "params": list(names),
                       "objective_start": before,
                       "objective_fitted": prob.loss(fitted, min_bytes)})
    k = with_values(base, fitted)
    rows = prob.rows(k)
    per_table = {}
    for c in cases:
        logs = np.array([math.log(r["sim_time_us"] / r["meas_time_us"]) for r in rows
                         if r["table_id"] == c.table_id])
        per_table[c.table_id] = {"rows": int(len(logs)),
                                 "mean_sq_log": float(np.mean(logs ** 2)),
                                 "rms_log": float(np.sqrt(np.mean(logs ** 2))),
                                 "median_abs_time_err": float(np.median(np.abs(np.expm1(logs))))}
    logs = np.array([math.log(r["sim_time_us"] / r["meas_time_us"]) for r in rows])
    objective = float(np.mean(logs ** 2))
    at_bound = [p for p in PARAMS if math.isclose(fitted[p], BOUNDS[p][0], abs_tol=1e-9)
                or math.isclose(fitted[p], BOUNDS[p][1], abs_tol=1e-9)]
    report = {
        "tables": [c.table_id for c in cases],
        "rows": int(len(logs)),
        "objective": OBJECTIVE,
        "objective_start": f0,
        "objective_fitted": objective,
        "rms_log_start": math.sqrt(f0),
        "rms_log_fitted": math.sqrt(objective),
        "start": start,
        "fitted": fitted,
        "bounds": dict(BOUNDS),
        "at_bound": at_bound,
        "per_table": per_table,
        "stages": stages,
        "evaluations": prob.evaluations,
        "fidelity": fidelity,
        "method": ("in stages (" + "; ".join(f"{', '.join(n)} on rows >= {m} B"
                                             for m, n in STAGES) +
                   "): bounded Nelder-Mead (restarted once) + compass search, unit-box "
                   "coordinates"),
        "date": _dt.date.today().isoformat(),
    }
    return k, report


def format_objective(report: dict) -> str:
    """The objective before and after a fit, as one line (both calibrations use it)."""
    return (f"objective ({report['objective']}): {report['objective_start']:.5f} -> "
            f"{report['objective_fitted']:.5f} (rms log error {report['rms_log_start']:.3f}"
            f" -> {report['rms_log_fitted']:.3f})")


def format_calibration(report: dict) -> str:
    """Fitted values and calibration error as text lines."""
    lines = [f"calibration tables: {', '.join(report['tables'])} ({report['rows']} rows, "
             f"fidelity {report['fidelity']}, {report['evaluations']} evaluations)"]
    for p in PARAMS:
        lo, hi = report["bounds"][p]
        flag = "  (at bound)" if p in report["at_bound"] else ""
        lines.append(f"  {p:24s} {report['start'][p]:10.4g} -> {report['fitted'][p]:10.4g}"
                     f"   bounds [{lo:g}, {hi:g}]{flag}")
    lines.append(format_objective(report))
    for tid, t in report["per_table"].items():
        lines.append(f"  {tid:28s} rows {t['rows']:3d}  rms log {t['rms_log']:.3f}  "
                     f"median |time err| {100 * t['median_abs_time_err']:.1f}%")
    return "\n".join(lines)


# ------------------------------------------------------------------ calibration.yaml
def _shipped_calibration() -> dict:
    with resources.files("simulator.data").joinpath("calibration.yaml").open() as fh:
        return yaml.safe_load(fh)


def write_calibration(constants: ModelConstants, report: dict, path, overwrite: bool = False
                      ) -> Path:
    """Write ``constants``' calibrated values as a ``calibration.yaml`` (the format of
    ``simulator/data/calibration.yaml``); unfitted entries keep the shipped sources.

    :raises ConfigError: when ``path`` exists and ``overwrite`` is false, or cannot be written.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise ConfigError("file exists; refusing to overwrite it (pass overwrite=True, "
                          "or --overwrite)", source=str(path))
    why = (f"fitted by clustersim validate collectives --calibrate on "
           f"{', '.join(report['tables'])} ({report['date']}); objective {report['objective']}"
           f" = {report['objective_fitted']:.5f} over {report['rows']} rows "
           f"(start {report['objective_start']:.5f}), fidelity {report['fidelity']}")
    values = calibrated_values(constants)
    data = _shipped_calibration()
    for name, entry in data.items():
        if name == "channels":
            entry["value"] = int(constants.channels)
        elif "value" in entry:                      # scalar entry
            entry["value"] = float(values.get(name, entry["value"]))
            if name in PARAMS:
                entry["source"] = why
        else:                                       # mapping of {value, source}
            current = getattr(constants, name)
            for key in set(entry) | set(current):
                sub = entry.setdefault(key, {"source": "kept from the starting constants"})
                sub["value"] = float(current.get(key, sub.get("value", 1.0)))
                if f"{name}.{key}" in PARAMS:
                    sub["source"] = why
    header = ("# Calibration constants of the collective model. Values whose source says\n"
              "# \"fitted by\" were fitted on the declared calibration subset of\n"
              "# validation/collectives/cases.yaml (never on a validation case) by\n"
              "# `clustersim validate collectives --calibrate`. Do not hand-tune them.\n")
    return write_yaml(path, data, header)


_FITTED_KEYS = ("link_efficiency", "pcie_p2p_efficiency", "launch_overhead_us", "channels")


def load_calibration_file(path, base: ModelConstants | None = None) -> ModelConstants:
    """``base`` (default: shipped) with the calibrated values of a calibration YAML file.

    :raises ConfigError: unreadable file, or a missing / non-numeric ``value`` (field named).
    """
    path = Path(path)
    base = base or load_constants()
    data = vc._read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", source=str(path))

    def value(entry, fld):
        if not isinstance(entry, dict) or "value" not in entry:
            raise ConfigError("expected {value: ..., source: ...}", source=str(path), field=fld)
        try:
            return float(entry["value"])
        except (TypeError, ValueError):
            raise ConfigError(f"not a number: {entry['value']!r}", source=str(path),
                              field=f"{fld}.value") from None

    eff = data.get("link_efficiency")
    if not isinstance(eff, dict):
        raise ConfigError("missing mapping", source=str(path), field="link_efficiency")
    for fld in ("pcie_p2p_efficiency", "launch_overhead_us", "channels"):
        if fld not in data:
            raise ConfigError("missing required key", source=str(path), field=fld)
    extra = {}
    for key, entry in data.items():
        if key in _FITTED_KEYS or key not in base.__dataclass_fields__:
            continue
        current = getattr(base, key)
        if isinstance(current, dict) and isinstance(entry, dict):
            extra[key] = {**current, **{sub: value(v, f"{key}.{sub}")
                                        for sub, v in entry.items()}}
        elif isinstance(current, (int, float)):
            extra[key] = type(current)(value(entry, key))
    return base.replace(
        **extra,
        link_efficiency={k: value(v, f"link_efficiency.{k}") for k, v in eff.items()},
        pcie_p2p_efficiency=value(data["pcie_p2p_efficiency"], "pcie_p2p_efficiency"),
        launch_overhead_s=value(data["launch_overhead_us"], "launch_overhead_us") * 1e-6,
        channels=int(value(data["channels"], "channels")),
    )


__all__ = ["BOUNDS", "OBJECTIVE", "PARAMS", "calibrate", "calibrated_values", "calibration_cases",
           "compass_search",
           "format_calibration", "load_calibration_file", "nelder_mead", "with_values",
           "write_calibration"]
