"""Generic bounded minimisers on the unit box [0, 1]^n, numpy only and deterministic.

The calibrations (:mod:`simulator.validation.collectives.calibrate`,
:mod:`simulator.validation.training.calibrate`, the GEMM fit of
:mod:`simulator.compute.gemm_fit`) map their constants to the unit box with
:func:`to_unit` / :func:`from_unit`, minimise there with :func:`nelder_mead`, then polish the
answer with :func:`compass_search`. Every function here is pure: it sees only the objective
``f(u) -> float`` it is given.
"""

from __future__ import annotations

import numpy as np


def from_unit(u: np.ndarray, bounds: dict[str, tuple[float, float]], names) -> dict:
    """The values of ``names`` at unit-box point ``u`` (clipped to [0, 1]): lo + u (hi - lo)."""
    return {p: bounds[p][0] + float(np.clip(x, 0, 1)) * (bounds[p][1] - bounds[p][0])
            for p, x in zip(names, u)}


def to_unit(values: dict, bounds: dict[str, tuple[float, float]], names) -> np.ndarray:
    """The unit-box point of ``values`` (the inverse of :func:`from_unit`, clipped)."""
    return np.array([np.clip((values[p] - bounds[p][0]) / (bounds[p][1] - bounds[p][0]), 0, 1)
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


__all__ = ["compass_search", "from_unit", "nelder_mead", "to_unit"]
