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
* ``mamba_ssd.*``: the SSD chunked scan (mamba_ssm's ``mamba_chunk_scan_combined``), the
  five Triton kernels it launches (:func:`ssd_kernels`), whose FLOPs add up to
  :func:`ssd_flops`, each with the HBM traffic of its inputs, outputs and fp32
  intermediates (the unfused SSD is "mostly bottlenecked by memory bandwidth and latency",
  PyTorch blog "Accelerating Mamba2 with Kernel Fusion", 2025);
* ``mamba_gated_norm``: ``RMSNorm(y * silu(z))`` (the ``norm_before_gate=False`` gated norm),
  reads y and z, writes its output;
* ``mamba_out_proj``: ``(t, d) x (d, h)``; then the residual add.

Backward: each GEMM's input and weight gradients; the SSD's fourteen backward kernels
(:func:`ssd_kernels`: four forward kernels recomputed, then the gradients); the conv1d
recomputed (``use_mem_eff_path``, Megatron's default, saves the ``in_proj`` output and
recomputes the conv) and its backward; the norms' backward.

Saved for backward: the residual stream at the norm input (``k t h``), the ``in_proj`` output
(``e t (2 d + 2 G N + H)``), the SSD output y and the ``out_proj`` input (``e t d`` each).

Not modelled: context parallelism of a hybrid model (refused); the Mamba layers' own
kernel-fusion variants (a CUDA graph of the whole layer, Megatron's ``cuda_graph_scope``
``mamba``, is modelled: :func:`in_graph_scope`); the small torch ops between the SSD's backward
kernels (a reverse cumsum over ``t H / Q`` values).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.errors import ConfigError
from simulator.models.ops import NORM_FLOPS, LayerCost, OpCost, matmul, matmul_bwd
from simulator.models.spec import PATTERN_SYMBOLS, ModelSpec
from simulator.models.transformer import _norm, _residual, block_cost, norm_params

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


# The SSD's kernels as mamba_ssm launches them (state-spaces/mamba@d757aef1
# mamba_ssm/ops/triton/ssd_combined.py, _mamba_chunk_scan_combined_fwd and _bwd; the kernels
# in ssd_chunk_state.py, ssd_state_passing.py, ssd_bmm.py, ssd_chunk_scan.py): per token,
# the FLOPs and the HBM bytes each reads and writes, in terms of the sizes of
# :func:`_ssd_terms` (bf16 tensors at ``e`` bytes; dt, dA_cumsum, CB, the chunk states and
# the dA gradients in fp32 where the code allocates them so). A kernel with tensor-core
# products (``tl.dot``) is a matmul-class kernel, the others elementwise.
_SSD_FORWARD = (   # name, class, FLOPs, bytes (dict keys of _ssd_terms)
    ("chunk_cumsum", "elementwise", "cumsum_flops", "cumsum_bytes"),
    ("chunk_state", "matmul", "state_flops", "chunk_state_bytes"),
    ("state_passing", "elementwise", "passing_flops", "passing_bytes"),
    ("bmm_chunk", "matmul", "cb_flops", "bmm_bytes"),
    ("chunk_scan", "matmul", "scan_flops", "chunk_scan_bytes"),
)
_SSD_BACKWARD = (
    # recomputed: dA_cumsum, CB, the chunk states and their passing (fp32 out)
    ("chunk_cumsum.recompute", "elementwise", "cumsum_flops", "cumsum_bytes"),
    ("bmm_chunk.recompute", "matmul", "cb_flops", "bmm_bytes"),
    ("chunk_state.recompute", "matmul", "state_flops", "chunk_state_bytes"),
    ("state_passing.recompute", "elementwise", "passing_flops", "passing_bwd_recompute_bytes"),
    ("chunk_scan_bwd_dstates", "matmul", "state_flops", "dstates_bytes"),
    ("state_passing_bwd", "elementwise", "passing_flops", "passing_bwd_bytes"),
    ("chunk_scan_chunk_state_bwd_dx", "matmul", "dx_flops", "dx_bytes"),
    ("chunk_state_bwd_db", "matmul", "state_flops", "db_bytes"),
    ("chunk_scan_bwd_dC", "matmul", "state_flops", "dc_bytes"),
    ("chunk_scan_bwd_dcb", "matmul", "intra_flops", "dcb_bytes"),
    ("bmm_chunk_bwd.dB", "matmul", "cb_flops", "bmm_bwd_bytes"),
    ("bmm_chunk_bwd.dC", "matmul", "cb_flops", "bmm_bwd_bytes"),
    ("chunk_scan_bwd_ddAcs_stable", "matmul", "intra_flops", "ddacs_bytes"),
    ("chunk_cumsum_bwd", "elementwise", "cumsum_flops", "cumsum_bwd_bytes"),
)
FP32 = 4
CUMSUM_FLOPS = 6        # per dt element: bias add, softplus (exp, log1p), times A, scan add


def _ssd_terms(model: ModelSpec, e: int) -> dict[str, float]:
    """Per-token FLOPs and bytes of the SSD's kernels (see :data:`_SSD_FORWARD`): ``d = H P``
    x channels, ``bc = G N`` of B (and of C), ``st = H P N / Q`` chunk-state elements, ``cb =
    G Q`` elements of C B^T, ``H`` of dt and dA_cumsum."""
    m = model.mamba
    d, bc, heads = d_inner(model), m.groups * m.state, m.heads
    st = heads * m.head_dim * m.state / m.chunk
    cb = m.groups * m.chunk
    dts = 2 * FP32 * heads           # dt (after softplus) and dA_cumsum, fp32
    return {
        "cumsum_flops": CUMSUM_FLOPS * heads, "state_flops": 2 * st * m.chunk,
        "passing_flops": 2 * st, "cb_flops": 2 * cb * m.state,
        "intra_flops": 2 * m.chunk * d, "scan_flops": 2 * m.chunk * d + 2 * st * m.chunk,
        "dx_flops": 2 * m.chunk * d + 2 * st * m.chunk,
        # dt in, dt and dA_cumsum out (fp32)
        "cumsum_bytes": e * heads + dts,
        # B, x, dt, dA_cumsum in; fp32 chunk states out
        "chunk_state_bytes": e * (bc + d) + dts + FP32 * st,
        # fp32 states in, passed states out at the input's precision
        "passing_bytes": FP32 * st + e * st,
        # C, B in; fp32 C B^T out
        "bmm_bytes": 2 * e * bc + FP32 * cb,
        # C B^T, x, dt, dA_cumsum, C, states in; y out
        "chunk_scan_bytes": FP32 * cb + e * d + dts + e * bc + e * st + e * d,
        "passing_bwd_recompute_bytes": 2 * FP32 * st,
        # C, dA_cumsum, dy in; fp32 state gradients out
        "dstates_bytes": e * bc + FP32 * heads + e * d + FP32 * st,
        # states and their gradients in (fp32), both out at 16 bits
        "passing_bwd_bytes": 2 * FP32 * st + 2 * e * st,
        # x, dt, dA_cumsum, B, C B^T, dy, state gradients in; dx and fp32 ddt out
        "dx_bytes": e * d + dts + e * bc + FP32 * cb + e * d + e * st + e * d + FP32 * heads,
        # x, dt, dA_cumsum, state gradients, B in; dB and fp32 ddA out
        "db_bytes": e * d + dts + e * st + 2 * e * bc + FP32 * heads,
        # states, dA_cumsum, dy, C in; dC and fp32 ddA out
        "dc_bytes": e * st + FP32 * heads + e * d + 2 * e * bc + FP32 * heads,
        # x, dt, dA_cumsum, dy in; fp32 dCB out
        "dcb_bytes": 2 * e * d + dts + FP32 * cb,
        # C (or B), fp32 dCB and the partial gradient in; the gradient out
        "bmm_bwd_bytes": e * bc + FP32 * cb + 2 * e * bc,
        # x, dy, dt, dA_cumsum, C B^T in; fp32 ddA out
        "ddacs_bytes": 2 * e * d + dts + FP32 * cb + FP32 * heads,
        # ddA, ddt, dt in; ddt, dA out (fp32)
        "cumsum_bwd_bytes": 5 * FP32 * heads,
    }


def ssd_kernels(model: ModelSpec, tokens: int, e: int) -> tuple[list[OpCost], list[OpCost]]:
    """The forward and backward kernels of the SSD chunked scan over ``tokens`` tokens (see
    :data:`_SSD_FORWARD`, :data:`_SSD_BACKWARD`), named ``mamba_ssd.<kernel>``."""
    terms = _ssd_terms(model, e)

    def ops(table) -> list[OpCost]:
        return [OpCost(f"mamba_ssd.{name}", op_class, float(terms[flops] * tokens),
                       float(terms[nbytes] * tokens)) for name, op_class, flops, nbytes in table]
    return ops(_SSD_FORWARD), ops(_SSD_BACKWARD)


def rank_view(model: ModelSpec, tp: int) -> ModelSpec:
    """``model`` as one of ``tp`` tensor-parallel ranks holds its Mamba mixers: ``heads /
    tp`` heads and ``groups / tp`` groups (Megatron-Core's MambaMixer splits both; its
    in_proj is column-parallel, its out_proj row-parallel, its conv1d and gated norm per
    rank)."""
    if tp == 1:
        return model
    m = model.mamba
    return replace(model, mamba=replace(m, heads=m.heads // tp, groups=m.groups // tp))


def mamba_layer_cost(model: ModelSpec, b: int, s: int, e: int, k: int | None = None,
                     tp: int = 1, sp: bool = False) -> LayerCost:
    """One Mamba-2 layer on ``b`` sequences of ``s`` tokens at ``e`` bytes per element (``k``
    the residual stream's; see the module doc), on one of ``tp`` tensor-parallel ranks
    (:func:`rank_view`; the norm and the residual add on ``1 / tp`` of the tokens under
    sequence parallelism ``sp``)."""
    k = e if k is None else k
    rank_model, model = rank_view(model, tp), model
    tn = b * s // tp if sp else b * s        # tokens of the norm and the residual add
    model = rank_model
    t, h, d = b * s, model.hidden, d_inner(model)
    w, c, heads = in_proj_width(model), conv_channels(model), model.mamba.heads
    norm_f, norm_b = _norm(model, "mamba_norm", tn, k)
    res_f, res_b = _residual("mamba_residual", tn, h, e, k)
    conv_params = c * (model.mamba.conv_kernel + 1)
    conv_flops = (2 * model.mamba.conv_kernel + SILU_FLOPS) * t * c
    conv_bytes = float(e * 2 * t * c + e * conv_params)
    conv = OpCost("mamba_conv1d", "elementwise", float(conv_flops), conv_bytes,
                  weight="mamba_conv1d", params=conv_params)
    ssd_f, ssd_b = ssd_kernels(model, t, e)
    # the scan's parameters (A_log, D, dt_bias) on its first kernel, its output y saved by
    # the last
    ssd_f[0] = replace(ssd_f[0], weight="mamba_ssd", params=3 * heads)
    ssd_f[-1] = replace(ssd_f[-1], saved_bytes=e * t * d)
    gated = NORM_FLOPS["rmsnorm"] + SILU_FLOPS + 1
    gnorm = OpCost("mamba_gated_norm", "norm", float(gated * t * d), float(3 * e * t * d + e * d),
                   weight="mamba_gated_norm", params=d, saved_bytes=e * t * d)
    in_proj = replace(matmul("mamba_in_proj", t, h, w, e, params=h * w), saved_bytes=e * t * w)
    out_proj = matmul("mamba_out_proj", t, d, h, e, params=d * h)
    fwd = (replace(norm_f, saved_bytes=k * tn * h), in_proj, conv, *ssd_f, gnorm, out_proj,
           *res_f)
    bwd = (*res_b, *matmul_bwd("mamba_out_proj", t, d, h, e, weight=True),
           OpCost("mamba_gated_norm.bwd", "norm", 2.0 * gated * t * d,
                  float(5 * e * t * d + 2 * e * d), weight="mamba_gated_norm"),
           *ssd_b,
           replace(conv, name="mamba_conv1d.recompute", params=0),
           OpCost("mamba_conv1d.bwd", "elementwise", 2.0 * conv_flops,
                  float(e * 3 * t * c + 2 * e * conv_params), weight="mamba_conv1d"),
           *matmul_bwd("mamba_in_proj", t, h, w, e, weight=True), norm_b)
    return LayerCost("block", "transformer_block", sum(op.params for op in fwd), fwd, bwd,
                     sum(op.saved_bytes for op in fwd), k * tn * h)


# Megatron-Core's cuda_graph_scope values honoured here: ``mamba``, a hybrid's Mamba layers
# captured whole (NVIDIA/Megatron-LM@e4dcbf6e megatron/core/ssm/mamba_layer.py:
# MambaLayer.create_mcore_cudagraph_manager registers the layer when the scope is empty or
# names mamba, and _te_cuda_graph_replay replays its whole forward, norm to residual add).
# The others (attn, moe_router, moe_preprocess...) graph parts of a layer: not modelled.
GRAPH_SCOPES = ("mamba",)


def check_graph_scope(scope: list[str], graphs: bool) -> None:
    """Refuse a ``cuda_graph_scope`` the simulator cannot honour (a scope other than
    :data:`GRAPH_SCOPES`), or one given without CUDA graphs (``graphs`` False)."""
    other = [name for name in scope if name not in GRAPH_SCOPES]
    if other:
        raise ConfigError(f"scope {other[0]!r} is not modelled (it graphs part of a layer); "
                          f"modelled: {', '.join(GRAPH_SCOPES)}",
                          field="strategy.cuda_graph_scope")
    if scope and not graphs:
        raise ConfigError("needs cuda_graph_impl local or transformer_engine",
                          field="strategy.cuda_graph_scope")


def is_mamba_layer(layer: LayerCost) -> bool:
    """Whether ``layer`` is a Mamba-2 layer (:func:`mamba_layer_cost`'s kernels)."""
    return any(op.name.startswith("mamba_") for op in layer.forward)


def in_graph_scope(layer: LayerCost, scope: list[str]) -> bool:
    """Whether Megatron's ``cuda_graph_impl`` captures ``layer`` under ``cuda_graph_scope``
    ``scope``: every layer where it names none, a Mamba layer where it names ``mamba``."""
    return not scope or ("mamba" in scope and is_mamba_layer(layer))


def in_mlp_half(name: str, mlp: str) -> bool:
    """Whether kernel ``name`` of a transformer block belongs to its MLP (or MoE) half:
    the second norm, the MLP or MoE kernels (``mlp`` the activation's name), the second
    residual add, and their backward."""
    return name.startswith(_MLP_HALF) or name.split(".")[0] == mlp


def layer_half(layer: LayerCost, model: ModelSpec, mlp: bool, extra_saved: int = 0
               ) -> LayerCost:
    """The attention half (``mlp`` False) or the MLP half of a transformer block ``layer``,
    a hybrid model's ``*`` or ``-``/``E`` layer: its kernels, the parameters they hold and the
    bytes they save (``extra_saved``: saved bytes no kernel carries; the MoE half's kernels
    carry theirs, :func:`simulator.models.moe.moe_ops`)."""
    def keep(op: OpCost) -> bool:
        return in_mlp_half(op.name, model.mlp) == mlp

    fwd = tuple(op for op in layer.forward if keep(op))
    bwd = tuple(op for op in layer.backward if keep(op))
    return replace(layer, params=sum(op.params for op in fwd), forward=fwd, backward=bwd,
                   activation_bytes=sum(op.saved_bytes for op in fwd) + extra_saved)


def hybrid_layer_params(model: ModelSpec, symbol: str, tp: int = 1) -> int:
    """Parameters of one ``M``, ``*`` or ``-`` layer of a hybrid pattern on one of ``tp``
    ranks, as its layer's kernels hold them (:func:`mamba_params`, or a half of a
    block's)."""
    if symbol == "M":
        return mamba_params(rank_view(model, tp))
    return layer_half(block_cost(model, 1, 1, 2, True, tp=tp), model, symbol == "-").params


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
    f, lat = model.moe_ffn_hidden, model.moe_latent
    # routed experts on h (or on a LatentMoE's L, plus its two h x L projections), shared on h
    moe = 4 * s * f * gated * ((lat or h) * model.top_k + h * model.shared_experts) \
        + 4 * s * h * lat
    mamba = 0.0
    if model.mamba is not None:
        m, d = model.mamba, 2 * h
        mamba = (2 * s * h * (2 * d + 2 * m.groups * m.state + m.heads)
                 + 7 * s * d * m.state + 2 * s * d * h)
    counts = pattern_counts(model)
    depths = model.mtp_layers       # MTP: its layers counted as the model's, its logits too
    mtp = {name: depths * model.mtp_pattern.count(sym) for sym, name in PATTERN_SYMBOLS.items()}
    forward = sum((counts[name] + mtp[name]) * per for name, per in (
        ("attention", attention), ("MLP", mlp), ("MoE", moe), ("Mamba-2", mamba))) \
        + 2 * s * h * model.vocab * (1 + depths)
    return 3 * forward / s
