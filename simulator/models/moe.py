"""Costs of a mixture-of-experts block: router, top-k, permute, grouped expert GEMMs,
unpermute and shared experts, in place of the dense MLP of a transformer block.

The attention half of the block is :func:`~simulator.models.transformer.block_cost`'s. The
MLP half, for the ``t`` tokens of the rank:

* ``moe_router``: ``(t, h) x (h, E)`` logits; ``moe_topk``: softmax and top-k over the
  ``t E`` logits (softmax FLOPs per element);
* ``moe_permute``: each token copied to its ``k`` experts' order (read ``t h``, write
  ``t k h`` and the ``t k`` indices), the buffer the all-to-all dispatch sends;
* ``moe_expert_*``: the grouped GEMMs of the rank's ``local_experts`` experts over the
  ``expert_tokens`` token copies they receive (``t k`` on one rank holding every expert;
  under expert parallelism the busiest EP rank's load, :mod:`simulator.strategies.parallel.moe`),
  each expert an MLP of ``moe_ffn_hidden`` (the model's ``mlp`` kind, no biases), weights
  read once per expert; each op is one grouped GEMM of ``local_experts`` GEMMs of the
  busiest expert's ``ceil(T / local_experts)`` rows (``OpCost.groups``), timed as
  Transformer Engine's ``GroupedLinear`` runs them (:mod:`simulator.compute.gemm_shape`);
  under expert tensor parallelism (``etp``) each rank holds a ``1 / etp`` column / row
  slice of every local expert, ``moe_ffn_hidden / etp`` wide, and runs it on the copies
  its ``etp`` group gathered (Megatron-Core's ``TEGroupedMLP`` over the
  expert-tensor-parallel group);
* ``moe_sort_chunks`` / ``moe_unsort_chunks`` (with ``sort_chunks``: tokens that arrived
  from other EP ranks on a rank holding several experts): Megatron's copies of the received
  tokens into local-expert order and back (:func:`sort_chunks_ops`);
* ``moe_expert_bias`` (a model with linear biases, ``bias``: GPT-OSS): the second expert
  GEMM's bias, which Megatron-Core's ``TEGroupedMLP`` adds after it, per expert and weighted
  by the token's router probability (:func:`expert_bias_ops`; the first GEMM's bias is
  fused into the activation);
* ``moe_unpermute``: the ``k`` expert outputs of a token weighted by their router
  probabilities and summed (read ``t k h`` and the ``t k`` fp32 probabilities, write ``t h``);
* ``moe_shared_*``: ``shared_experts`` always-on experts, one MLP of ``shared_experts x
  moe_ffn_hidden`` on all ``t`` tokens.

Under LatentMoE (the ``moe`` mapping's ``latent_size`` ``L``: Nemotron 3 Super's
``moe_latent_size``; Megatron-Core's ``fc1_latent_proj`` and ``fc2_latent_proj``) every token
is projected ``h -> L`` after the router (``moe_latent_down``), the permutes, the all-to-all
and the routed experts work on ``L``-wide tokens, and the combined output is projected back
``L -> h`` (``moe_latent_up``, whose input is saved); the router and the shared experts stay
on ``h``.

Backward mirrors it (each GEMM twice, the permutes as scatter/gathers). Saved for backward,
besides the attention half: the MoE input (already the block's ``2 t h``), the permuted
tokens ``2 T h`` and the expert inner tensors (``4 T f`` GELU, ``6 T f`` SwiGLU, as
:func:`~simulator.models.transformer.block_activation_bytes` counts a dense MLP) at 16 bits
for ``T`` received copies, the same for the shared experts on ``t`` tokens, the fp32 router
probabilities ``4 t E`` and the ``t k`` int64 routing indices (the inner tensors ``1 /
etp`` as wide under expert tensor parallelism).
"""

from __future__ import annotations

import math
from dataclasses import replace

from simulator.models.mamba import layer_half, mamba_layer_cost
from simulator.models.ops import (ACT_FLOPS, ID_BYTES, SOFTMAX_BWD_FLOPS, SOFTMAX_FLOPS,
                                  LayerCost, OpCost, gemm_dims, matmul, matmul_bwd, pointwise)
from simulator.models.spec import ModelSpec
from simulator.models.transformer import (block_activation_bytes, block_cost, block_params,
                                          norm_params)
from simulator.models.window import check_window, is_windowed_layer, windowed_block

PROB_BYTES = 4                      # fp32 router probabilities
EXPERT_KERNELS = "moe_expert_"      # the routed experts' kernels (their names begin so)

# Kernels of the dense MLP that an MoE block replaces (forward and backward names).
_DENSE_MLP = ("mlp_up", "mlp_gate_up", "mlp_down", "gelu", "swiglu", "squared_relu")
_GRADS = ("dgrad", "wgrad", "bwd")


def is_moe_layer(model: ModelSpec, index: int) -> bool:
    """Whether block ``index`` (from 0) is an MoE block: after ``first_dense_layers``,
    every ``moe_layer_freq``-th (a hybrid model: an ``E`` of its ``layer_pattern``)."""
    if model.layer_pattern:
        return model.layer_pattern[index] == "E"
    start = model.first_dense_layers
    return model.is_moe and index >= start and (index - start) % model.moe_layer_freq == 0


def is_moe_block(layer: LayerCost) -> bool:
    """Whether ``layer`` is an MoE block (its kind stays ``transformer_block``, as FSDP
    wraps a Mixtral decoder layer like any other)."""
    return any(op.name == "moe_router" for op in layer.forward)


def is_routed_expert(op) -> bool:
    """Whether kernel ``op`` belongs to the routed experts (a grouped expert GEMM, its
    activation, their gradients and casts)."""
    return op.name.startswith(EXPERT_KERNELS)


def expert_part(layer: LayerCost) -> LayerCost:
    """The routed experts of ``layer``: its parameters held by the expert GEMMs, named by
    their forward kernels (none for a dense layer)."""
    forward = tuple(op for op in layer.forward if is_routed_expert(op))
    return replace(layer, params=sum(int(op.params) for op in forward), forward=forward)


def dense_part(layer: LayerCost) -> LayerCost:
    """``layer`` less its routed experts (:func:`expert_part`): attention, norms, router and
    shared experts; ``layer`` itself when it has none."""
    experts = expert_part(layer).params
    if not experts:
        return layer
    return replace(layer, params=layer.params - experts,
                   forward=tuple(op for op in layer.forward if not is_routed_expert(op)))


def moe_layer_count(model: ModelSpec) -> int:
    """MoE blocks of the model, with its multi-token-prediction layers' (a transformer's: the
    blocks after its last, by index; a hybrid's: the E layers of its ``mtp_pattern``;
    :mod:`simulator.models.mtp`)."""
    if model.layer_pattern:
        return model.layer_pattern.count("E") + model.mtp_layers * model.mtp_pattern.count("E")
    return sum(is_moe_layer(model, i) for i in range(model.layers + model.mtp_layers))


def expert_width(model: ModelSpec) -> int:
    """Width of the tokens the routed experts take and the all-to-all carries: ``h``, or a
    LatentMoE's latent width ``L``."""
    return model.moe_latent or model.hidden


def _mlp_params(model: ModelSpec, width: int) -> int:
    """Parameters of an expert MLP of ``moe_ffn_hidden`` on ``width``-wide tokens."""
    return (3 if model.mlp == "swiglu" else 2) * width * model.moe_ffn_hidden


def expert_params(model: ModelSpec) -> int:
    """Parameters of one routed expert: ``2 h f`` (GELU) or ``3 h f`` (SwiGLU), no biases
    (``L`` for ``h`` under LatentMoE)."""
    return _mlp_params(model, expert_width(model))


def moe_block_params(model: ModelSpec, local_experts: int | None = None, tp: int = 1,
                     etp: int = 1) -> int:
    """Parameters of one MoE block on a rank holding ``local_experts`` experts (default
    all), each split over ``etp`` ranks: attention and norms (on one of ``tp`` ranks),
    router ``h E``, the experts' slices, the shared experts."""
    local = model.num_experts if local_experts is None else local_experts
    # the attention half: a dense block's without its MLP (and, with biases, without the
    # dense MLP's down-projection bias, which an MoE block has not); a hybrid's E layer has
    # its norm and no attention
    attention = (norm_params(model) if model.layer_pattern else
                 block_params(replace(model, ffn_hidden=0), tp) - (model.hidden if model.bias
                                                                   else 0))
    experts = local * expert_params(model) // etp + \
        model.shared_experts * _mlp_params(model, model.hidden)
    latent = 2 * model.hidden * model.moe_latent          # LatentMoE's down and up projections
    return attention + model.hidden * model.num_experts + experts + latent


def inactive_params(model: ModelSpec) -> int:
    """Parameters a token does not use: the ``E - k`` routed experts it skips in every MoE
    block (0 for a dense model). Total minus this is the *active* parameter count."""
    if not model.is_moe:
        return 0
    return moe_layer_count(model) * (model.num_experts - model.top_k) * expert_params(model)


def expert_rows(tokens: float, experts: int) -> int:
    """Rows of each expert's GEMM when ``tokens`` copies spread evenly over ``experts``
    (whole rows, rounded up: the busiest expert sets the grouped GEMM's shape)."""
    return max(1, math.ceil(tokens / experts - 1e-9))


def _grouped(name: str, m: float, k: float, n: float, experts: int, e: int) -> OpCost:
    """``experts`` GEMMs ``(m_i, k) x (k, n)`` over ``m = sum m_i`` rows: ``2 m k n`` FLOPs,
    the rows, every weight and the outputs once; shape ``m_i x n x k`` in ``experts``
    groups (a grouped GEMM, :mod:`simulator.compute.gemm_shape`)."""
    return OpCost(name, "matmul", 2.0 * m * k * n, float(e * (m * k + experts * k * n + m * n)),
                  weight=name, params=int(experts * k * n),
                  **gemm_dims(expert_rows(m, experts), n, k), groups=experts)


def _grouped_bwd(name: str, m: float, k: float, n: float, experts: int, e: int) -> list[OpCost]:
    """Input and weight gradients of :func:`_grouped`, per expert as :func:`matmul_bwd`
    shapes them (``dX = dY W^T``: ``m_i x k`` over ``n``; ``dW = X^T dY``: ``k x n`` over
    ``m_i``)."""
    nbytes = float(e * (m * n + experts * k * n + m * k))
    rows = expert_rows(m, experts)
    dims = {"dgrad": gemm_dims(rows, k, n), "wgrad": gemm_dims(k, n, rows)}
    return [OpCost(f"{name}.{g}", "matmul", 2.0 * m * k * n, nbytes, weight=name,
                   **dims[g], groups=experts, transa=g == "wgrad")
            for g in ("dgrad", "wgrad")]


def _ffn(model: ModelSpec, prefix: str, tokens: float, width: int, experts: int, e: int,
         h: int | None = None):
    """Forward and backward ops of ``experts`` MLPs of ``width`` over ``tokens`` rows of
    ``h`` (default the model's hidden) columns."""
    h, kind = h or model.hidden, model.mlp
    up, cols = (f"{prefix}_gate_up", 2 * width) if kind == "swiglu" else (f"{prefix}_up", width)
    act_in = 3 if kind == "swiglu" else 2
    fwd = [_grouped(up, tokens, h, cols, experts, e),
           pointwise(f"{prefix}_{kind}", "elementwise", tokens * width, ACT_FLOPS[kind],
                     act_in, e),
           _grouped(f"{prefix}_down", tokens, width, h, experts, e)]
    bwd = [*_grouped_bwd(f"{prefix}_down", tokens, width, h, experts, e),
           pointwise(f"{prefix}_{kind}.bwd", "elementwise", tokens * width, ACT_FLOPS[kind],
                     2 * act_in - 1, e),
           *_grouped_bwd(up, tokens, h, cols, experts, e)]
    return fwd, bwd


# the names of expert_bias_ops' forward and backward passes
EXPERT_BIAS_OPS = ("moe_expert_bias", "moe_expert_bias.bwd")


def expert_bias_ops(received: float, h: int, e: int) -> tuple[OpCost, OpCost]:
    """The second expert GEMM's bias as Megatron-Core's ``TEGroupedMLP._apply_bias`` adds
    it (NVIDIA/Megatron-LM@d7288711, Megatron-Bridge 26.04's pin, megatron/core/transformer/
    moe/experts.py; added by a329dd6d "Enable bias in expert mlp [gpt-oss 5/5]"): the GEMM
    runs with ``skip_bias_add``, then for each local expert ``t + b * p`` (the bias times
    the fp32 router probability of each of its ``received`` rows), the pieces
    concatenated and cast back ``.to`` the activations' dtype. Memory-bound passes over
    ``received x h`` elements, ``e`` bytes each in the activations' dtype and 4 in fp32:

    * forward: ``b * p`` writes fp32 (4); ``t + bp`` reads ``e`` + 4, writes 4;
      ``torch.cat`` reads 4, writes 4; ``.to`` reads 4, writes ``e``: ``24 + 2 e`` bytes
      and 2 FLOPs (a multiply and an add) per element;
    * backward (autograd of the same): ``.to``'s reads ``e``, writes 4; the add's gradient
      to ``t`` cast back reads 4, writes ``e``; the multiply's gradients, to the bias
      (``(g p).sum(0)``: a product read 4, written 4, then read 4 by the sum) and to the
      probabilities (``(g b).sum(-1)``: the same 12): ``32 + 2 e`` bytes and 4 FLOPs per
      element. ``cat``'s gradient is views (no copy).

    Each is one simulated kernel (the eager path launches two per expert and three more:
    its CPU time is that of one kernel, an underestimate)."""
    elements = received * h
    forward, backward = EXPERT_BIAS_OPS
    return (OpCost(forward, "elementwise", 2.0 * elements,
                   float((24 + 2 * e) * elements)),
            OpCost(backward, "elementwise", 4.0 * elements,
                   float((32 + 2 * e) * elements)))


def op_fused_experts(layer: LayerCost) -> LayerCost:
    """``layer`` as Megatron-Core's ``TEGroupedMLP`` runs it under
    ``use_transformer_engine_op_fuser``: Transformer Engine's ``ops.GroupedLinear`` with
    ``scale_bias`` hands the second expert GEMM's bias and the router probabilities to the
    grouped GEMM (NVIDIA/TransformerEngine@d0067d0d transformer_engine/pytorch/ops/basic/
    grouped_linear.py, ``general_grouped_gemm_for_grouped_tensor`` with ``bias_scale``), so
    :func:`expert_bias_ops`' passes are not run (a layer without them is returned as is).
    Not modelled: that module's per-group fallback, an in-place ``add_`` per expert."""
    forward = tuple(op for op in layer.forward if op.name not in EXPERT_BIAS_OPS)
    backward = tuple(op for op in layer.backward if op.name not in EXPERT_BIAS_OPS)
    if len(forward) == len(layer.forward) and len(backward) == len(layer.backward):
        return layer
    return replace(layer, forward=forward, backward=backward)


def sort_chunks_ops(received: float, h: int, e: int) -> dict[str, OpCost]:
    """Megatron's second permutation around the expert GEMMs (``sort_chunks_by_idxs`` of the
    all-to-all token dispatcher, run when a rank holds more than one expert), by name: the
    ``received`` token copies arrive grouped by source EP rank and are copied into local-
    expert order before the experts (with their fp32 router probabilities), and back into
    source-rank order before the combine; backward copies the gradients the same ways.
    Each a memory-bound gather: read and write ``received h`` elements."""
    tokens = float(e * 2 * received * h)
    probs = float(PROB_BYTES * 2 * received)
    return {name: OpCost(name, "elementwise", 0.0, nbytes) for name, nbytes in (
        ("moe_sort_chunks", tokens + probs), ("moe_unsort_chunks", tokens),
        ("moe_unsort_chunks.bwd", tokens), ("moe_sort_chunks.bwd", tokens + probs))}


def moe_ops(model: ModelSpec, t: int, e: int, *, expert_tokens: float | None = None,
            local_experts: int | None = None, sort_chunks: bool = False, etp: int = 1
            ) -> tuple[list[OpCost], list[OpCost]]:
    """Forward and backward kernels of the MoE half of a block for ``t`` tokens (see the
    module doc); ``expert_tokens`` defaults to ``t k``, ``local_experts`` to all, each
    expert ``moe_ffn_hidden / etp`` wide; ``sort_chunks``: the dispatcher's second
    permutation (:func:`sort_chunks_ops`, tokens arriving from other EP ranks)."""
    hidden, n_exp, k = model.hidden, model.num_experts, model.top_k
    h, lat = expert_width(model), model.moe_latent     # the routed tokens' width
    copies = t * k
    received = copies if expert_tokens is None else expert_tokens
    local = n_exp if local_experts is None else local_experts
    router = matmul("moe_router", t, hidden, n_exp, e, params=hidden * n_exp)
    idx = ID_BYTES * copies
    permute = OpCost("moe_permute", "elementwise", 0.0, float(e * (t * h + copies * h) + idx))
    permute_b = OpCost("moe_permute.bwd", "elementwise", float(copies * h),
                       float(e * (copies * h + t * h) + idx))
    unpermute = OpCost("moe_unpermute", "elementwise", 2.0 * copies * h,
                       float(e * (copies * h + t * h) + PROB_BYTES * copies))
    unpermute_b = OpCost("moe_unpermute.bwd", "elementwise", 2.0 * copies * h,
                         float(e * (t * h + 2 * copies * h) + PROB_BYTES * copies))
    exp_f, exp_b = _ffn(model, "moe_expert", received, model.moe_ffn_hidden // etp, local, e,
                        h)
    shared_f, shared_b = ([], [])
    if model.shared_experts:
        shared_f, shared_b = _ffn(model, "moe_shared", t, model.shared_experts
                                  * model.moe_ffn_hidden, 1, e)
    chunks = sort_chunks_ops(received, h, e) if sort_chunks else {}
    # the second expert GEMM's bias (TEGroupedMLP adds it after the GEMM), on the received
    # copies, and its gradient first in the experts' backward
    bias_f, bias_b = ([], [])
    if model.bias:
        bias_f, bias_b = (list(ops) for ops in zip(expert_bias_ops(received, h, e)))
    # LatentMoE (Megatron-Core MoELayer's fc1_latent_proj / fc2_latent_proj): every token
    # projected h -> L before the dispatch, the combined output L -> h after it
    down = [matmul("moe_latent_down", t, hidden, lat, e, params=hidden * lat)] if lat else []
    up = [matmul("moe_latent_up", t, lat, hidden, e, params=lat * hidden)] if lat else []
    down_b = matmul_bwd("moe_latent_down", t, hidden, lat, e, weight=True) if lat else []
    up_b = matmul_bwd("moe_latent_up", t, lat, hidden, e, weight=True) if lat else []

    def sort(name: str) -> list[OpCost]:
        return [chunks[name]] if name in chunks else []
    fwd = [router, pointwise("moe_topk", "elementwise", t * n_exp, SOFTMAX_FLOPS, 2, e),
           *down, permute, *sort("moe_sort_chunks"), *exp_f, *bias_f,
           *sort("moe_unsort_chunks"),
           unpermute, *up, *shared_f]
    fwd = _with_moe_saved(fwd, model, t, e, received, etp)
    bwd = [*shared_b, *up_b, unpermute_b, *sort("moe_unsort_chunks.bwd"), *bias_b, *exp_b,
           *sort("moe_sort_chunks.bwd"), permute_b, *down_b,
           pointwise("moe_topk.bwd", "elementwise", t * n_exp, SOFTMAX_BWD_FLOPS, 3, e),
           *matmul_bwd("moe_router", t, hidden, n_exp, e, weight=True)]
    return fwd, bwd


def _with_moe_saved(fwd: list[OpCost], model: ModelSpec, t: int, e: int, received: float,
                    etp: int) -> list[OpCost]:
    """The MoE half's forward ops with ``saved_bytes``: which op produces each tensor of
    :func:`moe_activation_bytes` (their sum), as the dense block's ops carry theirs, so
    selective recompute knows what rerunning an op frees: ``moe_topk`` the fp32 router
    probabilities ``4 t E`` and the int64 indices ``8 t k``; ``moe_permute`` the permuted
    copies ``e T w`` (``w`` the routed tokens' width); each MLP's up (gate-up) projection
    its output (``2 e T f`` SwiGLU, ``e T f`` else) and its activation its output ``e T f``
    (the experts ``f = moe_ffn_hidden / etp`` on ``T`` received copies, the shared experts
    ``shared_experts x moe_ffn_hidden`` on ``t`` tokens); ``moe_unpermute`` LatentMoE's
    ``L``-wide combined tokens, ``e t L``, which ``moe_latent_up`` reads."""
    up_outputs = 2 if model.mlp == "swiglu" else 1
    f, f_shared = model.moe_ffn_hidden // etp, model.shared_experts * model.moe_ffn_hidden
    kind = model.mlp
    saved = {"moe_topk": PROB_BYTES * t * model.num_experts + ID_BYTES * t * model.top_k,
             "moe_permute": e * received * expert_width(model),
             "moe_unpermute": e * t * model.moe_latent}
    for prefix, rows, width in (("moe_expert", received, f), ("moe_shared", t, f_shared)):
        saved[f"{prefix}_gate_up" if kind == "swiglu" else f"{prefix}_up"] = \
            up_outputs * e * rows * width
        saved[f"{prefix}_{kind}"] = e * rows * width
    return [replace(op, saved_bytes=int(saved[op.name])) if op.name in saved else op
            for op in fwd]


def moe_activation_bytes(model: ModelSpec, t: int, e: int, received: float,
                         etp: int = 1) -> int:
    """Bytes the MoE half saves beyond the block's attention half and MoE input (see the
    module doc), ``received`` the token copies the rank's experts process, each expert
    ``1 / etp`` of its width."""
    inner = 6 if model.mlp == "swiglu" else 4
    f, f_shared = model.moe_ffn_hidden // etp, model.shared_experts * model.moe_ffn_hidden
    # LatentMoE: the permuted copies are L wide, and the up projection keeps its L-wide input
    latent = 2 * t * model.moe_latent
    tensors = 2 * received * expert_width(model) + inner * received * f + \
        inner * t * f_shared + latent
    return int(tensors * e // 2 + PROB_BYTES * t * model.num_experts
               + ID_BYTES * t * model.top_k)


def _swap_mlp(ops, moe: list[OpCost], anchor: str) -> tuple[OpCost, ...]:
    """``ops`` with the dense MLP kernels removed and ``moe`` put where ``anchor`` was."""
    out: list[OpCost] = []
    for op in ops:
        if op.name == anchor:
            out += moe
        base, _, grad = op.name.rpartition(".")
        if op.name not in _DENSE_MLP and not (base in _DENSE_MLP and grad in _GRADS):
            out.append(op)
    return tuple(out)


def moe_block_cost(model: ModelSpec, b: int, s: int, e: int, flash: bool,
                   k: int | None = None, tp: int = 1, sp: bool = False, cp: int = 1, *,
                   expert_tokens: float | None = None,
                   local_experts: int | None = None, sort_chunks: bool = False,
                   etp: int = 1) -> LayerCost:
    """One MoE block: :func:`block_cost` (same arguments) with its MLP replaced by the
    MoE kernels of :func:`moe_ops` on the rank's tokens (``b s / cp``, and ``/ tp`` with
    sequence parallelism), the experts split over ``etp`` ranks."""
    dense = block_cost(model, b, s, e, flash, k, tp, sp, cp)
    t = b * (s // cp)
    t = t // tp if sp else t
    fwd, bwd = moe_ops(model, t, e, expert_tokens=expert_tokens, local_experts=local_experts,
                       sort_chunks=sort_chunks, etp=etp)
    received = t * model.top_k if expert_tokens is None else expert_tokens
    first_fwd = "mlp_gate_up" if model.mlp == "swiglu" else "mlp_up"
    if model.layer_pattern:        # a hybrid model's E layer: the MoE half alone
        layer = replace(dense, forward=_swap_mlp(dense.forward, fwd, first_fwd),
                        backward=_swap_mlp(dense.backward, bwd, "mlp_down.dgrad"))
        return layer_half(layer, model, True)     # the MoE kernels carry their saved bytes
    attention = block_activation_bytes(replace(model, ffn_hidden=0), b, s, e, flash, k, tp,
                                       sp, cp)
    return LayerCost("block", dense.kind, moe_block_params(model, local_experts, tp, etp),
                     _swap_mlp(dense.forward, fwd, first_fwd),
                     _swap_mlp(dense.backward, bwd, "mlp_down.dgrad"),
                     attention + moe_activation_bytes(model, t, e, received, etp),
                     dense.output_bytes)


def block_costs(model: ModelSpec, b: int, s: int, e: int, flash: bool, k: int | None = None,
                tp: int = 1, sp: bool = False, cp: int = 1) -> list[LayerCost]:
    """``block.0`` ... ``block.{L-1}``: dense blocks, and MoE blocks where
    :func:`is_moe_layer` (every expert on the rank, tokens routed evenly); a block with a
    sliding window (:func:`~simulator.models.window.is_windowed_layer`) has its attention
    kernels over the window's keys."""
    check_window(model, cp)
    dense = block_cost(model, b, s, e, flash, k, tp, sp, cp)
    moe = moe_block_cost(model, b, s, e, flash, k, tp, sp, cp) if model.is_moe else None
    if model.layer_pattern:
        kinds = {"*": lambda: layer_half(dense, model, False),
                 "-": lambda: layer_half(dense, model, True),
                 "E": lambda: moe, "M": lambda: mamba_layer_cost(model, b, s, e, k, tp, sp)}
        built = {sym: kinds[sym]() for sym in set(model.layer_pattern)}
        return [replace(built[sym], name=f"block.{i}")
                for i, sym in enumerate(model.layer_pattern)]
    blocks = [replace(moe if is_moe_layer(model, i) else dense, name=f"block.{i}")
              for i in range(model.layers)]
    return [windowed_block(block, model, s) if is_windowed_layer(model, i) else block
            for i, block in enumerate(blocks)]
