"""NVFP4 training (``training.precision: fp4``): Transformer Engine's ``NVFP4BlockScaling``
recipe, the transformer blocks' Linear GEMMs in NVFP4, everything else in bf16.

What the recipe runs (NVIDIA/TransformerEngine ``transformer_engine/common/recipe``
``NVFP4BlockScaling`` and ``pytorch/csrc/quantizer.cpp`` ``NVFP4Quantizer::quantize_impl``;
"Pretraining Large Language Models with NVFP4", NVIDIA 2025, arXiv:2509.25149, Section 4):

* A tensor is stored as 4-bit E2M1 values with one FP8 E4M3 (1-byte) scale per 16
  consecutive values and one FP32 scale per tensor: 0.5 + 1/16 bytes per element and copy
  (:data:`NVFP4_COPY_BYTES`; the per-tensor scale is 4 bytes a tensor, not counted).
* All three GEMMs of a Linear run in NVFP4, both operands quantized (fprop: input and
  weight, dgrad: output gradient and weight, wgrad: input and output gradient; TE's GEMM
  profiling guide, "Actual precision per GEMM in each TE mode"), reading 0.5625-byte
  operands and writing a bf16 output.
* The per-tensor scale needs the tensor's amax first: an amax pass reads the bf16 tensor
  (2 bytes per element), as in Transformer Engine's current scaling.
* The input ``X`` and the output gradient ``dY`` are quantized twice: row-wise for their
  fprop / dgrad GEMM (a quantize kernel: read 2, write 0.5625) and column-wise, through a
  16-point random Hadamard transform, for the wgrad GEMM (TE's fused
  ``hadamard_transform_cast_fusion_columnwise``: read 2, write 0.5625; the transform is a
  16 x 16 GEMM the kernel runs on tensor cores, not counted as FLOPs here). With the amax
  pass (``hadamard_transform_amax`` gives both amaxes in one read) that is
  2 + 2.5625 + 2.5625 = 7.125 bytes per element (:data:`RHT_QUANTIZE_BYTES`). The output
  gradient's stochastic rounding runs inside the same kernels (no bytes).
* The weight uses 16 x 16 two-dimensional blocks, no Hadamard transform: an amax pass and
  one kernel writing both layouts with their scales (each 16 x 16 block's scale written
  for every 16 values of each layout, the 1 x 16 scales the GEMM reads): 2 + 2 +
  2 x 0.5625 = 5.125 bytes per element (:data:`WEIGHT_QUANTIZE_BYTES`). Under Megatron-Core
  the weight is quantized once per step and shared by the micro-batches (``weight_reuse``,
  as the FP8 recipes of :mod:`simulator.models.fp8`); Megatron-Bridge's recipe
  (``bf16_with_nvfp4_mixed``: ``fp4_param_gather``) keeps it so between optimizer steps.
* Megatron-Bridge's ``bf16_with_nvfp4_mixed`` (NVIDIA-NeMo/Megatron-Bridge@067f987d
  ``src/megatron/bridge/training/mixed_precision.py``; its performance scripts'
  ``get_precision_config("nvfp4")``) leaves ``first_last_layers_bf16`` False: every block
  runs NVFP4 (the paper keeps its last blocks in BF16 for accuracy; only the Nemotron 3
  Super preset does so in Bridge). The LM head, attention and every non-GEMM kernel stay
  bf16.

The GEMMs' rate: :class:`simulator.compute.ComputeModel` prices an ``fp4`` GEMM as the FP8
ones are priced (the family's measured FP4:BF16 kernel ratio where ``training_fit.yaml``
gives one, else the bf16 curve at the GPU's FP4 peak).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.models.fp8 import AMAX_BYTES, CAST_FLOPS, low_precision_ops
from simulator.models.ops import LayerCost, OpCost
from simulator.precision import FP4

NVFP4 = "nvfp4"              # the recipe's name (Megatron-Bridge's fp4_recipe)
FP4_VALUE_BYTES = 0.5        # E2M1: 4 bits
NVFP4_BLOCK = 16             # values per E4M3 scale
SCALE_BYTES = 1.0            # one E4M3 scale
NVFP4_COPY_BYTES = FP4_VALUE_BYTES + SCALE_BYTES / NVFP4_BLOCK    # 0.5625 per element
BF16_READ_BYTES = 2.0
QUANTIZE_BYTES = BF16_READ_BYTES + NVFP4_COPY_BYTES               # one layout: 2.5625
RHT_QUANTIZE_BYTES = AMAX_BYTES + 2 * QUANTIZE_BYTES              # X, dY: 7.125
WEIGHT_QUANTIZE_BYTES = AMAX_BYTES + BF16_READ_BYTES + 2 * NVFP4_COPY_BYTES   # W: 5.125


def nvfp4_layer(layer: LayerCost, weight_reuse: int = 1) -> LayerCost:
    """``layer`` with its weight GEMMs in NVFP4 and their quantize kernels (blocks only);
    each weight's quantization shared by ``weight_reuse`` micro-batches."""
    if not layer.kind.endswith("block"):
        return layer
    return replace(layer,
                   forward=low_precision_ops(layer.forward,
                                             lambda op: _forward_quantize(op, weight_reuse),
                                             FP4, NVFP4_COPY_BYTES),
                   backward=low_precision_ops(layer.backward, _backward_quantize, FP4,
                                              NVFP4_COPY_BYTES))


def _quantize(op: OpCost, name: str, nbytes: float, elements: float) -> OpCost:
    return OpCost(name, "elementwise", CAST_FLOPS * elements, nbytes, launch=op.launch)


def _forward_quantize(op: OpCost, weight_reuse: int) -> list[OpCost]:
    m, n, k = op.shape            # X [m, k] (row-wise + RHT column-wise), W [k, n] (2D)
    return [_quantize(op, f"nvfp4_quantize.{op.name}",
                      RHT_QUANTIZE_BYTES * m * k + WEIGHT_QUANTIZE_BYTES * k * n / weight_reuse,
                      m * k + k * n / weight_reuse)]


def _backward_quantize(op: OpCost) -> list[OpCost]:
    m, n, k = op.shape
    if op.name.endswith(".dgrad"):  # dY [m, k]: row-wise for dgrad, RHT column-wise for wgrad
        return [_quantize(op, f"nvfp4_quantize.{op.name}", RHT_QUANTIZE_BYTES * m * k, m * k)]
    return []                       # wgrad: the column-wise copies of X and dY
