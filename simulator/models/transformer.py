"""Costs of transformer layers (GPT, Llama, BERT): embedding, one block, head.

See :mod:`simulator.models.costs` for the counting conventions. Blocks are written in
pre-norm order (GPT-2/3, Llama); BERT's post-norm order has the same costs. A model with
``dropout > 0`` (BERT, GPT-2, minGPT) runs dropout kernels where those models have them:
after the embedding, on the attention probabilities (inside the kernel with flash
attention), after the attention output projection and after the MLP, each reading its
input and writing its output and a 1-byte mask (backward: gradient and mask in, gradient
out), and saves the masks for backward. Rotary models (Llama) rotate Q and K after the
QKV projection (:func:`_rotary`); the rotated Q, K replace the projection's (no extra
saved bytes).

Mixed precision with fp32 weights (``autocast``: torch.autocast, Keras ``mixed_float16``)
is not pure 16-bit: ``k`` below is the element size of the tensors such a run keeps in
fp32 (``k = e`` otherwise). PyTorch's autocast runs ``layer_norm``, ``softmax`` and
``log_softmax``/``cross_entropy`` in fp32 (their inputs cast up, fp32 outputs), and an add
of a 16-bit and an fp32 tensor promotes to fp32, so the residual stream between blocks
stays fp32 (AMP op reference, pytorch.org/docs/stable/amp.html, "CUDA Ops that can
autocast to float32" and "Ops that promote to the widest input type"); TensorFlow's
official BERT builds its LayerNorms with ``dtype=float32`` under the mixed policy, with
the same effect. Each matmul then reads a 16-bit copy: a cast kernel per fp32 input
(``cast.*``) and per weight, once per micro-batch (``weight_cast``), and the reverse
casts of their gradients in backward.

Tensor, sequence and context parallelism (``tp``, ``sp``, ``cp``; defaults 1, False, 1 give
the unsharded costs): Megatron-LM's column/row-parallel split (Shoeybi et al. 2019, arXiv
1909.08053) gives each rank ``heads / tp`` query heads, ``kv_heads / tp`` KV heads and
``ffn_hidden / tp`` of the MLP, and ``vocab / tp`` rows of the embedding and the LM head
(vocab-parallel, the cross entropy on the local logits); norms, residual adds and the
dropouts outside the split run on every token of the rank, or on ``1 / tp`` of them with
sequence parallelism (Korthikanti et al. 2022, arXiv 2205.05198). With ``cp`` a rank holds
``s / cp`` tokens of each sequence whose queries attend to all ``s`` keys. The
communication between the shards is the trace generator's (:mod:`simulator.strategies.parallel`).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.models.ops import (
    ACT_FLOPS, ID_BYTES, LOSS_BWD_FLOPS, LOSS_BYTES, LOSS_FLOPS, NORM_FLOPS, SOFTMAX_BWD_FLOPS,
    SOFTMAX_FLOPS, LayerCost, OpCost, matmul, matmul_bwd, pointwise)
from simulator.models.mla import (latent_saved_bytes, mla_attention_params,
                                  mla_projection_ops, mla_saved)
from simulator.models.spec import ModelSpec


def norm_params(model: ModelSpec) -> int:
    """Parameters of one norm: scale (+ shift for a biased LayerNorm)."""
    return model.hidden * (2 if model.norm == "layernorm" and model.bias else 1)


def block_params(model: ModelSpec, tp: int = 1) -> int:
    """Parameters of one transformer block (attention, MLP, two norms) on one of ``tp``
    tensor-parallel ranks (the split matrices and their column biases divided; the row
    biases and the norms whole)."""
    h, f, kvd = model.hidden, model.ffn_hidden, model.kv_heads * model.head_dim
    q = model.q_width              # queries and attention output (h unless head_dim says)
    mats = 3 if model.mlp == "swiglu" else 2
    if model.is_mla:                # bias-free (spec refuses biases with MLA)
        return mla_attention_params(model, tp) + mats * h * f // tp + 2 * norm_params(model)
    if tp > 1:
        split = h * (q + 2 * kvd) + q * h + mats * h * f
        col_bias = (q + 2 * kvd) + (mats - 1) * f if model.bias else 0
        row_bias = 2 * h if model.bias else 0
        return (split + col_bias) // tp + row_bias + 2 * norm_params(model)
    biases = (q + h + 2 * kvd) + ((mats - 1) * f + h) if model.bias else 0
    return h * (q + 2 * kvd) + q * h + mats * h * f + biases + 2 * norm_params(model)


def block_activation_bytes(model: ModelSpec, batch: int, seq_len: int, e: int,
                           flash_attention: bool, k: int | None = None, tp: int = 1,
                           sp: bool = False, cp: int = 1) -> int:
    """Bytes one block saves for backward: Korthikanti et al. 2022 (arXiv 2205.05198).

    For 16-bit precision and dropout ``s b h (34 + 5 a s / h)`` for a GPT block: attention
    ``11 s b h + 5 a s^2 b``, MLP ``19 s b h``, norms ``4 s b h``. Of these, the 1-byte
    dropout masks (``s b h`` after attention and after the MLP, ``a s^2 b`` on the
    probabilities) and the dropped-out probabilities (``2 a s^2 b``) exist only when the
    model has dropout. Generalised: K/V saved at ``kv_heads`` width, MLP ``2 s b h + 4 s b f``
    (GELU) or ``2 s b h + 6 s b f`` (SwiGLU keeps gate and up). Flash attention drops the
    ``a s^2 b`` score terms. Tensors scale with ``e / 2`` for other element sizes, masks
    stay 1 byte. Under autocast (``k`` = 4 > ``e``) the norm inputs are fp32, the softmax
    output is fp32 and the ``AV`` matmul keeps its 16-bit copy.

    With ``tp`` the tensors inside the split (Q, K, V, the attention output, the MLP inner
    tensors, the scores) divide by ``tp``; the block input, the norm inputs and outputs and
    the dropout masks outside it divide too only with sequence parallelism (``sp``): Korthikanti
    et al.'s ``s b h (10 + 24 / t + 5 a s / (h t))`` and ``s b h (34 / t + 5 a s / (h t))``.
    With ``cp`` a rank holds ``s / cp`` tokens (scores ``s / cp`` by ``s``).
    """
    k = e if k is None else k
    s_kv, seq_len = seq_len, seq_len // cp
    sb, h, f = seq_len * batch, model.hidden, model.ffn_hidden
    kvd, q = model.kv_heads * model.head_dim, model.q_width
    drop = model.dropout > 0
    if tp > 1 or sp:
        outside = tp if sp else 1
        inner = (4 * sb * q + 4 * sb * kvd + (6 if model.mlp == "swiglu" else 4) * sb * f)
        total = (inner // tp + 4 * sb * h // outside) * e // 2 + \
            (2 * sb * h * k + (2 * sb * h if drop else 0)) // outside
    else:
        attn = 2 * sb * h + 4 * sb * q + 4 * sb * kvd
        mlp = 2 * sb * h + (6 if model.mlp == "swiglu" else 4) * sb * f
        total = (attn + mlp) * e // 2 + 2 * sb * h * k + (2 * sb * h if drop else 0)
    if not flash_attention:
        # softmax output; with dropout its mask; the 16-bit probabilities AV reads, when
        # they are another tensor (dropped out, or autocast's copy of fp32 probabilities)
        per = k + (1 if drop else 0) + (e if drop or k != e else 0)
        total += model.heads // tp * s_kv * sb * per
    if model.is_mla:    # its latents (Q, K, V, O are the head_size terms above)
        total += latent_saved_bytes(model, sb // (tp if sp else 1), e)
    return total


def _twin(name: str, flops: float, nbytes: float) -> tuple[list[OpCost], list[OpCost]]:
    """An elementwise kernel and its backward, moving the same bytes."""
    return ([OpCost(name, "elementwise", float(flops), float(nbytes))],
            [OpCost(f"{name}.bwd", "elementwise", float(flops), float(nbytes))])


def _dropout(name: str, elements: float, e: int) -> tuple[list[OpCost], list[OpCost]]:
    """A dropout kernel (read x, write y and a 1-byte mask) and its backward (read dy and
    the mask, write dx)."""
    return _twin(name, elements, (2 * e + 1) * elements)


def _attention(model: ModelSpec, b: int, s: int, e: int, flash: bool, k: int, tp: int = 1,
               s_kv: int | None = None):
    """Forward and backward ops of the attention core (after the QKV projection), on
    ``heads / tp`` heads, ``s`` queries against ``s_kv`` keys (default ``s``).

    Under autocast the softmax runs in fp32: its input is cast up and its output cast
    back down for the ``AV`` matmul (and the reverse in backward)."""
    s_kv = s if s_kv is None else s_kv
    t, h, a = b * s, model.q_width // tp, model.heads // tp     # h: the rank's query width
    kvd = model.kv_heads // tp * model.head_dim
    mm = 2.0 * b * s * s_kv * h           # one of QK^T, AV
    scores = float(b * a * s * s_kv)      # elements of the score matrix
    sm, sm_bwd = SOFTMAX_FLOPS * scores, SOFTMAX_BWD_FLOPS * scores
    tkv = b * s_kv
    qkvo = e * (2 * t * h + 2 * tkv * kvd)  # Q, K, V and O (or their gradients)
    if flash:
        lse = 4.0 * b * a * s
        # FlashAttention skips the masked tiles of a causal mask: (s + 1) / 2 keys per query
        c = (s_kv + 1) / (2 * s_kv) if model.causal else 1.0
        dims = {"m": b * a * s, "n": int(round(c * s_kv)), "k": model.head_dim}
        fwd = [OpCost("attn_core", "attention", c * (2 * mm + sm), qkvo + lse, **dims)]
        # reads Q, K, V, O, dO, lse; writes dQ, dK, dV: twice the forward tensors
        bwd = [OpCost("attn_core.bwd", "attention", c * (5 * mm + sm + sm_bwd), 2 * qkvo + lse,
                      **dims)]
        return fwd, bwd
    # per score element: read + write (backward: + the saved probs); under autocast plus
    # the cast up before and the cast down after (e + k each)
    sm_bytes = (2.0 * e, 3.0 * e) if k == e else (2.0 * e + 4.0 * k, 2.0 * e + 5.0 * k)
    drop = _dropout("attn_dropout", scores, k) if model.dropout > 0 else ([], [])
    fwd = [OpCost("attn_scores", "matmul", mm, e * (t * h + tkv * kvd + scores)),
           OpCost("softmax", "elementwise", sm, sm_bytes[0] * scores), *drop[0],
           OpCost("attn_av", "matmul", mm, e * (scores + tkv * kvd + t * h))]
    bwd = [OpCost("attn_av.grad_probs", "matmul", mm, e * (t * h + tkv * kvd + scores)),
           OpCost("attn_av.grad_v", "matmul", mm, e * (scores + t * h + tkv * kvd)), *drop[1],
           OpCost("softmax.bwd", "elementwise", sm_bwd, sm_bytes[1] * scores),
           OpCost("attn_scores.grad_q", "matmul", mm, e * (scores + tkv * kvd + t * h)),
           OpCost("attn_scores.grad_k", "matmul", mm, e * (scores + t * h + tkv * kvd))]
    return fwd, bwd


def _mlp(model: ModelSpec, t: int, e: int, tp: int = 1):
    """Forward and backward ops of the MLP (``ffn_hidden / tp`` of it)."""
    h, f = model.hidden, model.ffn_hidden // tp
    up, width = ("mlp_gate_up", 2 * f) if model.mlp == "swiglu" else ("mlp_up", f)
    act_in = 3 if model.mlp == "swiglu" else 2     # tensors touched forward
    bias = model.bias
    fwd = [matmul(up, t, h, width, e, params=h * width + (width if bias else 0)),
           pointwise(model.mlp, "elementwise", t * f, ACT_FLOPS[model.mlp], act_in, e),
           matmul("mlp_down", t, f, h, e, params=f * h + (h if bias else 0))]
    bwd = [*matmul_bwd("mlp_down", t, f, h, e, weight=True),
           pointwise(f"{model.mlp}.bwd", "elementwise", t * f, ACT_FLOPS[model.mlp],
                     2 * act_in - 1, e),
           *matmul_bwd(up, t, h, width, e, weight=True)]
    return fwd, bwd


def _norm(model: ModelSpec, name: str, t: int, k: int) -> tuple[OpCost, OpCost]:
    """Forward (read x, write y) and backward (read x, dy; write dx and weight grads), at
    ``k`` bytes per element (fp32 under autocast)."""
    p = norm_params(model)
    per, w = NORM_FLOPS[model.norm], k * p
    n = t * model.hidden
    return (OpCost(name, "norm", per * n, 2.0 * k * n + w, weight=name, params=p),
            OpCost(f"{name}.bwd", "norm", 2 * per * n, 3.0 * k * n + 2 * w, weight=name))


def _residual(name: str, t: int, h: int, e: int, k: int) -> tuple[list[OpCost], list[OpCost]]:
    """Branch output (``e``) + residual stream (``k``) -> residual stream (``k``)."""
    return _twin(name, t * h, (e + 2 * k) * t * h)


def _rotary(model: ModelSpec, b: int, s: int, e: int,
            tp: int = 1) -> tuple[list[OpCost], list[OpCost]]:
    """Rotary position embedding (RoPE, Su et al. 2021, arXiv 2104.09864) on Q and K, one
    fused kernel each way (Megatron/Transformer Engine ``fused_apply_rotary_pos_emb``, or
    torch.compile): reads Q, K and the ``s x head_dim`` cos/sin tables, writes the rotated Q,
    K; 3 FLOPs per element (``x cos + rotate(x) sin``). Backward applies the inverse rotation
    to the gradients, the same traffic. None for learned positions. On a tensor-parallel
    rank: its ``heads / tp`` query and ``kv_heads / tp`` key heads."""
    if model.position_embedding != "rope":
        return [], []
    elements = b * s * (model.q_width + model.kv_heads * model.head_dim) // tp
    return _twin("rotary", 3.0 * elements, e * (2.0 * elements + 2 * s * model.head_dim))


def _casts(name: str, elements: float, e: int, k: int) -> tuple[list[OpCost], list[OpCost]]:
    """Autocast's 16-bit copy of an fp32 tensor for a matmul, and its gradient cast back
    (none without autocast). ``weight_cast``: every fp32 weight, once per forward."""
    return ([], []) if k == e else _twin(name, 0.0, (k + e) * elements)


def block_cost(model: ModelSpec, b: int, s: int, e: int, flash: bool,
               k: int | None = None, tp: int = 1, sp: bool = False,
               cp: int = 1) -> LayerCost:
    """One transformer block on ``b`` sequences of ``s`` tokens at ``e`` bytes/element
    (``k``: bytes of the tensors autocast keeps in fp32; ``e`` when not autocasting), on
    one of ``tp`` tensor-parallel ranks (``sp``: sequence parallel) and ``cp`` context-
    parallel ranks (see the module doc)."""
    k = e if k is None else k
    s_kv, s = s, s // cp
    t, h = b * s, model.hidden
    tn = t // tp if sp else t          # tokens of the norms, residuals and outer dropouts
    q = model.q_width                  # queries and attention output (h unless head_dim says)
    qkv_n = (q + 2 * model.kv_heads * model.head_dim) // tp
    n1, n2 = _norm(model, "norm1", tn, k), _norm(model, "norm2", tn, k)
    r1, r2 = _residual("residual1", tn, h, e, k), _residual("residual2", tn, h, e, k)
    c1, c2 = _casts("cast.norm1", tn * h, e, k), _casts("cast.norm2", tn * h, e, k)
    wc = _casts("weight_cast", block_params(model, tp), e, k)
    attn_f, attn_b = _attention(model, b, s, e, flash, k, tp, s_kv)
    rope = _rotary(model, b, s, e, tp) if not model.is_mla else ([], [])
    mlp_f, mlp_b = _mlp(model, t, e, tp)
    d1, d2 = ((_dropout("attn_out.dropout", tn * h, e), _dropout("mlp_down.dropout", tn * h, e))
              if model.dropout > 0 else (([], []), ([], [])))
    bias = model.bias
    o = model.heads * model.v_dim if model.is_mla else q    # the attention output's width
    if model.is_mla:    # projections, latent norms and rotary (simulator/models/mla.py)
        proj_f, proj_b = mla_projection_ops(model, b, s, e, tp, sp)
    else:
        proj_f = [matmul("qkv_proj", t, h, qkv_n, e, params=h * qkv_n + (qkv_n if bias else 0))]
        proj_b = matmul_bwd("qkv_proj", t, h, qkv_n, e, weight=True)
    out = matmul("attn_out", t, o // tp, h, e, params=o * h // tp + (h if bias else 0))
    fwd = [*wc[0], n1[0], *c1[0], *proj_f, *rope[0], *attn_f, out, *d1[0], *r1[0], n2[0],
           *c2[0], *mlp_f, *d2[0], *r2[0]]
    bwd = [*r2[1], *d2[1], *mlp_b, *c2[1], n2[1], *r1[1], *d1[1],
           *matmul_bwd("attn_out", t, o // tp, h, e, weight=True), *attn_b, *rope[1],
           *proj_b, *c1[1], n1[1], *wc[1]]
    return LayerCost("block", "transformer_block", block_params(model, tp),
                     _with_saved(fwd, model, b, s, e, k, tp, sp), tuple(bwd),
                     block_activation_bytes(model, b, s_kv, e, flash, k, tp, sp, cp),
                     k * tn * h)


def _with_saved(fwd: list[OpCost], model: ModelSpec, b: int, s: int, e: int, k: int,
                tp: int = 1, sp: bool = False) -> tuple[OpCost, ...]:
    """The forward ops with ``saved_bytes``: which op produces each tensor of
    :func:`block_activation_bytes` (their sum), so selective checkpointing knows what it
    frees by recomputing an op. Norm outputs (``e``, the copy the next matmul reads), Q/K/V
    (``qkv_proj``), the attention output (``attn_core``, or ``attn_av`` without flash), the
    MLP's inner tensors, the residual stream at the two norm inputs (``k``), 1-byte dropout
    masks and, without flash attention, the probabilities (``softmax``, ``attn_dropout``).
    On a tensor-parallel rank the tensors inside the split divide by ``tp``; those outside
    it (norms, residuals, outer dropout masks) only under sequence parallelism (``sp``)."""
    t, h, f = b * s, model.hidden, model.ffn_hidden
    tn = t // tp if sp else t
    kvd, scores = model.kv_heads * model.head_dim, b * (model.heads // tp) * s * s
    q = model.q_width
    copy = e if model.dropout == 0 and k != e else 0   # autocast's 16-bit probabilities
    saved = {"norm1": e * tn * h, "norm2": e * tn * h, "qkv_proj": e * t * (q + 2 * kvd) // tp,
             "attn_core": e * t * q // tp, "attn_av": e * t * q // tp,
             "softmax": (k + copy) * scores, "attn_dropout": (1 + e) * scores,
             "residual1": k * tn * h, "residual2": k * tn * h,
             "attn_out.dropout": tn * h, "mlp_down.dropout": tn * h,
             "mlp_gate_up": 2 * e * t * f // tp, "mlp_up": e * t * f // tp,
             model.mlp: e * t * f // tp}
    if model.is_mla:
        saved.update(mla_saved(model, t, tn, e, tp))
    return tuple(replace(c, saved_bytes=saved[c.name]) if c.name in saved else c for c in fwd)


def vocab_rows(model: ModelSpec, tp: int = 1) -> int:
    """Rows of the token table (and LM head) on one of ``tp`` vocab-parallel ranks."""
    return -(-model.vocab // tp)


def embed_params(model: ModelSpec, tp: int = 1) -> int:
    """Token (``vocab / tp`` rows on a tensor-parallel rank), position and segment tables
    (+ BERT's embedding LayerNorm)."""
    pos = model.max_seq_len if model.position_embedding == "learned" else 0
    norm = norm_params(model) if model.family == "bert" else 0
    return (vocab_rows(model, tp) + pos + model.type_vocab) * model.hidden + norm


def embed_cost(model: ModelSpec, b: int, s: int, e: int, k: int | None = None, tp: int = 1,
               sp: bool = False, cp: int = 1) -> LayerCost:
    """Embedding lookup (memory-bound gather; position/segment rows added), no matmul.

    Backward zero-fills the dense gradient of every table and scatter-adds into it. Under
    autocast the tables are fp32 and so is everything up to the first matmul (``k``).
    Vocab-parallel (``tp``): each rank looks up its ``vocab / tp`` rows for every token of
    its ``s / cp``; with ``sp`` what follows the lookup runs on ``1 / tp`` of the tokens.
    """
    e = e if k is None else k
    t, h = b * (s // cp), model.hidden
    tn = t // tp if sp else t
    pos = model.max_seq_len if model.position_embedding == "learned" else 0
    tables = 1 + (pos > 0) + (model.type_vocab > 0)
    rows = vocab_rows(model, tp) + pos + model.type_vocab
    fwd = [OpCost("embed_lookup", "embedding", float((tables - 1) * t * h),
                  float(ID_BYTES * t + e * (tables + 1) * t * h))]
    bwd = [OpCost("embed_lookup.bwd", "embedding", float(tables * t * h),
                  float(ID_BYTES * t + e * (rows * h + 3 * tables * t * h)))]
    act = ID_BYTES * t
    if model.family == "bert":
        n = _norm(model, "embed_norm", tn, e)
        fwd.append(n[0])
        bwd.insert(0, n[1])
        act += e * tn * h
    if model.dropout > 0:
        drop = _dropout("embed_dropout", tn * h, e)
        fwd += drop[0]
        bwd[:0] = drop[1]
        act += tn * h                         # the mask
    return LayerCost("embed", "embedding", embed_params(model, tp), tuple(fwd), tuple(bwd),
                     act, e * tn * h)


def head_params(model: ModelSpec, tp: int = 1) -> int:
    """Final norm + untied LM head (GPT/Llama; ``vocab / tp`` rows on a tensor-parallel
    rank) or BERT's masked-LM head (decoder tied)."""
    h, v = model.hidden, vocab_rows(model, tp)
    if model.family == "bert":
        return h * h + h + norm_params(model) + v
    return norm_params(model) + (0 if model.tied_embeddings else v * h)


def head_cost(model: ModelSpec, b: int, s: int, e: int, k: int | None = None, tp: int = 1,
              sp: bool = False, cp: int = 1) -> LayerCost:
    """Final norm and LM head (BERT: MLM transform and decoder) over every token, then
    the cross-entropy loss over the ``b s vocab`` logits (in fp32 under autocast: the
    16-bit logits cast up, ``log_softmax``, and the gradient cast back). Vocab-parallel
    (``tp``): the head and the loss on the rank's ``vocab / tp`` logits; with ``sp`` the
    final norm on ``1 / tp`` of the tokens."""
    k = e if k is None else k
    t, h, v = b * (s // cp), model.hidden, vocab_rows(model, tp)
    tn = t // tp if sp else t
    up = (e + k) * t * v if k != e else 0   # autocast's cast of the logits (and back)
    loss = (OpCost("cross_entropy", "loss", LOSS_FLOPS * t * v, 2.0 * k * t * v + up),
            OpCost("cross_entropy.bwd", "loss", LOSS_BWD_FLOPS * t * v, 2.0 * k * t * v + up))
    cast = _casts("cast.head", tn * h, e, k)
    wc = _casts("weight_cast", head_params(model, tp), e, k)
    if model.family == "bert":
        gelu = pointwise("gelu", "elementwise", t * h, ACT_FLOPS["gelu"], 2, e)
        gelu_b = pointwise("gelu.bwd", "elementwise", t * h, ACT_FLOPS["gelu"], 3, e)
        norm = _norm(model, "mlm_norm", t, k)
        mt = _casts("cast.mlm_in", t * h, e, k)
        fwd = [*wc[0], *mt[0], matmul("mlm_transform", t, h, h, e), gelu, norm[0], *cast[0],
               matmul("lm_head", t, h, v, e), loss[0]]
        bwd = [loss[1], *matmul_bwd("lm_head", t, h, v, e), *cast[1], norm[1], gelu_b,
               *matmul_bwd("mlm_transform", t, h, h, e), *mt[1], *wc[1]]
        saved = 4
    else:
        norm = _norm(model, "final_norm", tn, k)
        fwd = [*wc[0], norm[0], *cast[0], matmul("lm_head", t, h, v, e), loss[0]]
        bwd = [loss[1], *matmul_bwd("lm_head", t, h, v, e), *cast[1], norm[1], *wc[1]]
        saved = 2
    act = e * saved * tn * h + k * t * v  # inputs of norm/matmuls (+gelu), log-probs
    return LayerCost("head", "head", head_params(model, tp), tuple(fwd), tuple(bwd), act,
                     LOSS_BYTES)
