"""DeepSeek's multi-head latent attention (MLA): parameters, kernels and saved tensors of
the attention half of a block, as Megatron-Core's ``MLASelfAttention`` computes it
(NVIDIA/Megatron-LM@003b4ce2615f4e501ecbc39e01e0f76d237a35d9:
megatron/core/transformer/multi_latent_attention.py; DeepSeek-AI 2024, arXiv 2405.04434,
section 2.1, and arXiv 2412.19437, section 2.1.1).

For ``t`` tokens, hidden ``h``, ``a`` heads, latent ranks ``Lq`` (``q_lora_rank``) and
``Lkv`` (``kv_lora_rank``), head widths ``dn`` (``qk_nope_head_dim``), ``dr``
(``qk_rope_head_dim``) and ``dv`` (``v_head_dim``):

* ``q_down_proj``: ``(t, h) x (h, Lq)``; ``kv_down_proj``: ``(t, h) x (h, Lkv + dr)`` (the
  KV latent and the one shared rotary key of ``dr``);
* ``q_norm`` over the ``Lq`` latent and ``kv_norm`` over the ``Lkv`` latent (the model's
  norm kind, a scale each);
* ``q_up_proj``: ``(t, Lq) x (Lq, a (dn + dr))``; ``kv_up_proj``:
  ``(t, Lkv) x (Lkv, a (dn + dv))``;
* ``rotary``: the fused MLA rotary kernel (Megatron's ``fused_apply_mla_rope_for_q`` /
  ``_for_kv``) rotates the ``dr`` part of every query head and the shared rotary key and
  writes Q (``a (dn + dr)``), K (``a (dn + dr)``, the rotary key broadcast to the heads)
  and V (``a dv``): reads the up projections' outputs, the rotary key and the
  ``s x dr`` cos/sin tables; 3 FLOPs per rotated element;
* the attention core, Q/K ``dn + dr`` = 192 wide and V ``dv`` = 128 wide for DeepSeek-V3:
  ``2 (dn + dr) + 2 dv`` FLOPs per query-key pair forward (``QK^T`` and ``AV``). It is
  :func:`simulator.models.transformer._attention` itself on the model's ``head_size`` of
  ``(dn + dr + dv) / 2`` (:mod:`simulator.models.spec` sets it): the same FLOPs per pair
  (``4 x 160 = 2 x 192 + 2 x 128``), the same Q + K + V + O bytes, and the flash curve
  read at that head width: one attention kernel, one price, whichever widths give it;
* ``attn_out``: ``(t, a dv) x (a dv, h)``.

Tensor parallelism as Megatron-Core's Transformer Engine spec splits it: the down
projections are ``TELinear(parallel_mode="duplicated")``, whole on every rank and run on
the rank's tokens (``1 / tp`` of them with sequence parallelism), with the latent norms;
the up projections are column-parallel (``a / tp`` heads) and ``attn_out`` row-parallel.
The TP collectives are the block's usual ones (before the first projection, after
``attn_out``) at ``b s h``: Megatron gathers the ``Lq + Lkv + dr`` latents instead, so
TP traffic is overstated (not modelled: the duplicated weights' gradient all-reduce).

Saved for backward beside a block's usual tensors: the two latents before and after their
norms (``2 e t' (Lq + Lkv)``, ``t'`` the rank's tokens), and Q, K, V and the attention
output (``e t a (2 (dn + dr) + 2 dv) / tp``, what the multi-head formula counts on
``head_size``). The up projections' outputs are not kept (the rotary kernel's backward
needs none). Only fused (flash) attention, no autocast and Megatron's fused elementwise
kernels are modelled with MLA; the rest is refused (:func:`check_mla`).
"""

from __future__ import annotations

from simulator.errors import ConfigError
from simulator.models.ops import NORM_FLOPS, OpCost, matmul, matmul_bwd
from simulator.models.spec import ModelSpec


def mla_attention_params(model: ModelSpec, tp: int = 1) -> int:
    """Parameters of MLA on one of ``tp`` ranks: the duplicated down projections and
    latent norms whole, the up projections and output projection ``1 / tp``."""
    h, a = model.hidden, model.heads
    lq, lkv, dn, dr, dv = (model.q_lora_rank, model.kv_lora_rank, model.qk_nope_dim,
                           model.qk_rope_dim, model.v_dim)
    whole = h * lq + h * (lkv + dr) + lq + lkv
    split = lq * a * (dn + dr) + lkv * a * (dn + dv) + a * dv * h
    return whole + split // tp


def latent_saved_bytes(model: ModelSpec, tokens: int, e: int) -> int:
    """The latents MLA saves on ``tokens`` (the rank's; ``1 / tp`` under SP): each before
    and after its norm, ``2 e tokens (Lq + Lkv)``."""
    return 2 * e * tokens * (model.q_lora_rank + model.kv_lora_rank)


def _latent_norm(model: ModelSpec, name: str, tokens: int, width: int,
                 e: int) -> tuple[OpCost, OpCost]:
    """The norm of a latent (read x, write y; backward read x, dy, write dx and the scale's
    gradient), as the block's norms are priced."""
    n, per, w = tokens * width, NORM_FLOPS[model.norm], e * width
    return (OpCost(name, "norm", per * n, 2.0 * e * n + w, weight=name, params=width),
            OpCost(f"{name}.bwd", "norm", 2 * per * n, 3.0 * e * n + 2 * w, weight=name))


def _rotary(model: ModelSpec, t: int, s: int, a: int, e: int) -> tuple[OpCost, OpCost]:
    """The fused MLA rotary kernel and its backward (the same traffic), on ``a`` heads."""
    dn, dr, dv = model.qk_nope_dim, model.qk_rope_dim, model.v_dim
    reads = t * a * (dn + dr) + t * a * (dn + dv) + t * dr + 2 * s * dr
    writes = t * a * (dn + dr) * 2 + t * a * dv
    flops = 3.0 * (t * a * dr + t * dr)
    return (OpCost("rotary", "elementwise", flops, float(e * (reads + writes))),
            OpCost("rotary.bwd", "elementwise", flops, float(e * (reads + writes))))


def mla_projection_ops(model: ModelSpec, b: int, s: int, e: int, tp: int = 1,
                       sp: bool = False) -> tuple[list[OpCost], list[OpCost]]:
    """The kernels before the attention core (forward, in order) and their backward (in
    backward order): projections, latent norms, rotary, on ``b`` sequences of ``s`` tokens
    of the rank (the down projections and norms on ``1 / tp`` of them under ``sp``)."""
    h, a = model.hidden, model.heads // tp
    lq, lkv, dn, dr, dv = (model.q_lora_rank, model.kv_lora_rank, model.qk_nope_dim,
                           model.qk_rope_dim, model.v_dim)
    t = b * s
    tn = t // tp if sp else t
    qn, kvn = _latent_norm(model, "q_norm", tn, lq, e), _latent_norm(model, "kv_norm", tn, lkv, e)
    rope = _rotary(model, t, s, a, e)
    shapes = (("q_down_proj", tn, h, lq), ("kv_down_proj", tn, h, lkv + dr),
              ("q_up_proj", t, lq, a * (dn + dr)), ("kv_up_proj", t, lkv, a * (dn + dv)))
    mm = {name: matmul(name, m, k, n, e, params=k * n) for name, m, k, n in shapes}
    grads = {name: matmul_bwd(name, m, k, n, e, weight=True) for name, m, k, n in shapes}
    fwd = [mm["q_down_proj"], mm["kv_down_proj"], qn[0], kvn[0], mm["q_up_proj"],
           mm["kv_up_proj"], rope[0]]
    bwd = [rope[1], *grads["kv_up_proj"], *grads["q_up_proj"], kvn[1], qn[1],
           *grads["kv_down_proj"], *grads["q_down_proj"]]
    return fwd, bwd


def mla_saved(model: ModelSpec, t: int, tn: int, e: int, tp: int = 1) -> dict[str, int]:
    """Forward op -> the bytes of its output(s) kept for backward (:func:`latent_saved_bytes`
    and Q, K, V, O; see the module doc)."""
    a = model.heads // tp
    dn, dr, dv = model.qk_nope_dim, model.qk_rope_dim, model.v_dim
    return {"q_down_proj": e * tn * model.q_lora_rank,
            "kv_down_proj": e * tn * model.kv_lora_rank,
            "q_norm": e * tn * model.q_lora_rank, "kv_norm": e * tn * model.kv_lora_rank,
            "rotary": e * t * a * (2 * (dn + dr) + dv), "attn_core": e * t * a * dv}


def check_mla(model: ModelSpec, flash_attention: bool, autocast: bool, compile: bool,
              elementwise: str) -> None:
    """Refuse, in one line, what the simulator does not model with MLA or MTP."""
    if model.is_mla and not flash_attention:
        raise ConfigError(f"{model.name}'s multi-head latent attention is modelled with the "
                          f"fused (flash) attention kernel only: set flash_attention: true",
                          field="training.flash_attention")
    if (model.is_mla or model.mtp_layers) and (autocast or compile or elementwise != "fused"):
        raise ConfigError(f"{model.name}'s multi-head latent attention and multi-token "
                          f"prediction are modelled as Megatron-Core runs them (16-bit, fused "
                          f"kernels): not with autocast, torch.compile or eager elementwise "
                          f"kernels", field="training.precision" if autocast else
                          "training.compile" if compile else "training.elementwise")
