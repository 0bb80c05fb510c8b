"""Simulating the measured sizes of a collective validation case
(:func:`simulate_rows`; :func:`simulator.validation.collectives.validate.simulate_case` wraps it)."""

from __future__ import annotations

import numpy as np

from simulator.constants import ModelConstants, with_cuda_graph
from simulator.collectives.model import CollectiveModel
from simulator.cluster import Cluster
from simulator.collectives.run import run_collective, simulate_plans
from simulator.validation.collectives.schema import Case


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


def _simulate_size(model: CollectiveModel, op: str, size: int, ranks: list[int],
                   fidelity: str):
    """(time s, busbw bytes/s, algorithm, protocol) of one measured size."""
    if op == "send_recv":
        return _sendrecv_ring(model, size, ranks, fidelity)
    res = run_collective(model, op, size, ranks, fidelity=fidelity)
    return res.time_s, res.busbw_bytes_per_s, res.algorithm, res.protocol


def simulate_rows(case: Case, constants: ModelConstants, fidelity: str = "flow",
                  cluster=None) -> list[dict]:
    """Simulate every measured size of ``case``; one dict per row (see :data:`RESULT_COLUMNS`)."""
    cluster = cluster if cluster is not None else Cluster.from_graph(case.graph, constants)
    if case.cuda_graph:
        constants = with_cuda_graph(constants)
    model = CollectiveModel(cluster, constants)
    out = []
    for r in case.measurements.itertuples(index=False):
        size = int(r.size_bytes)
        t, busbw, algo, proto = _simulate_size(model, r.op, size, case.ranks, fidelity)
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


__all__ = ["simulate_rows"]
