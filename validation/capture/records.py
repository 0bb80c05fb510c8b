"""Step-time statistics, the alpha-beta fit, CSV upserts and the machine summary.

Standard library only, so the tests (and the fit recomputation) need no torch/tensorflow.
"""

from __future__ import annotations

import csv
import platform
import statistics
import subprocess
from pathlib import Path
from typing import Iterable, Sequence

# bytes each rank sends (and receives) per byte of the full tensor, for a ring on n ranks
WIRE_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
}


def step_stats(step_s: Sequence[float], kinds: Sequence[str], kind: str) -> dict:
    xs = [t for t, k in zip(step_s, kinds) if k == kind]
    if not xs:
        return {"n": 0, "mean_s": None, "median_s": None, "std_s": None}
    return {"n": len(xs), "mean_s": statistics.fmean(xs), "median_s": statistics.median(xs),
            "std_s": statistics.stdev(xs) if len(xs) > 1 else 0.0}


def fit_alpha_beta(points: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """Fit ``t = alpha + x * beta`` to (x, t) points minimising sum((alpha + beta x - t)^2 / t).

    Weighted least squares with weights 1/t (noise growing like the time), solved in closed
    form: between plain least squares (which the large sizes dominate, leaving alpha
    unconstrained, even negative) and relative error (which lets noisy microsecond points
    bend the bandwidth). Returns (alpha_s, beta_s_per_byte); the effective bandwidth is 1/beta.
    """
    pts = [(float(x), float(t)) for x, t in points]
    if len(pts) < 2:
        raise ValueError(f"points(={len(pts)}) must be at least 2")
    sw = swx = swxx = swt = swxt = 0.0
    for x, t in pts:
        if t <= 0:
            raise ValueError(f"time(={t}) must be > 0")
        w = 1.0 / t
        sw += w
        swx += w * x
        swxx += w * x * x
        swt += w * t
        swxt += w * x * t
    det = sw * swxx - swx * swx
    if det <= 0:
        raise ValueError("points must have at least two distinct x")
    beta = (sw * swxt - swx * swt) / det
    alpha = (swt - beta * swx) / sw
    return alpha, beta


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def upsert_csv(path: Path, rows: list[dict], key: Sequence[str], fieldnames: Sequence[str]) -> None:
    """Write ``rows`` into ``path``, replacing existing rows with the same ``key`` values."""
    old = read_csv(path) if path.exists() else []
    new_keys = {tuple(str(r.get(k, "")) for k in key) for r in rows}
    kept = [r for r in old if tuple(r.get(k, "") for k in key) not in new_keys]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(fieldnames), extrasaction="raise")
        w.writeheader()
        for r in kept + rows:
            w.writerow({f: r.get(f, "") for f in fieldnames})


def machine_summary() -> str:
    """e.g. ``"Intel(R) Xeon(R) Processor (family 6 model 207), 2 CPUs, KVM, 24 GiB"``."""
    info = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            info[k.strip()] = v.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    mem_gib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 2**20)
    except OSError:
        pass
    name = info.get("Model name", platform.processor() or "unknown CPU")
    return (f"{name} (family {info.get('CPU family', '?')} model {info.get('Model', '?')}), "
            f"{info.get('CPU(s)', '?')} CPUs, {info.get('Hypervisor vendor', 'bare metal')}, "
            f"{mem_gib} GiB")
