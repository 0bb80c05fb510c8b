"""Simulating one training validation case (:func:`simulate_case`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from simulator.compute import ComputeCalibration
from simulator.models import load_model
from simulator.models.costs import megatron_recompute_flops
from simulator.pipeline import run_setup
from simulator.validation.training.schema import (SCALING_THRESHOLD, THROUGHPUT_THRESHOLD,
                                                  Case)


def _run(case: Case, calibration: ComputeCalibration | None, cache: dict | None):
    """The metrics of one non-scaling case, memoised in ``cache``."""
    key = case.case_id
    if cache is not None and key in cache:
        return cache[key]
    setup = case.setup
    if calibration is not None:
        setup = dataclasses.replace(setup, compute=setup.compute.with_fit(calibration=calibration))
    metrics = run_setup(setup).metrics
    if cache is not None:
        cache[key] = metrics
    return metrics


def _megatron_tflops(case: Case, m) -> float:
    """TFLOP/s per GPU of the simulated iteration, counted as the source counted it:
    Megatron's formula with recomputation over each GPU's sequences per iteration."""
    t = case.scenario.training
    flops = megatron_recompute_flops(load_model(case.scenario.model),
                                     t.micro_batch * t.grad_accum, t.seq_len)
    return flops / m.iteration_time_s / 1e12 if m.iteration_time_s > 0 else float("nan")


def _rel_err(sim: float, meas: float) -> float:
    if not (np.isfinite(sim) and np.isfinite(meas)) or meas <= 0:
        return float("nan")
    return (sim - meas) / meas


def _simulate_scaling(case: Case, calibration: ComputeCalibration | None, cache: dict | None):
    """(simulated efficiency, error, metrics of the N-GPU case) of a scaling case."""
    m_n, m_1 = _run(case.of, calibration, cache), _run(case.baseline, calibration, cache)
    ratio = m_n.world_size / m_1.world_size
    sim = m_n.samples_per_s / (ratio * m_1.samples_per_s) if m_1.samples_per_s else \
        float("nan")
    err = sim - case.measured if np.isfinite(sim) else float("nan")
    return sim, err, m_n


def simulate_case(case: Case, calibration: ComputeCalibration | None = None,
                  cache: dict | None = None) -> list[dict]:
    """One row (:data:`RESULT_COLUMNS`): measured and simulated value, error, gate.

    ``calibration`` replaces the shipped compute constants; ``cache`` (a dict) shares the
    replays of cases that scaling cases reuse (use one cache per calibration).
    """
    if case.is_scaling:
        sim, err, m = _simulate_scaling(case, calibration, cache)
        kind, thr = "points", SCALING_THRESHOLD
        setup = case.of.setup
    else:
        m = _run(case, calibration, cache)
        sim = _megatron_tflops(case, m) if case.flops == "megatron-recompute" else \
            float(getattr(m, case.metric))
        err = _rel_err(sim, case.measured)
        kind, thr = "relative", THROUGHPUT_THRESHOLD
        setup = case.setup
    return [{
        "case": case.case_id, "split": case.split, "metric": case.metric,
        "measurement": case.measurement_id, "measured": case.measured, "simulated": sim,
        "error": err, "error_kind": kind, "threshold": thr,
        "ok": bool(abs(err) <= thr) if np.isfinite(err) else False,
        "model": setup.trace.meta.get("model", ""), "gpus": m.world_size,
        "precision": setup.job.precision, "iteration_time_s": m.iteration_time_s,
        "mfu": m.mfu, "compute_s": m.compute_s, "exposed_comm_s": m.exposed_comm_s,
        "peak_memory_gib": m.peak_memory_gib, "oom": bool(m.oom),
    }]


__all__ = ["simulate_case"]
