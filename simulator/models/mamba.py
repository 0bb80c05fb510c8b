"""Costs of the layers of a hybrid Mamba-Transformer (Nemotron-H, Nemotron 3): a Mamba-2
layer, and the attention-only and MLP-only layers of a ``layer_pattern``.

A hybrid model (``ModelSpec.layer_pattern``) is a stack of pre-norm residual layers with one
mixer each, Megatron-Core's ``MambaStack`` (megatron/core/ssm/mamba_block.py): ``M`` a
Mamba-2 layer (:func:`mamba_layer_cost`), ``*`` the attention half of a transformer block
(:func:`layer_half` of :func:`~simulator.models.transformer.block_cost`), ``-`` its MLP
half, ``E`` the MoE half of :func:`~simulator.models.moe.moe_block_cost`.

A Mamba-2 layer as Megatron-Core's ``MambaMixer`` (megatron/core/ssm/mamba_mixer.py) runs
it, ``H`` heads of ``P`` channels (``d = H P``), ``G`` groups of state size ``N``, conv
kernel ``K``, chunk ``Q``, on the ``t`` tokens of the rank:

* ``mamba_norm``: the pre-norm (fused into ``in_proj``'s TE LayerNormColumnParallelLinear;
  timed as its own norm kernel);
* ``mamba_in_proj``: ``(t, h) x (h, 2 d + 2 G N + H)``: z, x, B, C and dt;
* ``mamba_conv1d``: the causal depthwise conv1d (``causal_conv1d``) over the ``d + 2 G N``
  channels of x, B, C with SiLU, ``2 K`` FLOPs per element; memory-bound (reads and writes
  the channels once);
* ``mamba_ssd``: the SSD chunked scan (mamba_ssm's ``mamba_chunk_scan_combined``), FLOPs of
  :func:`ssd_flops`, timed as an attention-class kernel of ``Q``-long chunks
  (:mod:`simulator.compute`'s flash curve at ``(Q + 1) / 2`` keys per query, head dim ``P``:
  the SSD's diagonal blocks are masked attention within a chunk, Dao & Gu 2024, arXiv
  2405.21060, section 6);
* ``mamba_gated_norm``: ``RMSNorm(y * silu(z))`` (the ``norm_before_gate=False`` gated norm),
  reads y and z, writes its output;
* ``mamba_out_proj``: ``(t, d) x (d, h)``; then the residual add.

Backward: each GEMM's input and weight gradients; the SSD's backward twice its forward FLOPs
and bytes; the conv1d recomputed (``use_mem_eff_path``, Megatron's default, saves the
``in_proj`` output and recomputes the conv) and its backward; the norms' backward.

Saved for backward: the residual stream at the norm input (``k t h``), the ``in_proj`` output
(``e t (2 d + 2 G N + H)``), the SSD output y and the ``out_proj`` input (``e t d`` each).

Not modelled: tensor and context parallelism of a hybrid model (refused); the SSD's chunk-
state tensors in fp32 (``t / Q x H P N``, under 1 % of the layer's bytes at Nemotron 3's
sizes); the Mamba layers' own CUDA-graph or kernel-fusion variants.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.models.ops import NORM_FLOPS, LayerCost, OpCost, matmul, matmul_bwd
from simulator.models.spec import PATTERN_SYMBOLS, ModelSpec
from simulator.models.transformer import _norm, _residual, norm_params

SILU_FLOPS = 4          # x * sigmoid(x): exp, add, divide, multiply per element
# The MLP half of a transformer block, by kernel name prefix (forward and backward); the
# rest of the block (norm1, QKV, rotary, attention core, attn_out, residual1) is its
# attention half.
_MLP_HALF = ("norm2", "cast.norm2", "mlp_", "moe_", "residual2")


def d_inner(model: ModelSpec) -> int:
    """Width of the Mamba-2 mixer, ``heads x head_dim``."""
    return model.mamba.heads * model.mamba.head_dim


def in_proj_width(model: ModelSpec) -> int:
    """Output width of ``in_proj``: z and x (``d`` each), B and C (``G N`` each), dt
    (``H``): ``2 d + 2 G N + H``."""
    return 2 * d_inner(model) + 2 * model.mamba.groups * model.mamba.state + model.mamba.heads


def conv_channels(model: ModelSpec) -> int:
    """Channels of the causal conv1d: x, B and C, ``d + 2 G N``."""
    return d_inner(model) + 2 * model.mamba.groups * model.mamba.state


def mamba_params(model: ModelSpec) -> int:
    """Parameters of one Mamba-2 layer: pre-norm, ``in_proj`` ``h (2 d + 2 G N + H)``,
    conv1d weights and biases ``(d + 2 G N)(K + 1)``, ``A_log``, ``D`` and ``dt_bias``
    (``H`` each), the gated norm's scale ``d`` and ``out_proj`` ``d h`` (no linear biases)."""
    h, d, c = model.hidden, d_inner(model), conv_channels(model)
    return (norm_params(model) + h * in_proj_width(model) + c * (model.mamba.conv_kernel + 1)
            + 3 * model.mamba.heads + d + d * h)


def ssd_flops(model: ModelSpec, tokens: int) -> float:
    """Forward FLOPs of the SSD chunked scan over ``tokens`` tokens, the four steps of Dao &
    Gu 2024 (arXiv 2405.21060, section 6, "Hardware-Efficient Algorithm"), per token:

    1. diagonal blocks: ``C B^T`` within a chunk, ``2 Q N`` per group, and its product with
       x, ``2 Q P`` per head (the chunk's full ``Q x Q`` tiles, as the kernel computes them);
    2. chunk states ``B^T x``: ``2 N P`` per head;
    3. state passing across chunks: ``2 N P / Q`` per head;
    4. state to output ``C h``: ``2 N P`` per head.

    The decay (segment-sum exponentials) and the ``D`` skip term are left out (elementwise,
    under 2 % of the GEMM FLOPs at Nemotron 3's sizes)."""
    q, n, p = model.mamba.chunk, model.mamba.state, model.mamba.head_dim
    heads, groups = model.mamba.heads, model.mamba.groups
    per_token = (2 * q * n * groups + 2 * q * p * heads + 2 * n * p * heads
                 + 2 * n * p * heads / q + 2 * n * p * heads)
    return float(per_token * tokens)


def mamba_layer_cost(model: ModelSpec, b: int, s: int, e: int, k: int | None = None
                     ) -> LayerCost:
    """One Mamba-2 layer on ``b`` sequences of ``s`` tokens at ``e`` bytes per element (``k``
    the residual stream's; see the module doc)."""
    k = e if k is None else k
    t, h, d = b * s, model.hidden, d_inner(model)
    w, c, heads = in_proj_width(model), conv_channels(model), model.mamba.heads
    norm_f, norm_b = _norm(model, "mamba_norm", t, k)
    res_f, res_b = _residual("mamba_residual", t, h, e, k)
    conv_params = c * (model.mamba.conv_kernel + 1)
    conv_flops = (2 * model.mamba.conv_kernel + SILU_FLOPS) * t * c
    conv_bytes = float(e * 2 * t * c + e * conv_params)
    conv = OpCost("mamba_conv1d", "elementwise", float(conv_flops), conv_bytes,
                  weight="mamba_conv1d", params=conv_params)
    ssd_f = ssd_flops(model, t)
    # reads x, B, C, dt; writes y (and the fp32 chunk states, left out)
    ssd_bytes = float(e * t * (2 * d + 2 * model.mamba.groups * model.mamba.state + heads))
    dims = {"m": b * heads * s, "n": (model.mamba.chunk + 1) // 2, "k": model.mamba.head_dim}
    ssd = OpCost("mamba_ssd", "attention", ssd_f, ssd_bytes, weight="mamba_ssd",
                 params=3 * heads, saved_bytes=e * t * d, **dims)
    gated = NORM_FLOPS["rmsnorm"] + SILU_FLOPS + 1
    gnorm = OpCost("mamba_gated_norm", "norm", float(gated * t * d), float(3 * e * t * d + e * d),
                   weight="mamba_gated_norm", params=d, saved_bytes=e * t * d)
    in_proj = replace(matmul("mamba_in_proj", t, h, w, e, params=h * w), saved_bytes=e * t * w)
    out_proj = matmul("mamba_out_proj", t, d, h, e, params=d * h)
    fwd = (replace(norm_f, saved_bytes=k * t * h), in_proj, conv, ssd, gnorm, out_proj,
           *res_f)
    bwd = (*res_b, *matmul_bwd("mamba_out_proj", t, d, h, e, weight=True),
           OpCost("mamba_gated_norm.bwd", "norm", 2.0 * gated * t * d,
                  float(5 * e * t * d + 2 * e * d), weight="mamba_gated_norm"),
           OpCost("mamba_ssd.bwd", "attention", 2.0 * ssd_f, 2.0 * ssd_bytes,
                  weight="mamba_ssd", **dims),
           replace(conv, name="mamba_conv1d.recompute", params=0),
           OpCost("mamba_conv1d.bwd", "elementwise", 2.0 * conv_flops,
                  float(e * 3 * t * c + 2 * e * conv_params), weight="mamba_conv1d"),
           *matmul_bwd("mamba_in_proj", t, h, w, e, weight=True), norm_b)
    return LayerCost("block", "transformer_block", sum(op.params for op in fwd), fwd, bwd,
                     sum(op.saved_bytes for op in fwd), k * t * h)


def in_mlp_half(name: str, mlp: str) -> bool:
    """Whether kernel ``name`` of a transformer block belongs to its MLP (or MoE) half:
    the second norm, the MLP or MoE kernels (``mlp`` the activation's name), the second
    residual add, and their backward."""
    return name.startswith(_MLP_HALF) or name.split(".")[0] == mlp


def layer_half(layer: LayerCost, model: ModelSpec, mlp: bool, extra_saved: int = 0
               ) -> LayerCost:
    """The attention half (``mlp`` False) or the MLP half of a transformer block ``layer``,
    a hybrid model's ``*`` or ``-``/``E`` layer: its kernels, the parameters they hold and the
    bytes they save (``extra_saved``: saved bytes no kernel carries, the MoE's)."""
    def keep(op: OpCost) -> bool:
        return in_mlp_half(op.name, model.mlp) == mlp

    fwd = tuple(op for op in layer.forward if keep(op))
    bwd = tuple(op for op in layer.backward if keep(op))
    return replace(layer, params=sum(op.params for op in fwd), forward=fwd, backward=bwd,
                   activation_bytes=sum(op.saved_bytes for op in fwd) + extra_saved)


def pattern_counts(model: ModelSpec) -> dict[str, int]:
    """Layers of each kind of the pattern, by name (Mamba-2, attention, MLP, MoE)."""
    return {name: model.layer_pattern.count(sym) for sym, name in PATTERN_SYMBOLS.items()}


def megatron_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per token of a hybrid model as Megatron-LM counts them (the
    ``hybrid_flops`` of ``num_floating_point_operations``, megatron/training/training.py,
    which Megatron-Bridge's "Model TFLOP/sec/GPU" uses): 3x the forward of each layer kind,
    attention ``4 s h p (h + h g / a + s / 2)`` (``p = head_dim a / h``), Mamba
    ``2 s h (2 d' + 2 G N + H) + 7 s d' N + 2 s d' h`` with ``d' = 2 h`` (its expand-2
    assumption, not ``H P``), MoE ``4 s h f k + 4 s h f_shared`` (non-gated), a dense MLP
    ``4 s h f``, and the logits ``2 s h V``; divided by ``s``."""
    s, h = seq_len, model.hidden
    a, g = model.heads, model.kv_heads
    p = model.head_dim * a / h
    attention = 4 * s * h * p * (h + h * g / a + s / 2)
    gated = 1.5 if model.mlp == "swiglu" else 1.0
    mlp = 4 * s * h * model.ffn_hidden * gated
    moe = 4 * s * h * model.moe_ffn_hidden * gated * (model.top_k + model.shared_experts)
    mamba = 0.0
    if model.mamba is not None:
        m, d = model.mamba, 2 * h
        mamba = (2 * s * h * (2 * d + 2 * m.groups * m.state + m.heads)
                 + 7 * s * d * m.state + 2 * s * d * h)
    counts = pattern_counts(model)
    forward = (counts["attention"] * attention + counts["MLP"] * mlp + counts["MoE"] * moe
               + counts["Mamba-2"] * mamba + 2 * s * h * model.vocab)
    return 3 * forward / s
