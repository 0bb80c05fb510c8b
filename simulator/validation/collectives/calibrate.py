"""Fit the collective model's calibration constants on the calibration split only.

The constants of :data:`.fitted.PARAMS` are fitted within :data:`.fitted.BOUNDS`; the main ones:

=========================  ==========  =====================================================
``launch_overhead_s``      0 - 60 us   per-collective launch cost added to every latency
``link_efficiency.nvlink`` 0.5 - 1.0   usable fraction of NVLink bandwidth
``link_efficiency.net``    0.5 - 1.0   usable fraction of NIC / network bandwidth
``pcie_p2p_efficiency``    0.05 - 1.0  GPU-to-GPU over PCIe (no NVLink), fraction of links
=========================  ==========  =====================================================

The objective is the mean over every calibration row (all sizes) of
``log(simulated time / measured time) ** 2``. It is minimised by a bounded Nelder-Mead
(:mod:`simulator.optimize`) in coordinates scaled to [0, 1], restarted once from
its best point, then polished by a compass search. Inside the fit the ``analytical``
fidelity is used: a collective alone on the fabric takes the same time as with ``flow``.

Only tables whose ``split`` is ``calibration`` in ``cases.yaml`` are read; validation tables
are never loaded (checked, not assumed).
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path

import numpy as np

from simulator.cluster import Cluster
from simulator.constants import ModelConstants, load_constants
from simulator.errors import ConfigError
from simulator.validation.collectives.fitted import (BOUNDS, DECIMALS, PARAMS, PRIOR,
                                                     with_values)
from simulator.validation.collectives.schema import CASES_FILE, default_root
from simulator.validation.collectives.sim import simulate_rows
from simulator.validation.collectives.validate import load_cases, load_measurements
from simulator.validation.common import format_objective
from simulator.optimize import compass_search, from_unit, nelder_mead, to_unit

# Two stages. Saturation first: link efficiencies (and Simple's latency, the protocol
# large messages use) on rows of at least 64 MiB, where bandwidth dominates; then the
# launch overhead and the small-message protocols on every row, with stage 1 held fixed.
# Fitting everything at once let noisy mid-size rows drag link efficiencies below what
# large transfers measure. A table whose case lists ``fits`` enters only the stages that
# fit one of those constants (the DGX H100 table: NVLS's efficiency, on large rows; the AWS
# p5 all_gather tables: EFA's efficiency and per-message cost, last, on all their rows).
EFA_PARAMS = ("link_efficiency.efa-v2", "net_message_us.efa-v2", "net_ll_message_us.efa-v2")
# then the costs of point-to-point across EFA (a proxy operation, a message) on the AWS p5
# alltoall calibration tables, with the EFA efficiency above held
P2P_PARAMS = ("p2p_op_us.efa-v2", "p2p_message_us.efa-v2")
FITS_ONLY = EFA_PARAMS + P2P_PARAMS     # constants only tables that name them inform
STAGES: tuple[tuple[int, tuple[str, ...]], ...] = (
    (64 << 20, ("link_efficiency.nvlink", "link_efficiency.net", "pcie_p2p_efficiency",
                "protocol_latency_factor.Simple")),
    (0, ("launch_overhead_us", "protocol_bw_efficiency.LL", "protocol_bw_efficiency.LL128",
         "protocol_latency_factor.LL", "protocol_latency_factor.LL128")),
    (64 << 20, ("nvls_efficiency",)),
    (0, EFA_PARAMS),
    (0, P2P_PARAMS),
)
OBJECTIVE = "mean over calibration rows of log(sim_time / meas_time)^2"
FIT_FIDELITY = "analytical"


class _Problem:
    """The calibration rows and a fast objective (clusters built once, capacities reset)."""

    def __init__(self, cases: list, base: ModelConstants, fidelity: str, simulate):
        self.cases, self.base, self.fidelity, self.simulate = cases, base, fidelity, simulate
        self.clusters = [Cluster.from_graph(c.graph, base) for c in cases]
        self.evaluations = 0
        self._memo: dict = {}

    def rows(self, k: ModelConstants, names: tuple[str, ...] | None = None) -> list[dict]:
        """Simulated rows of the cases that inform one of ``names`` (None: every case)."""
        out = []
        for case, cl in zip(self.cases, self.clusters):
            if names is not None and case.fits is not None and not set(case.fits) & set(names):
                continue
            if names is not None and case.fits is None and set(names) <= set(FITS_ONLY):
                continue            # no table without `fits` informs the EFA constants
            cl.capacity_bytes_per_s = cl.capacities_at(k.link_efficiency)
            out += self.simulate(case, k, self.fidelity, cluster=cl)
        return out

    def loss(self, values: dict, min_bytes: int = 0,
             names: tuple[str, ...] | None = None) -> float:
        key = tuple(round(float(values[p]), 12) for p in PARAMS) + (min_bytes, names)
        if key not in self._memo:
            self.evaluations += 1
            rows = self.rows(with_values(self.base, values), names)
            logs = [_log_ratio(r) for r in rows if r["size_bytes"] >= min_bytes
                    and (r["derived"] != "time_us" or r["meas_busbw_GBps"] > 0)]
            self._memo[key] = float(np.mean(np.square(logs)))
        return self._memo[key]


def _log_ratio(row: dict) -> float:
    """log(simulated / measured time); where the time was derived from a measured busbw
    (tables that print bandwidths only), the same ratio from the busbw."""
    if row["derived"] == "time_us":
        return math.log(row["meas_busbw_GBps"] / row["sim_busbw_GBps"])
    return math.log(row["sim_time_us"] / row["meas_time_us"])


def calibration_cases(root=None, read_measurements=load_measurements) -> list:
    """The calibration cases, checked to contain no validation table; their measurements
    are read by ``read_measurements`` (:func:`.validate.load_measurements`)."""
    cases = load_cases(root, splits=("calibration",), read_measurements=read_measurements)
    for c in cases:
        tables = set(c.measurements["table_id"])
        if c.split != "calibration" or tables != {c.table_id}:
            raise RuntimeError(f"calibration would read a non-calibration table: "
                               f"{c.table_id} ({c.split}, rows of {sorted(tables)})")
    if not cases:
        raise ConfigError("no case has split 'calibration'", source=str(
            Path(root or default_root()) / CASES_FILE), field="cases")
    return cases


def calibrate(root=None, constants: ModelConstants | None = None, max_evals: int = 1200,
              fidelity: str = FIT_FIDELITY, start: dict | None = None,
              simulate=simulate_rows, read_measurements=load_measurements
              ) -> tuple[ModelConstants, dict]:
    """Fit :data:`PARAMS` on the calibration split in :data:`STAGES`; return
    (constants, report).

    ``constants`` (default: the shipped ones) supplies every constant that is not fitted;
    the fit starts from ``start`` (default :data:`PRIOR`), so it does not depend on what
    was fitted before. The fitted values are rounded
    (:data:`DECIMALS`) and the report's objective is evaluated at the rounded values, so
    what is printed, written and returned agree. ``simulate`` (the signature of
    :func:`.sim.simulate_rows`) simulates a case's rows and ``read_measurements`` reads
    ``measurements.csv`` (:func:`.validate.load_measurements`).
    """
    base = constants or load_constants()
    cases = calibration_cases(root, read_measurements)
    prob = _Problem(cases, base, fidelity, simulate)
    start = dict(PRIOR if start is None else start)
    f0 = prob.loss(start)
    fitted = dict(start)
    # Per stage: half of max_evals, as when there were two stages, so that adding NVLS's
    # one-parameter stage left the A100 fit (and every A100 answer) as it was.
    budget = max(max_evals // 2, 10)
    stages = []
    for min_bytes, names in STAGES:
        def f(u, names=names, min_bytes=min_bytes):
            return prob.loss({**fitted, **from_unit(u, BOUNDS, names)}, min_bytes, names)
        before = prob.loss(fitted, min_bytes, names)
        u, _, _ = nelder_mead(f, to_unit(fitted, BOUNDS, names), max_evals=budget // 2)
        u, _, _ = nelder_mead(f, u, step=0.05, max_evals=budget // 4)
        u, _, _ = compass_search(f, u, max_evals=budget // 4)
        fitted.update({p: round(v, DECIMALS[p]) for p, v in from_unit(u, BOUNDS, names).items()})
        stages.append({"min_bytes": min_bytes, "params": list(names),
                       "objective_start": before,
                       "objective_fitted": prob.loss(fitted, min_bytes, names)})
    k = with_values(base, fitted)
    rows = prob.rows(k)
    per_table = _per_table(cases, rows)
    logs = np.array([_log_ratio(r) for r in rows])
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


def _per_table(cases: list, rows: list[dict]) -> dict:
    """Rows, mean squared / rms log error and median |time error| of each table."""
    per_table = {}
    for c in cases:
        logs = np.array([_log_ratio(r) for r in rows if r["table_id"] == c.table_id])
        per_table[c.table_id] = {"rows": int(len(logs)),
                                 "mean_sq_log": float(np.mean(logs ** 2)),
                                 "rms_log": float(np.sqrt(np.mean(logs ** 2))),
                                 "median_abs_time_err": float(np.median(np.abs(np.expm1(logs))))}
    return per_table


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


__all__ = ["OBJECTIVE", "STAGES", "calibrate", "calibration_cases", "format_calibration"]
