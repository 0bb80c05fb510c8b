"""Separate projections: Q, K and V (and SwiGLU's gate and up) as the Linears the code has.

The simulator's block (:mod:`simulator.models.transformer`) runs the QKV projection as one
GEMM (``qkv_proj``, ``n = (q + 2 kv) / tp`` columns) and SwiGLU's gate and up projections
as one (``mlp_gate_up``, ``2 f / tp``): what Megatron-Core's ``linear_qkv`` and
``linear_fc1``, MPT's ``Wqkv`` and GPT-2's ``c_attn`` are. Llama's reference code, which
torchtitan's model is (``Attention.wq``, ``wk``, ``wv`` and ``FeedForward.w1``, ``w3`` at
torchtitan 9dec370 and 820504e), Hugging Face's Llama (``q_proj``, ``k_proj``, ``v_proj``,
``gate_proj``, ``up_proj``) and Hugging Face's BERT (``query``, ``key``, ``value``) have a
Linear for each: :func:`separate_projections` gives such a block (``training.elementwise:
eager`` on a llama or bert model, :func:`runs_separately`) a GEMM per Linear at its own
shape, ``m x k`` by ``k x w`` for each output width ``w`` (a rank's ``q / tp``, ``kv / tp``,
``kv / tp``; ``f / tp`` twice), nothing fitted:

* each piece reads the shared input: forward and the weight gradient read ``X`` once per
  Linear, and each input-gradient GEMM writes a full ``dX`` (autograd then sums them,
  :func:`simulator.models.eager.grad_sums`); the FLOPs are the fused GEMM's;
* each piece is timed at its shape: the small K and V projections of a grouped-query model
  under tensor parallelism (Llama 3 8B at TP 8: 128 columns) run far from the GEMM's peak
  (:mod:`simulator.compute.gemm_shape`);
* launched as the fused GEMM was, but in eager code the group pays the eager stack's
  fitted per-kernel costs once, on its first GEMM, the others launching as ``piece``
  (:mod:`simulator.compute.launch`: the constants were fitted per kernel of fused-GEMM code,
  as the op-by-op pieces of :mod:`simulator.models.eager` pay theirs once); compiled
  (Inductor calls each GEMM) or graphed, each pays its own launch;
* each is its own weight (``qkv_proj.q`` ...: gradient buckets, FSDP units), its own
  matmul for torchtitan's per-op checkpointing, which recomputes every second ``mm``
  (``wk``, ``wo``, ``w3``; :mod:`simulator.strategies.checkpointing`), and saves its own
  output;
* under FP8 (:mod:`simulator.models.fp8`) each Linear casts its input (torchao's
  ``Float8Linear`` per module), except where one cast serves them all: under
  torch.compile AOTAutograd's common-subexpression pass merges the identical casts of one
  input (``torch._functorch.config.cse``, on by default), and torchao's float8 TP styles
  cast once before the all-gather (``PrepareFloat8ModuleInput``): :func:`shares_input`.
  This is why torchao's rowwise recipe ran slower than bf16 under TP 8 on Llama 3 8B
  (pytorch/torchtitan#1207: ``wk`` and ``wv`` about 40% slower in FP8 rowwise, fixed by
  torchao's recipe-aware filter, pytorch/ao#2410, after the 2025-06 runs).

Names: the forward pieces are ``<fused>.<part>`` (``qkv_proj.q``, ``qkv_proj.k``,
``qkv_proj.v``; ``mlp_gate_up.gate``, ``mlp_gate_up.up``), the backward ones
``<fused>.<part>.dgrad`` / ``.wgrad``, in autograd's order (the last Linear's first: V, K,
Q). :func:`fused_name` gives the fused op's name back (tensor parallelism's collectives are
placed around the group: :func:`opens`, :func:`closes`).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.compute.launch import EAGER, PIECE
from simulator.models.ops import LayerCost, OpCost
from simulator.models.spec import ModelSpec

# the fused GEMMs the reference code runs as separate Linears, and their parts in forward order
PARTS = {"qkv_proj": ("q", "k", "v"), "mlp_gate_up": ("gate", "up")}
GRADS = ("dgrad", "wgrad")
SEPARATE_FAMILIES = ("llama", "bert")     # model code with a Linear per projection


def runs_separately(model: ModelSpec) -> bool:
    """Whether ``model``'s reference code (``training.elementwise: eager``) has a Linear per
    projection: Llama's and BERT's do, GPT-2's ``c_attn`` and MPT's ``Wqkv`` are fused."""
    return model.family in SEPARATE_FAMILIES and not model.is_mla


def widths(model: ModelSpec, tp: int = 1) -> dict[str, tuple[int, ...]]:
    """Each fused GEMM's parts' output widths on one of ``tp`` ranks."""
    kv = model.kv_heads * model.head_dim // tp
    out = {"qkv_proj": (model.q_width // tp, kv, kv)}
    if model.mlp == "swiglu":
        f = model.ffn_hidden // tp
        out["mlp_gate_up"] = (f, f)
    return out


def split_name(name: str) -> tuple[str, str]:
    """``(fused op name, part)`` of a piece (``qkv_proj.k.dgrad`` -> ``qkv_proj.dgrad``,
    ``k``); ``(name, "")`` for any other op."""
    base, _, rest = name.partition(".")
    part, _, grad = rest.partition(".")
    if part in PARTS.get(base, ()) and (not grad or grad in GRADS):
        return (f"{base}.{grad}" if grad else base), part
    return name, ""


def fused_name(name: str) -> str:
    """The fused op's name of a piece; ``name`` itself for any other op."""
    return split_name(name)[0]


def _order(base: str, backward: bool) -> tuple[str, ...]:
    parts = PARTS[base.partition(".")[0]]
    return parts[::-1] if backward else parts


def opens(name: str, backward: bool) -> bool:
    """Whether op ``name`` is the first of its group in its phase (any op not a piece is)."""
    base, part = split_name(name)
    return not part or _order(base, backward)[0] == part


def closes(name: str, backward: bool) -> bool:
    """Whether op ``name`` is the last of its group in its phase (any op not a piece is)."""
    base, part = split_name(name)
    return not part or _order(base, backward)[-1] == part


def shares_input(name: str) -> bool:
    """Whether piece ``name`` reads the activation its group's first Linear (Q, gate) reads:
    forward, and the weight gradient's ``X``; an input-gradient GEMM reads its own output
    gradient."""
    base, part = split_name(name)
    return bool(part) and not base.endswith(".dgrad") and _order(base, False)[0] != part


def separate_projections(layer: LayerCost, model: ModelSpec, e: int, tp: int = 1) -> LayerCost:
    """``layer`` (a transformer block) with each fused projection GEMM as its Linears'
    GEMMs (module doc); ``e`` bytes an element of the GEMMs' operands. A fine-tuning's
    frozen base splits as any GEMM (its adapters stay beside the group); a GEMM whose width
    is not its parts' sum, or a grouped one, stays fused."""
    if not layer.kind.endswith("block") or not runs_separately(model):
        return layer
    parts = widths(model, tp)

    def pieces(op: OpCost) -> list[OpCost]:
        base, _, grad = op.name.partition(".")      # grad: "" forward, dgrad / wgrad
        if base not in parts or op.op_class != "matmul" or grad not in ("", *GRADS):
            return [op]
        width = dict(zip(PARTS[base], parts[base]))
        total = sum(width.values())
        split = "k" if grad == "dgrad" else "n"        # the dimension the Linears divide
        if getattr(op, split) != total or op.groups != 1:
            return [op]
        out = []
        for i, part in enumerate(_order(base, backward=bool(grad))):  # as opens/closes say
            w = width[part]
            share = w / total
            m, n, k = (op.m, op.n, w) if grad == "dgrad" else (op.m, w, op.k)
            # forward / wgrad: A (m x k) read whole by every Linear; dgrad: C (m x n) written
            # whole by each; the rest, and the FLOPs, divide by width
            whole = e * (m * n if grad == "dgrad" else m * k)
            name = f"{base}.{part}" + (f".{grad}" if grad else "")
            out.append(replace(
                op, name=name, flops=op.flops * share, m=m, n=n, k=k,
                bytes_accessed=whole + (op.bytes_accessed - whole) * share,
                weight=f"{base}.{part}" if op.weight else "",
                params=op.params * w // total, saved_bytes=op.saved_bytes * w // total,
                launch=PIECE if i and op.launch == EAGER else op.launch))
        return out

    fwd = [p for op in layer.forward for p in pieces(op)]
    bwd = [p for op in layer.backward for p in pieces(op)]
    kept = sum(o.saved_bytes for o in layer.forward) - sum(o.saved_bytes for o in fwd)
    return replace(layer, forward=tuple(fwd), backward=tuple(bwd),
                   activation_bytes=layer.activation_bytes - kept)


__all__ = ["PARTS", "closes", "fused_name", "opens", "runs_separately",
           "separate_projections", "shares_input", "split_name", "widths"]
