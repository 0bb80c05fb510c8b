"""Sliding-window (banded causal) attention: a windowed block's attention kernel.

A model file's ``sliding_window: w`` gives each query of a windowed block the ``w`` keys
up to and including itself (:mod:`simulator.models.spec`; GPT-OSS: ``w = 128`` on every
other block, ``attention_pattern: alternating``). Query ``i`` (from 0) of a sequence of
``s`` tokens then attends to ``min(i + 1, w)`` keys, so the sequence has

    ``P_w(s) = sum_i min(i + 1, w) = w (w + 1) / 2 + (s - w) w``   (``s >= w``)

unmasked (query, key) pairs instead of the causal ``s (s + 1) / 2``: about ``s w`` rather
than ``s^2 / 2``. A fused (flash) attention kernel skips the tiles the band masks out, as
it skips the causal mask's, so the windowed block's ``attn_core`` and its backward cost
``P_w(s) / (s (s + 1) / 2)`` of the causal kernel's FLOPs, read and write the same Q, K,
V, O (and gradients), and are timed on the same flash-attention efficiency curve at
their own keys per query, ``P_w(s) / s`` (the curve's ``n``; about ``w``): the price any
attention kernel with that many keys per query pays, as a ring step of context
parallelism is timed at its block's keys (:func:`simulator.strategies.parallel.context.
ring_slices`). Eager (unfused) attention computes the whole score square and masks it,
windowed or not, so its kernels are left as they are.

Not modelled: a window under context parallelism (refused: the ring's K/V blocks and
their masks would differ per step); attention sinks (GPT-OSS's learned per-head logit in
the softmax denominator, Megatron-Core's ``softmax_type: learnable``): one scalar per head
and a per-row term of the softmax, negligible next to the score tiles, so left out.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.errors import ConfigError
from simulator.models.ops import LayerCost
from simulator.models.spec import ModelSpec

ATTENTION = "attention"      # the op class of a fused attention kernel (and its backward)


def window_pairs(seq_len: int, window: int) -> int:
    """Unmasked (query, key) pairs of one sequence under a causal window of ``window``
    keys: ``sum over queries i of min(i + 1, window)``."""
    w = min(window, seq_len)
    return w * (w + 1) // 2 + (seq_len - w) * w


def causal_pairs(seq_len: int) -> int:
    """Unmasked (query, key) pairs of full causal attention: ``s (s + 1) / 2``."""
    return seq_len * (seq_len + 1) // 2


def is_windowed_layer(model: ModelSpec, index: int) -> bool:
    """Whether block ``index`` (from 0) has the sliding window: every block (``sliding``)
    or the even ones (``alternating``, the first block windowed)."""
    if not model.sliding_window:
        return False
    return model.attention_pattern == "sliding" or index % 2 == 0


def check_window(model: ModelSpec, cp: int) -> None:
    """Refuse what the window's costing does not cover: context parallelism."""
    if model.sliding_window and cp > 1:
        raise ConfigError(f"sliding-window attention ({model.name}) under context "
                          f"parallelism (cp {cp}) is not modelled",
                          field="strategy.context_parallel_size")


def windowed_block(layer: LayerCost, model: ModelSpec, seq_len: int) -> LayerCost:
    """``layer`` (a full causal block over sequences of ``seq_len``) with its fused
    attention kernels as the window runs them: ``P_w(s) / (s (s + 1) / 2)`` of their FLOPs,
    ``P_w(s) / s`` keys per query (see the module doc)."""
    pairs = window_pairs(seq_len, model.sliding_window)
    scale = pairs / causal_pairs(seq_len)
    keys = max(1, round(pairs / seq_len))

    def cut(ops):
        return tuple(replace(op, flops=op.flops * scale, n=keys if op.n else 0)
                     if op.op_class == ATTENTION else op for op in ops)

    return replace(layer, forward=cut(layer.forward), backward=cut(layer.backward))


def keep_attention(layer: LayerCost, source: LayerCost) -> LayerCost:
    """``layer`` with its fused attention kernels taken from ``source`` (the same block
    before a strategy rebuilt its MLP half: an expert-parallel rank's MoE block keeps its
    windowed or full attention)."""
    def swap(ops, theirs):
        kept = iter(op for op in theirs if op.op_class == ATTENTION)
        return tuple(next(kept) if op.op_class == ATTENTION else op for op in ops)

    return replace(layer, forward=swap(layer.forward, source.forward),
                   backward=swap(layer.backward, source.backward))
