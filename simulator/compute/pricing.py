"""One price for a kernel, whoever asks: the replay for a trace's compute op
(:func:`simulator.engine.job.kernel_time_s`) and ``clustersim plan``'s estimate for the
:class:`~simulator.models.ops.OpCost` that op was written from
(:mod:`simulator.planner.estimate`).

A generator writes an OpCost into the trace as its class, FLOPs and bytes plus the attrs
:func:`kernel_attrs` gives (the GEMM or attention shape the compute model times by, a grouped
GEMM's groups, the kernel's own precision, how it is launched); :func:`priced_s` prices
those with a compute timer (the seam's ``op_time_s``).
"""

from __future__ import annotations

from collections.abc import Mapping


def kernel_attrs(cost) -> dict:
    """What a trace's compute op carries of ``cost`` (an OpCost) beyond its FLOPs and bytes:
    ``m``, ``n``, ``k`` of a GEMM or attention kernel, ``groups`` of a grouped GEMM,
    ``transa`` of a GEMM whose A is a transposed view (a weight gradient), a kernel's own
    precision (an FP8 GEMM in a bf16 step) and how it is launched, when not eagerly
    (``launch``: :mod:`simulator.compute.launch`)."""
    shape = getattr(cost, "shape", None)
    out = dict(zip("mnk", shape)) if shape else {}
    if shape and getattr(cost, "groups", 1) > 1:
        out["groups"] = cost.groups
    if shape and getattr(cost, "transa", False):
        out["transa"] = True
    if getattr(cost, "precision", ""):
        out["precision"] = cost.precision
    if getattr(cost, "launch", ""):
        out["launch"] = cost.launch
    return out


def priced_s(compute, op_class: str, flops: float, bytes_accessed: float, precision: str,
             attrs: Mapping) -> float:
    """Nominal seconds of a kernel of ``op_class`` with ``attrs`` (:func:`kernel_attrs`)
    from the timer ``compute`` at the kernel's own precision (``precision`` where it names
    none). A timer of the seam without the ``shape`` (``launch``) parameter is asked
    without it."""
    precision = attrs.get("precision", precision)
    extra = {"launch": attrs["launch"]} if "launch" in attrs else {}
    if "m" in attrs:
        shape = (attrs["m"], attrs["n"], attrs["k"]) + (
            (attrs["groups"],) if attrs.get("groups", 1) > 1 else ())
        if attrs.get("transa"):
            extra["transa"] = True
        return compute.op_time_s(op_class, flops, bytes_accessed, precision, shape=shape,
                                 **extra)
    return compute.op_time_s(op_class, flops, bytes_accessed, precision, **extra)


def cost_time_s(compute, cost, precision: str) -> float:
    """Nominal seconds of the kernel ``cost`` (an OpCost), as the replay prices the compute
    op written from it."""
    return priced_s(compute, cost.op_class, float(cost.flops), float(cost.bytes_accessed),
                    precision, kernel_attrs(cost))


__all__ = ["cost_time_s", "kernel_attrs", "priced_s"]
