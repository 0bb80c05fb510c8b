"""The compute-model constants the training calibration fits (:data:`PARAMS`: the
``eff_max`` of convolution curves in ``compute.yaml``, named ``op_class.precision``), their
bounds and starting point, and how to read them from / write them into a
:class:`~simulator.compute.ComputeCalibration`."""

from __future__ import annotations

import dataclasses

from simulator.compute import ComputeCalibration

PARAMS = ("conv.fp16", "conv.tf32")
TIED = {"conv.fp16": ("conv.bf16",)}            # also set to the fitted value
BOUNDS: dict[str, tuple[float, float]] = {p: (0.2, 1.0) for p in PARAMS}
# The shipped compute.yaml values when the fit was written (engineering estimates for conv
# and fp16 GEMMs, the HTA-trace fit for TF32 GEMMs): where every fit starts.
PRIOR: dict[str, float] = {"conv.fp16": 0.65, "conv.tf32": 0.55}
DECIMALS = 3


def split_name(p: str) -> tuple[str, str]:
    """``"conv.fp16"`` -> ("conv", "fp16"): the op class and precision of a fitted name."""
    op_class, _, precision = p.partition(".")
    return op_class, precision


def fitted_values(cal: ComputeCalibration) -> dict:
    """The values of :data:`PARAMS` in ``cal``."""
    out = {}
    for p in PARAMS:
        op_class, precision = split_name(p)
        out[p] = float(cal.op_classes[op_class].compute[precision].eff_max)
    return out


def with_values(base: ComputeCalibration, values: dict) -> ComputeCalibration:
    """``base`` with the ``eff_max`` of the named curves (and their :data:`TIED` ones)
    replaced; every other constant is kept."""
    classes = dict(base.op_classes)
    for p, v in values.items():
        if p not in PARAMS:
            raise KeyError(f"not a fitted constant: {p!r}; valid: {', '.join(PARAMS)}")
        for name in (p, *TIED.get(p, ())):
            op_class, precision = split_name(name)
            entry = classes[op_class]
            curves = dict(entry.compute)
            curves[precision] = dataclasses.replace(curves[precision], eff_max=float(v))
            classes[op_class] = dataclasses.replace(entry, compute=curves)
    return dataclasses.replace(base, op_classes=classes)


__all__ = ["BOUNDS", "DECIMALS", "PARAMS", "PRIOR", "TIED", "fitted_values", "split_name",
           "with_values"]
