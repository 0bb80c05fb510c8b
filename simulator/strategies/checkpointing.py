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
  recomputed. Counted over this simulator's kernels: in the reference code
  (``training.elementwise: eager``, :mod:`simulator.models.projections`) each Linear is a
  matmul, so torchtitan's ``wq wk wv wo w1 w3 w2`` recompute ``wk``, ``wo`` and ``w3``
  (``qkv_proj.k``, ``attn_out``, ``mlp_gate_up.up``), as torchtitan does; in fused code,
  where Q/K/V and gate/up are one matmul each, the 1st and 3rd (``qkv_proj``,
  ``mlp_gate_up``/``mlp_up``) are saved and ``attn_out`` and ``mlp_down`` recomputed.
* ``selective`` with ``"attention"`` (Megatron ``--recompute-granularity selective``,
  Korthikanti et al. 2022, arXiv 2205.05198 section 4.2): only the attention core
  (``QK^T``, softmax, dropout, ``AV``, or the flash kernel) is recomputed; without flash
  attention that frees the ``5 a s^2 b`` score terms, with it nothing (the core's output
  stays: ``attn_out`` keeps its input), only the flash forward is rerun. It is Megatron-Core's
  ``recompute_modules`` default, ``["core_attn"]``; a Megatron strategy's other modules
  (:data:`MEGATRON_MODULES`) are read the same way, module by module (below).

Megatron-Core's ``recompute_modules`` (``recompute_granularity: selective``;
NVIDIA/Megatron-LM ``megatron/core/transformer/transformer_config.py``, the field's doc and
``__post_init__``'s allowed set; where each is honoured: ``transformer_layer.py``,
``mlp.py``, ``moe/experts.py``, ``moe/moe_layer.py``, ``multi_latent_attention.py``).
Each module reruns its forward kernels before the block's backward and drops the bytes
those kernels saved (the per-op ``saved_bytes`` of :mod:`simulator.models.transformer`,
:mod:`simulator.models.mla`, :mod:`simulator.models.moe`), per block kind:

* ``core_attn``: the attention core, as ``"attention"`` above (its output stays);
* ``layernorm`` (``CheckpointWithoutOutput`` on the norm, output discarded): the norms that
  are modules of their own: the pre-MLP norm of an MoE block (``TENorm``) and the input
  norm of an MLA block (its down projections are plain ``TELinear``); the other norms are
  fused into the next linear (``TELayerNormColumnParallelLinear``: the layer's norm is an
  ``IdentityOp``, which ``TransformerLayer`` skips). Drops the norm's output, ``e t h``
  per norm (``t`` the rank's tokens of the norm), reruns the norm;
* ``mlp`` (``tensor_parallel.checkpoint`` of the dense MLP; ``TransformerLayer`` ignores it
  on an MoE layer): the fused pre-MLP norm, the up (gate-up) projection, the activation
  and the down projection rerun; drops the norm's output ``e t h``, the up projection's
  output (``2 e t f / tp`` SwiGLU, ``e t f / tp`` else) and the activation's ``e t f / tp``;
* ``moe_act`` (``CheckpointWithoutOutput`` on the grouped experts' activation): reruns
  the activation; drops its output, the down projection's input, ``e T f / etp`` for the
  ``T`` token copies the rank's experts receive;
* ``shared_experts`` (``tensor_parallel.checkpoint`` of the shared experts): their up
  projection, activation and down projection rerun; drops ``2 e t fs`` (SwiGLU; ``e t fs``
  else) and ``e t fs``, ``fs`` = shared experts x ``moe_ffn_hidden``; nothing on a model
  without shared experts (there is no such module to checkpoint);
* ``mla_up_proj`` (``CheckpointWithoutOutput`` on the up projections and the rotary,
  output discarded once the attention core has run): ``q_up_proj``, ``kv_up_proj`` and the
  rotary rerun; drops Q, K and V, ``e t a (2 (dn + dr) + dv) / tp``;
* ``moe`` (the whole MoE layer, its token dispatch and combine included) is refused: not
  modelled.

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


# Megatron-Core's recompute_modules (TransformerConfig.__post_init__'s allowed set at
# NVIDIA/Megatron-LM@dc13771018ffb32b2999a9d85fcbd850616710e9; later releases add names
# such as mlp_act and routed_experts, refused here as unknown)
MEGATRON_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                    "shared_experts")
MODULES_NOT_MODELLED = {"moe": "recomputing the whole MoE layer reruns its token dispatch "
                               "and combine, which is not modelled"}
_ACTS = ("gelu", "swiglu", "squared_relu")          # the MLPs' activation kernels
_DENSE_MLP = ("mlp_gate_up", "mlp_up", *_ACTS, "mlp_down")
# a recomputed region's output is kept by the op after it (attn_out saves its input)
_KEPT_OUTPUTS = ("attn_core", "attn_av")


def module_ops(forward, module: str) -> tuple[int, ...]:
    """The forward ops of a block that Megatron-Core's ``module`` recomputes (the module
    doc); none where the block has no such module."""
    names = {c.name for c in forward}
    mla, moe = "q_down_proj" in names, "moe_router" in names
    if module == "core_attn":
        return tuple(i for i, c in enumerate(forward)
                     if c.op_class == "attention" or c.name in ATTENTION_CORE)
    members = {"layernorm": ("norm1",) * mla + ("norm2",) * moe,
               "mlp": () if moe else ("norm2", *_DENSE_MLP),
               "moe_act": tuple(f"moe_expert_{act}" for act in _ACTS),
               "shared_experts": tuple(f"moe_shared_{op}" for op in ("gate_up", "up", *_ACTS,
                                                                     "down")),
               "mla_up_proj": ("q_up_proj", "kv_up_proj", "rotary") * mla}[module]
    return tuple(i for i, c in enumerate(forward) if c.name in members)


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
    if option == "attention":      # Megatron's: its recompute_modules, default core_attn
        modules = getattr(cfg, "recompute_modules", None)
        return _modules_plan(layer, ("core_attn",) if modules is None else modules)
    ops = _recomputed_ops(layer.forward, option)
    saved = sum(c.saved_bytes for i, c in enumerate(layer.forward)
                if i not in ops)
    if len(layer.forward) - 1 in ops:        # the block output stays, as with full
        saved += layer.output_bytes
    return Recompute(ops, min(layer.activation_bytes, saved), False)


def _modules_plan(layer, modules) -> Recompute | None:
    """Megatron-Core's selective recompute of ``modules`` (the module doc): their forward
    ops rerun; the block keeps all it saves less what those ops saved (a region's output
    that the next op saves stays)."""
    ops = sorted({i for m in modules for i in module_ops(layer.forward, m)})
    if not ops:
        return None
    dropped = sum(layer.forward[i].saved_bytes for i in ops
                  if layer.forward[i].name not in _KEPT_OUTPUTS)
    return Recompute(tuple(ops), max(0, layer.activation_bytes - dropped), False)


def _recomputed_ops(forward, option: str) -> tuple[int, ...]:
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
