"""cuDNN's NCHW batch-norm kernels in the H200 profiles: the ``channel_norm`` law's rows, its
fit and its check (:mod:`simulator.models.layout`).

Every ``aten::cudnn_batch_norm`` (forward) and ``aten::cudnn_batch_norm_backward`` operator of
the two NCHW ResNet-50 profiles in ``validation/gpu/traces`` is a row: its input's channels
and elements (the operator's recorded ``Input Dims``) and the GPU time of the ``bn_`` kernels
it launched (matched through the runtime launches inside the operator on its thread). The
split is declared here, before the fit: the **TF32 profile calibrates** (the layout the
A100 TF32 calibration row ran), the **FP16 (AMP) profile validates**. Per direction the law

    seconds = elements x (1 / (channels x per_channel) + 1 / device)

is fitted by least squares on the logarithm of the time over a grid of both rates (53 rows
each, two constants), at the profiles' GPU (H200, 4.8 TB/s HBM): ``compute.yaml``
``channel_norm`` holds the result and scales it to another GPU by its HBM bandwidth (an
assumption: no other GPU was profiled). ``python -m simulator.validation.gpu.nchw`` prints
both splits and the layout transposes' time per profile (what
:func:`~simulator.models.layout.transposes` prices; reported beside the simulated
transposes in docs/compute.md, not fitted).
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.validation.paths import data_dir

CALIBRATION = "traces/resnet50_b256_tf32_nchw_trace.json.gz"
VALIDATION = "traces/resnet50_b256_amp_nchw_trace.json.gz"
BN_OPS = {"aten::cudnn_batch_norm": "forward", "aten::cudnn_batch_norm_backward": "backward"}
CONV_OPS = ("aten::cudnn_convolution", "aten::convolution_backward")
TRANSPOSE_KERNELS = ("nchwToNhwc", "nhwcToNchw")
# the fit's grid, elements per second: a channel's rate and the device's
PER_CHANNEL_GRID = (0.1e9, 20e9)
DEVICE_GRID = (20e9, 2000e9)
GRID_POINTS = 600


@dataclass(frozen=True)
class Row:
    """One batch-norm operator of a profile."""

    direction: str      # forward or backward
    channels: int
    elements: int
    seconds: float      # its bn_ kernels' GPU time


def _operators(path: Path) -> list[tuple[str, list, list[tuple[str, float]]]]:
    """(operator name, input dims, [(kernel name, seconds)]) of the profile's batch-norm and
    convolution operators, each with the kernels launched inside it on its thread."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    kernels = {e["args"]["correlation"]: e for e in events if e.get("cat") == "kernel"}
    launches = sorted((e for e in events if e.get("cat") == "cuda_runtime"
                       and "correlation" in e.get("args", {})), key=lambda e: e["ts"])
    starts = [e["ts"] for e in launches]
    out = []
    for op in events:
        if op.get("cat") != "cpu_op" or (op["name"] not in BN_OPS and op["name"] not in CONV_OPS):
            continue
        lo = bisect.bisect_left(starts, op["ts"])
        hi = bisect.bisect_right(starts, op["ts"] + op["dur"])
        ks = [kernels[r["args"]["correlation"]] for r in launches[lo:hi]
              if r["tid"] == op["tid"] and r["args"]["correlation"] in kernels]
        out.append((op["name"], op["args"].get("Input Dims"),
                    [(k["name"], k["dur"] * 1e-6) for k in ks]))
    return out


def rows(path: Path) -> list[Row]:
    """The batch-norm rows of one profile."""
    return _bn_rows(_operators(path))


def _bn_rows(operators) -> list[Row]:
    return [Row(BN_OPS[name], dims[0][1], math.prod(dims[0]),
                sum(s for k, s in kernels if "bn_" in k))
            for name, dims, kernels in operators if name in BN_OPS]


def _transpose_seconds(operators) -> float:
    """GPU seconds of the layout transposes cuDNN ran inside the profile's convolutions."""
    return sum(s for name, _, kernels in operators if name in CONV_OPS
               for k, s in kernels if any(t in k for t in TRANSPOSE_KERNELS))


def law_seconds(channels, elements, per_channel: float, device: float):
    """The ``channel_norm`` law (module doc); numpy arrays or numbers."""
    return elements * (1.0 / (channels * per_channel) + 1.0 / device)


def fit(rows_: list[Row]) -> tuple[float, float]:
    """``(per_channel, device)`` elements/s minimising the squared log error over ``rows_``."""
    c = np.array([r.channels for r in rows_], dtype=float)
    el = np.array([r.elements for r in rows_], dtype=float)
    obs = np.log(np.array([r.seconds for r in rows_]))
    per = np.geomspace(*PER_CHANNEL_GRID, GRID_POINTS)
    dev = np.geomspace(*DEVICE_GRID, GRID_POINTS)
    best = (math.inf, 0.0, 0.0)
    for r in per:
        err = ((obs[None, :] - np.log(law_seconds(c[None, :], el[None, :], r,
                                                  dev[:, None]))) ** 2).sum(axis=1)
        i = int(err.argmin())
        if err[i] < best[0]:
            best = (float(err[i]), float(r), float(dev[i]))
    return best[1], best[2]


def summary(rows_: list[Row], per_channel: float, device: float) -> dict[str, float]:
    """Recorded and law seconds over ``rows_``, and the median |error| of a row."""
    sim = [law_seconds(r.channels, r.elements, per_channel, device) for r in rows_]
    rec = [r.seconds for r in rows_]
    return {"rows": len(rows_), "recorded_s": sum(rec), "law_s": sum(sim),
            "median_abs_error": float(np.median([abs(s / m - 1) for s, m in zip(sim, rec)]))}


def main() -> int:
    root = data_dir("gpu")
    operators = {name: _operators(root / name) for name in (CALIBRATION, VALIDATION)}
    cal, val = _bn_rows(operators[CALIBRATION]), _bn_rows(operators[VALIDATION])
    for direction in ("forward", "backward"):
        c = [r for r in cal if r.direction == direction]
        v = [r for r in val if r.direction == direction]
        per, dev = fit(c)
        print(f"{direction}: per_channel {per:.4g} elements/s, device {dev:.4g} elements/s")
        for split, rs in (("calibration (TF32)", c), ("validation (FP16)", v)):
            s = summary(rs, per, dev)
            print(f"  {split}: {s['rows']} rows, recorded {s['recorded_s'] * 1e3:.2f} ms, "
                  f"law {s['law_s'] * 1e3:.2f} ms, median |error| of a row "
                  f"{s['median_abs_error']:.1%}")
    for name, ops in operators.items():
        print(f"{name}: layout transposes {_transpose_seconds(ops) * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
