"""Precision names: the one vocabulary of compute precisions and tensor dtypes.

A training step computes at one of :data:`PRECISIONS` (``fp32`` on CUDA cores, ``tf32``,
``bf16`` or ``fp16`` on tensor cores); tensors are stored as one of the :data:`Dtype`
names (``tf32`` stores fp32). A GPU's ``peak_flops`` table also has ``fp64``
(:data:`PEAK_PRECISIONS`). No other spelling is accepted anywhere (not ``float16``,
``amp`` nor ``mixed``): mixed precision is a 16-bit compute precision on fp32 weights
(``param_dtype: fp32``), see :func:`simulator.pipeline.autocasts`.
"""

from __future__ import annotations

from typing import Literal, get_args

from simulator.errors import ConfigError

Precision = Literal["fp32", "tf32", "bf16", "fp16"]     # compute precision of a step
PRECISIONS: tuple[str, ...] = get_args(Precision)
Dtype = Literal["fp32", "bf16", "fp16"]                 # storage dtype of a tensor
PEAK_PRECISIONS = ("fp64", *PRECISIONS)                 # keys of a GPU's peak_flops
HALF_PRECISIONS = ("bf16", "fp16")                      # 16-bit compute
FP32 = "fp32"                                           # CUDA cores, no tensor cores
FP8 = "fp8"          # FP8 GEMMs (torchao float8 / Transformer Engine), the rest in bf16
FP4 = "fp4"          # NVFP4 GEMMs (Transformer Engine's NVFP4BlockScaling), the rest in bf16
LOW_GEMM_PRECISIONS = (FP8, FP4)                        # a step whose GEMMs alone run below bf16
OP_PRECISIONS = (*PRECISIONS, FP8, FP4)                 # a kernel's own precision (trace op)
BYTES_PER_ELEMENT = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}


def precision_bytes(precision: str) -> int:
    """Bytes per element of ``precision`` (4 for fp32/tf32, 2 for bf16/fp16).

    :raises ConfigError: (field ``precision``) for a name outside :data:`PRECISIONS`.
    """
    if precision not in BYTES_PER_ELEMENT:
        raise ConfigError(f"unknown precision {precision!r}; valid: "
                          f"{', '.join(BYTES_PER_ELEMENT)}", field="precision")
    return BYTES_PER_ELEMENT[precision]


def storage_dtype(precision: str) -> str:
    """The dtype tensors computed at ``precision`` are kept in (tf32 keeps fp32)."""
    return FP32 if precision in ("fp32", "tf32") else precision


def compute_precision(precision: str) -> str:
    """The precision of everything but the GEMMs: an FP8 or NVFP4 step runs its other
    kernels, keeps its activations and its weights in bf16 (torchao float8 and Transformer
    Engine recipes); any other precision is itself."""
    return "bf16" if precision in LOW_GEMM_PRECISIONS else precision


def is_half(precision: str) -> bool:
    """Whether ``precision`` is a 16-bit compute precision."""
    return precision in HALF_PRECISIONS
