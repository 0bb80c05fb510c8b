"""Activation checkpointing: which kernels of a block are recomputed and what forward keeps.

``strategy.activation_checkpointing`` is ``none | full | selective`` (the booleans of older
scenarios still work: ``true`` = full, ``false`` = none); ``strategy.selective_ac_option``
says which selective checkpointing, spelled as torchtitan's ``[activation_checkpoint]``
``selective_ac_option`` (``"op"`` or an int) plus Megatron's:

* ``full``: every transformer block in a checkpoint (torchtitan ``mode = "full"``, Megatron
  ``--recompute-granularity full --recompute-method uniform --recompute-num-layers 1``).
  Forward keeps only the block's output (the next block's input); backward reruns the
  whole block forward first.
* ``selective`` with an int ``N``: every Nth block fully checkpointed, the others keep all
  their activations. torchtitan counts wrapped blocks from 1 and checkpoints the block when
  ``count % N == 0`` (``_apply_ac_to_transformer_block``), i.e. blocks ``N-1, 2N-1, ...``.
* ``selective`` with ``"op"`` (the default; torchtitan's per-op policy): inside every
  block the outputs of ``aten.mm`` and of the attention kernel are saved, except that every
  second ``mm`` is recomputed (torchtitan's ``_save_list`` and its ``mm_count % 2 == 0``
  rule); norms, activation functions, residual adds, dropout, rotary and casts are
  recomputed. Counted over this simulator's kernels, where Q/K/V and gate/up are one fused
  matmul each, so the 1st and 3rd weight matmul (``qkv_proj``, ``mlp_gate_up``/``mlp_up``)
  are saved and ``attn_out`` and ``mlp_down`` recomputed (torchtitan's unfused
  ``wq wk wv wo w1 w3 w2`` recompute ``wk wo w3`` instead: about the same FLOPs).
* ``selective`` with ``"attention"`` (Megatron ``--recompute-granularity selective``,
  Korthikanti et al. 2022, arXiv 2205.05198 section 4.2): only the attention core
  (``QK^T``, softmax, dropout, ``AV``, or the flash kernel) is recomputed; without flash
  attention that frees the ``5 a s^2 b`` score terms, with it nothing (the core's output
  stays: ``attn_out`` keeps its input), only the flash forward is rerun.

What forward keeps of a partly recomputed block: its output (as full checkpointing) plus
the ``saved_bytes`` of the ops that are not recomputed (:mod:`simulator.models.transformer`
attributes every saved tensor to the op that produces it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

AC_MODES = ("none", "full", "selective")
SelectiveOption = Literal["op", "attention"]
ATTENTION_CORE = ("attn_scores", "softmax", "attn_dropout", "attn_av")   # without flash
# a checkpointed region's output is kept by the op after it (attn_out saves its input)
_REGION_OUTPUTS = {"op": (), "attention": ("attn_core", "attn_av")}


def ac_mode(value) -> str:
    """``none``, ``full`` or ``selective`` from a scenario's ``activation_checkpointing``
    (a boolean or one of those names; anything else counts as none)."""
    if value is True:
        return "full"
    return value if value in AC_MODES else "none"


def ac_setting(strategy: dict) -> bool | str:
    """How reports show a scenario's checkpointing: the old boolean for none/full,
    ``"selective:<option>"`` otherwise."""
    mode = ac_mode(strategy.get("activation_checkpointing", False))
    if mode != "selective":
        return mode == "full"
    return f"selective:{strategy.get('selective_ac_option') or 'op'}"


def ac_label(setting: bool | str) -> str:
    """``on``/``off`` for the old booleans, the selective setting as it is."""
    return setting if isinstance(setting, str) else ("on" if setting else "off")


@dataclass(frozen=True)
class Recompute:
    """A checkpointed block: the forward ops rerun before its backward and the activation
    bytes its forward keeps."""

    ops: tuple[int, ...]      # indices into layer.forward, in order
    kept_bytes: int
    full: bool                # the whole block (full, or every-Nth selective)


def block_index(layer) -> int | None:
    """The block number in a layer name ``block.<i>`` (None for other layers)."""
    found = re.search(r"(\d+)$", layer.name)
    return int(found.group(1)) if found else None


def recompute_plan(layer, cfg) -> Recompute | None:
    """What checkpointing does to ``layer`` under ``cfg`` (None: keeps everything)."""
    mode, option = cfg.ac_mode, cfg.selective_policy
    if mode == "none" or not layer.kind.endswith("block"):
        return None
    if mode == "full" or isinstance(option, int):
        if isinstance(option, int) and mode == "selective":
            index = block_index(layer)
            if index is None or (index + 1) % option:
                return None
        kept = min(layer.output_bytes, layer.activation_bytes)
        return Recompute(tuple(range(len(layer.forward))), kept, True)
    ops = _recomputed_ops(layer.forward, option)
    saved = sum(c.saved_bytes for i, c in enumerate(layer.forward)
                if i not in ops or c.name in _REGION_OUTPUTS[option])
    if len(layer.forward) - 1 in ops:        # the block output stays, as with full
        saved += layer.output_bytes
    return Recompute(ops, min(layer.activation_bytes, saved), False)


def _recomputed_ops(forward, option: str) -> tuple[int, ...]:
    if option == "attention":
        return tuple(i for i, c in enumerate(forward)
                     if c.op_class == "attention" or c.name in ATTENTION_CORE)
    out, mm = [], 0
    for i, c in enumerate(forward):
        if c.op_class == "attention":
            continue                         # SDPA output saved
        if c.op_class == "matmul" and c.weight:
            mm += 1
            if mm % 2:                       # 1st, 3rd, ... weight matmul saved
                continue
        out.append(i)
    return tuple(out)


def kept_bytes(layer, cfg) -> int:
    """Activation bytes ``layer`` holds between its forward and its backward."""
    plan = recompute_plan(layer, cfg)
    return layer.activation_bytes if plan is None else plan.kept_bytes
