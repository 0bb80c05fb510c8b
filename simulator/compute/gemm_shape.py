"""GEMM time from its shape: output tiles spread in waves over the SMs, split-K, alignment.

A cuBLAS/CUTLASS GEMM ``C[M, N] = A[M, K] B[K, N]`` cuts C into ``tm x tn`` output tiles;
each SM computes one tile at a time, so the kernel runs ``waves = ceil(tiles / SMs)``
rounds, each as long as one tile's ``2 tm tn (K + k_overhead)`` FLOPs at one SM's share of
the sustained rate (``peak * eff_max / SMs``). ``k_overhead`` is the per-tile fixed cost
(prologue, epilogue, pipeline fill) in units of K. When the tiles do not fill the GPU
(small ``M N``, long ``K``) the library splits K over ``s`` partial tiles (split-K) and sums
them. The heuristics pick the fastest of the candidate tiles and splits; so does this model.
A leading dimension that is not a multiple of ``align`` elements (16 bytes of a 16-bit
type) rules out the vectorised tensor-core kernels: the fallback runs
``unaligned_efficiency`` as fast (the H200 profiles: 50,257- and 30,522-word vocabulary
GEMMs at 12-30% of peak). Of row-major operands, B and C are read along ``n`` and A along
``k``, or along ``m`` where A is a transposed view (``transa``: a weight gradient
``dW = X^T dY``, whose reduction runs over the stored rows); the other dimension, a Linear's
tokens (``m`` forward and for the input gradient, ``k`` for the weight gradient), takes any
count (an MoE expert's tokens under uneven routing). A profiled GEMM's layout is not known
(``transa=None``): every dimension is checked, as its token counts are multiples of 8.

So one GEMM costs ``half_time + min over (tile, split) of waves * tile_time``: the fixed
``half_time`` per kernel as before, and a shape term that approaches
``flops / (peak * eff_max)`` for a large, aligned GEMM. The constants per GPU family live
in ``simulator/data/compute.yaml`` (``gemm_shape``), fitted by
:mod:`simulator.compute.gemm_fit`.

A *grouped* GEMM (the experts of an MoE layer: ``groups`` GEMMs of the same ``m x n x k``,
one per expert) runs as Transformer Engine's ``GroupedLinear`` runs it on Hopper: one cuBLAS
GEMM per expert, issued round-robin on ``GROUPED_STREAMS`` compute streams
(``multi_stream_cublas_gemm`` in ``transformer_engine/common/gemm/cublaslt_gemm.cu``; the
stream count is ``num_streams = 4`` in ``common/include/transformer_engine/gemm.h``). So
the experts run in rounds of up to 4 concurrent GEMMs: each GEMM pads its own ``m`` to
whole tiles (tile quantisation: an expert with few tokens pays for a whole tile row), and
the concurrent GEMMs' tiles share the waves over the SMs (wave quantisation over the
round, not per GEMM). Each round pays the kernel's fixed ``half_time`` once.

Where a plain GEMM costs the larger of this compute time and its bytes over the HBM rate,
a grouped GEMM costs their sum (:class:`simulator.compute.model.ComputeModel`): each
expert's GEMM touches its weights once, for a few hundred rows, and does not hide their
loads under its MMAs. Checked against 108 measured grouped GEMMs on a B200
(``docs/compute.md``, "A grouped GEMM's bytes add to its compute").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)        # split-K factors the model may choose
GROUPED_STREAMS = 4      # Transformer Engine's grouped-GEMM compute streams (module doc)


@dataclass(frozen=True)
class GemmShape:
    """Shape constants of one GPU family."""

    tiles: tuple[tuple[int, int], ...]     # candidate (tm, tn) output tiles
    k_overhead: float                      # per-tile fixed cost, in K elements
    unaligned_efficiency: float            # fallback kernel rate / aligned rate
    align: int = 8                         # elements (16 bytes at 2 bytes/element)
    source: str = ""


def aligned(m: int, n: int, k: int, align: int, transa: bool | None = False) -> bool:
    """Whether the leading dimensions (module doc) are multiples of ``align``: ``k`` and
    ``n``, ``m`` and ``n`` with ``transa``, all three where the layout is not known
    (``None``)."""
    dims = (m, n, k) if transa is None else (m, n) if transa else (k, n)
    return all(d % align == 0 for d in dims)


def _round_seconds(m: int, n: int, k: int, gemms: int, sms: int, per_sm: float,
                   shape: GemmShape) -> float:
    """Seconds of ``gemms`` concurrent ``m x n x k`` GEMMs whose tiles share the waves: the
    best candidate tile and split-K (the same for each), before any alignment fallback."""
    best = math.inf
    for tm, tn in shape.tiles:
        tiles = gemms * math.ceil(m / tm) * math.ceil(n / tn)
        for s in SPLITS:
            if s > 1 and (tiles * s > 2 * sms or k // s < 256):
                break
            waves = math.ceil(tiles * s / sms)
            best = min(best, waves * 2.0 * tm * tn * (math.ceil(k / s) + shape.k_overhead)
                       / per_sm)
    return best


def shape_seconds(m: int, n: int, k: int, sms: int, rate_flops: float,
                  shape: GemmShape, transa: bool | None = False) -> float:
    """Seconds of the shape term of an ``m x n x k`` GEMM on ``sms`` SMs at the sustained
    ``rate_flops`` (``peak * eff_max``); the kernel's fixed ``half_time`` is not included.
    ``transa``: A is a transposed view (:func:`aligned`)."""
    best = _round_seconds(m, n, k, 1, sms, rate_flops / sms, shape)
    if not aligned(m, n, k, shape.align, transa):
        best /= shape.unaligned_efficiency
    return best


def grouped_rounds(groups: int, streams: int = GROUPED_STREAMS) -> int:
    """Rounds of concurrent GEMMs a grouped GEMM of ``groups`` runs in."""
    return -(-groups // streams)


def grouped_shape_seconds(m: int, n: int, k: int, groups: int, sms: int, rate_flops: float,
                          shape: GemmShape, streams: int = GROUPED_STREAMS,
                          transa: bool | None = False) -> float:
    """Seconds of the shape term of ``groups`` GEMMs ``m x n x k`` run ``streams`` at a
    time (module doc): per round, the tiles of its concurrent GEMMs in waves over the SMs
    (the same tile and split-K for each, the best for the round); no fixed ``half_time``."""
    full, rest = divmod(groups, streams)
    per_sm = rate_flops / sms
    total = full * _round_seconds(m, n, k, streams, sms, per_sm, shape) if full else 0.0
    if rest:
        total += _round_seconds(m, n, k, rest, sms, per_sm, shape)
    if not aligned(m, n, k, shape.align, transa):
        total /= shape.unaligned_efficiency
    return total


def shape_efficiency(m: int, n: int, k: int, sms: int, shape: GemmShape,
                     transa: bool | None = False) -> float:
    """Fraction of the sustained rate the shape term reaches (1 for an ideal shape)."""
    return 2.0 * m * n * k / shape_seconds(m, n, k, sms, 1.0, shape, transa)


def grouped_shape_efficiency(m: int, n: int, k: int, groups: int, sms: int,
                             shape: GemmShape, transa: bool | None = False) -> float:
    """Fraction of the sustained rate ``groups`` GEMMs ``m x n x k`` reach as a grouped
    GEMM (:func:`grouped_shape_seconds`); one group is :func:`shape_efficiency`."""
    return 2.0 * groups * m * n * k / grouped_shape_seconds(m, n, k, groups, sms, 1.0, shape,
                                                            transa=transa)
