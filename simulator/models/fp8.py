"""FP8 training: the transformer blocks' Linear GEMMs in FP8, everything else in bf16.

The recipe of torchao's ``Float8Linear`` with tensorwise dynamic scaling (its default, what
torchtitan's ``float8`` option and llm-foundry's ``amp_fp8`` / Transformer Engine's delayed
scaling run in essence): each Linear of a block casts its bf16 input and weight to FP8
(one pass computes the absolute maximum, a second scales and casts: read 2 + read 2 +
write 1 bytes per element) and runs an FP8 GEMM at twice the bf16 tensor-core rate,
reading 1-byte operands and writing a bf16 output. Backward casts the output gradient the
same way, and transposes the FP8 input (weight gradient) and weight (input gradient),
which cuBLAS's FP8 kernels need in TN layout (read 1 + write 1 bytes per element). The
LM head, attention and every non-GEMM kernel stay bf16, as in torchtitan's default filter
(``output`` excluded). With torch.compile the amax and cast passes fuse; this models the
eager passes. Activations and the checkpointing bookkeeping are unchanged (bf16).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.models.ops import LayerCost, OpCost

CAST_BYTES = 5.0         # per element: amax read (2) + cast read (2) + fp8 write (1)
TRANSPOSE_BYTES = 2.0    # per element: fp8 read + fp8 write
CAST_FLOPS = 3.0         # |x| max, scale, round


def fp8_layer(layer: LayerCost) -> LayerCost:
    """``layer`` with its weight GEMMs in FP8 and their cast kernels (blocks only)."""
    if not layer.kind.endswith("block"):
        return layer
    return replace(layer, forward=_ops(layer.forward, _forward_casts),
                   backward=_ops(layer.backward, _backward_casts))


def _ops(ops, casts) -> tuple[OpCost, ...]:
    out = []
    for op in ops:
        if op.op_class == "matmul" and op.weight and op.shape:
            out.extend(casts(op))
            m, n, k = op.shape
            out.append(replace(op, precision="fp8",
                               bytes_accessed=float(m * k + k * n + 2 * m * n)))
        else:
            out.append(op)
    return out


def _cast(name: str, elements: float, per: float) -> OpCost:
    return OpCost(name, "elementwise", CAST_FLOPS * elements if per == CAST_BYTES else 0.0,
                  per * elements)


def _forward_casts(op: OpCost) -> list[OpCost]:
    m, n, k = op.shape            # A = x [m, k], B = w [k, n]
    return [_cast(f"float8_cast.{op.name}", m * k + k * n, CAST_BYTES)]


def _backward_casts(op: OpCost) -> list[OpCost]:
    m, n, k = op.shape
    if op.name.endswith(".dgrad"):  # dX[m, k_in] = dY [m, k] W^T: cast dY, transpose W
        return [_cast(f"float8_cast.{op.name}", m * k, CAST_BYTES),
                _cast(f"float8_transpose.{op.name}", k * n, TRANSPOSE_BYTES)]
    return [_cast(f"float8_transpose.{op.name}", m * k, TRANSPOSE_BYTES)]   # X^T; dY reused
