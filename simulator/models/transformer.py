"""Costs of transformer layers (GPT, Llama, BERT): embedding, one block, head.

See :mod:`simulator.models.costs` for the counting conventions. Blocks are written in
pre-norm order (GPT-2/3, Llama); BERT's post-norm order has the same costs. Dropout
kernels are not modelled as ops (their masks are counted in the activations).
"""

from __future__ import annotations

from simulator.models.costs import (
    ACT_FLOPS, ID_BYTES, LOSS_BWD_FLOPS, LOSS_BYTES, LOSS_FLOPS, NORM_FLOPS, SOFTMAX_BWD_FLOPS,
    SOFTMAX_FLOPS, LayerCost, OpCost, matmul, matmul_bwd, pointwise)
from simulator.models.spec import ModelSpec


def norm_params(model: ModelSpec) -> int:
    """Parameters of one norm: scale (+ shift for a biased LayerNorm)."""
    return model.hidden * (2 if model.norm == "layernorm" and model.bias else 1)


def block_params(model: ModelSpec) -> int:
    """Parameters of one transformer block (attention, MLP, two norms)."""
    h, f, kvd = model.hidden, model.ffn_hidden, model.kv_heads * model.head_dim
    mats = 3 if model.mlp == "swiglu" else 2
    biases = (2 * h + 2 * kvd) + ((mats - 1) * f + h) if model.bias else 0
    return h * (h + 2 * kvd) + h * h + mats * h * f + biases + 2 * norm_params(model)


def block_activation_bytes(model: ModelSpec, batch: int, seq_len: int, e: int,
                           flash_attention: bool) -> int:
    """Bytes one block saves for backward: Korthikanti et al. 2022 (arXiv 2205.05198).

    For 16-bit precision ``s b h (34 + 5 a s / h)`` for a GPT block: attention
    ``11 s b h + 5 a s^2 b``, MLP ``19 s b h``, norms ``4 s b h`` (1-byte dropout masks
    included). Generalised: K/V saved at ``kv_heads`` width, MLP ``3 s b h + 4 s b f``
    (GELU) or ``3 s b h + 6 s b f`` (SwiGLU keeps gate and up). Flash attention drops
    the ``5 a s^2 b`` score terms. Scaled by ``e / 2`` for other element sizes.
    """
    sb, h, f = seq_len * batch, model.hidden, model.ffn_hidden
    kvd = model.kv_heads * model.head_dim
    attn = 7 * sb * h + 4 * sb * kvd
    if not flash_attention:
        attn += 5 * model.heads * seq_len * sb
    mlp = 3 * sb * h + (6 if model.mlp == "swiglu" else 4) * sb * f
    return (attn + mlp + 4 * sb * h) * e // 2


def _attention(model: ModelSpec, b: int, s: int, e: int, flash: bool):
    """Forward and backward ops of the attention core (after the QKV projection)."""
    t, h, a = b * s, model.hidden, model.heads
    kvd = model.kv_heads * model.head_dim
    mm = 2.0 * b * s * s * h              # one of QK^T, AV
    scores = float(b * a * s * s)         # elements of the score matrix
    sm, sm_bwd = SOFTMAX_FLOPS * scores, SOFTMAX_BWD_FLOPS * scores
    qkvo = e * (2 * t * h + 2 * t * kvd)  # Q, K, V and O (or their gradients)
    if flash:
        lse = 4.0 * b * a * s
        fwd = [OpCost("attn_core", "attention", 2 * mm + sm, qkvo + lse)]
        # reads Q, K, V, O, dO, lse; writes dQ, dK, dV: twice the forward tensors
        bwd = [OpCost("attn_core.bwd", "attention", 5 * mm + sm + sm_bwd, 2 * qkvo + lse)]
        return fwd, bwd
    fwd = [OpCost("attn_scores", "matmul", mm, e * (t * h + t * kvd + scores)),
           OpCost("softmax", "elementwise", sm, 2.0 * e * scores),
           OpCost("attn_av", "matmul", mm, e * (scores + t * kvd + t * h))]
    bwd = [OpCost("attn_av.grad_probs", "matmul", mm, e * (t * h + t * kvd + scores)),
           OpCost("attn_av.grad_v", "matmul", mm, e * (scores + t * h + t * kvd)),
           OpCost("softmax.bwd", "elementwise", sm_bwd, 3.0 * e * scores),
           OpCost("attn_scores.grad_q", "matmul", mm, e * (scores + t * kvd + t * h)),
           OpCost("attn_scores.grad_k", "matmul", mm, e * (scores + t * h + t * kvd))]
    return fwd, bwd


def _mlp(model: ModelSpec, t: int, e: int):
    """Forward and backward ops of the MLP."""
    h, f = model.hidden, model.ffn_hidden
    up, width = ("mlp_gate_up", 2 * f) if model.mlp == "swiglu" else ("mlp_up", f)
    act_in = 3 if model.mlp == "swiglu" else 2     # tensors touched forward
    fwd = [matmul(up, t, h, width, e),
           pointwise(model.mlp, "elementwise", t * f, ACT_FLOPS[model.mlp], act_in, e),
           matmul("mlp_down", t, f, h, e)]
    bwd = [*matmul_bwd("mlp_down", t, f, h, e),
           pointwise(f"{model.mlp}.bwd", "elementwise", t * f, ACT_FLOPS[model.mlp],
                     2 * act_in - 1, e),
           *matmul_bwd(up, t, h, width, e)]
    return fwd, bwd


def _norm(model: ModelSpec, name: str, t: int, e: int) -> tuple[OpCost, OpCost]:
    """Forward (read x, write y) and backward (read x, dy; write dx and weight grads)."""
    per, w = NORM_FLOPS[model.norm], e * norm_params(model)
    n = t * model.hidden
    return (OpCost(name, "norm", per * n, 2.0 * e * n + w),
            OpCost(f"{name}.bwd", "norm", 2 * per * n, 3.0 * e * n + 2 * w))


def _residual(name: str, t: int, h: int, e: int) -> tuple[OpCost, OpCost]:
    add = pointwise(name, "elementwise", t * h, 1, 3, e)
    return add, OpCost(f"{name}.bwd", "elementwise", add.flops, add.bytes_accessed)


def block_cost(model: ModelSpec, b: int, s: int, e: int, flash: bool) -> LayerCost:
    """One transformer block on ``b`` sequences of ``s`` tokens at ``e`` bytes/element."""
    t, h = b * s, model.hidden
    qkv_n = h + 2 * model.kv_heads * model.head_dim
    n1, n2 = _norm(model, "norm1", t, e), _norm(model, "norm2", t, e)
    r1, r2 = _residual("residual1", t, h, e), _residual("residual2", t, h, e)
    attn_f, attn_b = _attention(model, b, s, e, flash)
    mlp_f, mlp_b = _mlp(model, t, e)
    fwd = [n1[0], matmul("qkv_proj", t, h, qkv_n, e), *attn_f, matmul("attn_out", t, h, h, e),
           r1[0], n2[0], *mlp_f, r2[0]]
    bwd = [r2[1], *mlp_b, n2[1], r1[1], *matmul_bwd("attn_out", t, h, h, e), *attn_b,
           *matmul_bwd("qkv_proj", t, h, qkv_n, e), n1[1]]
    return LayerCost("block", "transformer_block", block_params(model), tuple(fwd),
                     tuple(bwd), block_activation_bytes(model, b, s, e, flash), e * t * h)


def embed_params(model: ModelSpec) -> int:
    """Token, position and segment tables (+ BERT's embedding LayerNorm)."""
    pos = model.max_seq_len if model.position_embedding == "learned" else 0
    norm = norm_params(model) if model.family == "bert" else 0
    return (model.vocab + pos + model.type_vocab) * model.hidden + norm


def embed_cost(model: ModelSpec, b: int, s: int, e: int) -> LayerCost:
    """Embedding lookup (memory-bound gather; position/segment rows added), no matmul.

    Backward zero-fills the dense gradient of every table and scatter-adds into it.
    """
    t, h = b * s, model.hidden
    pos = model.max_seq_len if model.position_embedding == "learned" else 0
    tables = 1 + (pos > 0) + (model.type_vocab > 0)
    rows = model.vocab + pos + model.type_vocab
    fwd = [OpCost("embed_lookup", "embedding", float((tables - 1) * t * h),
                  float(ID_BYTES * t + e * (tables + 1) * t * h))]
    bwd = [OpCost("embed_lookup.bwd", "embedding", float(tables * t * h),
                  float(ID_BYTES * t + e * (rows * h + 3 * tables * t * h)))]
    act = ID_BYTES * t
    if model.family == "bert":
        n = _norm(model, "embed_norm", t, e)
        fwd.append(n[0])
        bwd.insert(0, n[1])
        act += e * t * h
    return LayerCost("embed", "embedding", embed_params(model), tuple(fwd), tuple(bwd),
                     act, e * t * h)


def head_params(model: ModelSpec) -> int:
    """Final norm + untied LM head (GPT/Llama) or BERT's masked-LM head (decoder tied)."""
    h, v = model.hidden, model.vocab
    if model.family == "bert":
        return h * h + h + norm_params(model) + v
    return norm_params(model) + (0 if model.tied_embeddings else v * h)


def head_cost(model: ModelSpec, b: int, s: int, e: int) -> LayerCost:
    """Final norm and LM head (BERT: MLM transform and decoder) over every token, then
    the cross-entropy loss over the ``b s vocab`` logits."""
    t, h, v = b * s, model.hidden, model.vocab
    loss = (pointwise("cross_entropy", "loss", t * v, LOSS_FLOPS, 2, e),
            pointwise("cross_entropy.bwd", "loss", t * v, LOSS_BWD_FLOPS, 2, e))
    if model.family == "bert":
        gelu = pointwise("gelu", "elementwise", t * h, ACT_FLOPS["gelu"], 2, e)
        gelu_b = pointwise("gelu.bwd", "elementwise", t * h, ACT_FLOPS["gelu"], 3, e)
        norm = _norm(model, "mlm_norm", t, e)
        fwd = [matmul("mlm_transform", t, h, h, e), gelu, norm[0],
               matmul("lm_head", t, h, v, e), loss[0]]
        bwd = [loss[1], *matmul_bwd("lm_head", t, h, v, e), norm[1], gelu_b,
               *matmul_bwd("mlm_transform", t, h, h, e)]
        saved = 4
    else:
        norm = _norm(model, "final_norm", t, e)
        fwd = [norm[0], matmul("lm_head", t, h, v, e), loss[0]]
        bwd = [loss[1], *matmul_bwd("lm_head", t, h, v, e), norm[1]]
        saved = 2
    act = e * (saved * t * h + t * v)     # inputs of norm/matmuls (+gelu), log-probs
    return LayerCost("head", "head", head_params(model), tuple(fwd), tuple(bwd), act,
                     LOSS_BYTES)
