"""Activation bytes one transformer layer keeps for backward under tensor, sequence and
context parallelism and each activation-checkpointing mode (Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", arXiv 2205.05198, Table 2).

One block's saved tensors split three ways, per micro-batch of ``b`` sequences of ``s``
tokens at ``e`` bytes per element (masks 1 byte); with ``e = 2``, dropout and ``f = 4h``
they are the paper's terms:

* **replicated** over the TP group (and split by sequence parallelism): the two norm inputs
  ``2 sbh e``, the QKV and MLP inputs ``2 sbh e``, the two dropout masks ``2 sbh``
  (``10 sbh``);
* **sharded** by TP: Q ``sbh e``, K and V ``2 sb kvd e``, the attention output projection's
  input ``sbh e``, the MLP's activation input and down-projection input ``2 sbf e`` (GELU;
  ``3 sbf e`` for SwiGLU's gate and up) (``24 sbh``);
* **scores**, sharded by TP (heads): softmax output, its dropout mask and the dropped-out
  probabilities, ``a s^2 b (2e + 1)`` (``5 a s^2 b``; ``e`` per element without dropout).

So a layer keeps ``sbh (10 + 24/t + 5as/(ht))`` under TP, ``sbh (34/t + 5as/(ht))`` with
sequence parallelism; flash attention and selective recompute (Megatron's recompute of the
core attention) drop the score term; full recompute keeps only the layer input, ``2 sbh``
(``2 sbh / t`` with SP, whose layer input is sharded), and rebuilds one layer at a time in
backward (:func:`layer_working_bytes`). Context parallelism splits the sequence: every term
uses ``s / cp``, and the score term is dropped (ring attention is blockwise, flash-style:
Megatron's CP runs on fused attention). At ``t = 1`` the three terms add up to
:func:`simulator.models.transformer.block_activation_bytes` without autocast.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.errors import ConfigError
from simulator.models.moe import moe_activation_bytes
from simulator.models.spec import ModelSpec

AC_MODES = ("none", "selective", "full")
MASK_BYTES = 1


@dataclass(frozen=True)
class LayerTerms:
    """One block's saved bytes for one micro-batch, before any parallel split."""

    replicated: int
    sharded: int
    scores: int


def layer_terms(model: ModelSpec, batch: int, seq_len: int, e: int) -> LayerTerms:
    """The three terms of the module doc for ``batch`` sequences of ``seq_len`` tokens."""
    sb, h, f = seq_len * batch, model.hidden, model.ffn_hidden
    kvd = model.kv_heads * model.head_dim
    drop = model.dropout > 0
    replicated = 4 * sb * h * e + (2 * sb * h * MASK_BYTES if drop else 0)
    mlp = (3 if model.mlp == "swiglu" else 2) * sb * f * e
    sharded = 2 * sb * model.q_width * e + 2 * sb * kvd * e + mlp     # Q, O; K, V; MLP
    per_score = (2 * e + MASK_BYTES) if drop else e
    scores = model.heads * seq_len * sb * per_score
    return LayerTerms(replicated, sharded, scores)


def check_ac(ac: str) -> str:
    """``ac`` if it is one of :data:`AC_MODES`.

    :raises ConfigError: (field ``strategy.activation_checkpointing``) otherwise.
    """
    if ac not in AC_MODES:
        raise ConfigError(f"unknown activation checkpointing {ac!r}; valid: "
                          f"{', '.join(AC_MODES)}", field="strategy.activation_checkpointing")
    return ac


def _split(terms: LayerTerms, tp: int, sp: bool, keep_scores: bool) -> int:
    """Bytes per rank of the terms under TP (``sp``: the replicated term split too)."""
    replicated = terms.replicated // tp if sp else terms.replicated
    scores = terms.scores // tp if keep_scores else 0
    return replicated + terms.sharded // tp + scores


def layer_saved_bytes(model: ModelSpec, *, batch: int, seq_len: int, e: int, tp: int = 1,
                      sp: bool = False, cp: int = 1, ac: str = "none", flash: bool = False,
                      moe: bool = False, etp: int = 1, copies: float | None = None) -> int:
    """Bytes one layer keeps per rank between its forward and backward, for one
    micro-batch (the module doc: Table 2 of arXiv 2205.05198). ``moe``: an MoE block, whose
    MoE half replaces the dense MLP (:func:`moe_half_bytes`, experts split over ``etp``,
    ``copies`` the token copies the rank's experts keep)."""
    s = seq_len // cp
    if check_ac(ac) == "full":
        layer_input = s * batch * model.hidden * e
        return layer_input // tp if sp else layer_input
    keep_scores = ac == "none" and not flash and cp == 1
    if not moe:
        return _split(layer_terms(model, batch, s, e), tp, sp, keep_scores)
    attention = _split(layer_terms(replace(model, ffn_hidden=0), batch, s, e), tp, sp,
                       keep_scores)
    return attention + moe_half_bytes(model, batch=batch, seq_len=s, e=e, tp=tp, sp=sp,
                                      etp=etp, copies=copies)


def moe_half_bytes(model: ModelSpec, *, batch: int, seq_len: int, e: int, tp: int = 1,
                   sp: bool = False, etp: int = 1, copies: float | None = None) -> int:
    """What an MoE block's MoE half saves beyond its input
    (:func:`simulator.models.moe.moe_activation_bytes`: permuted tokens, expert inner
    tensors, router probabilities, indices), for the rank's tokens (``/ t`` with SP): the
    ``copies`` its experts keep (the busiest EP rank's under uneven routing,
    :func:`.moe.ep_loads`; None: balanced routing, ``top_k`` copies of each token), received
    back from each of the ``etp`` ranks that split the experts, each expert ``1 / etp`` as
    wide."""
    tokens = seq_len * batch // (tp if sp else 1)
    kept = tokens * model.top_k if copies is None else copies
    return moe_activation_bytes(model, tokens, e, etp * kept, etp)


def layer_working_bytes(model: ModelSpec, *, batch: int, seq_len: int, e: int, tp: int = 1,
                        sp: bool = False, cp: int = 1, ac: str = "none",
                        flash: bool = False) -> int:
    """Bytes a recompute rebuilds for one layer during its backward, on top of what is
    kept: the whole layer (full recompute; nothing is saved for it but its input) or its
    score term (selective recompute without flash attention); 0 without recompute."""
    s = seq_len // cp
    if check_ac(ac) == "none":
        return 0
    terms = layer_terms(model, batch, s, e)
    keep_scores = not flash and cp == 1
    if ac == "full":
        return _split(terms, tp, sp, keep_scores)
    return terms.scores // tp if keep_scores else 0


def embedding_saved_bytes(model: ModelSpec, *, batch: int, seq_len: int, tp: int = 1,
                          sp: bool = False, cp: int = 1) -> int:
    """The first stage's extra: the embedding's dropout mask, ``sbh`` bytes (``/t`` with
    SP; Korthikanti et al. section 4.3), when the model has dropout."""
    if model.dropout <= 0:
        return 0
    mask = (seq_len // cp) * batch * model.hidden * MASK_BYTES
    return mask // tp if sp else mask


def head_saved_bytes(model: ModelSpec, *, batch: int, seq_len: int, e: int, tp: int = 1,
                     sp: bool = False, cp: int = 1) -> int:
    """The last stage's extra (Korthikanti et al. section 4.3, ``4 sbh/t (1 + v/h)`` for
    ``e = 2`` with SP): the final norm's and the LM head's inputs, ``2 sbh e`` (``/t`` with
    SP), and the fp32 logits the cross-entropy keeps, ``4 sbv / t`` (vocab-parallel)."""
    sb = (seq_len // cp) * batch
    inputs = 2 * sb * model.hidden * e
    return (inputs // tp if sp else inputs) + 4 * sb * model.vocab // tp


__all__ = ["AC_MODES", "LayerTerms", "check_ac", "embedding_saved_bytes", "head_saved_bytes",
           "layer_saved_bytes", "layer_terms", "layer_working_bytes", "moe_half_bytes"]
