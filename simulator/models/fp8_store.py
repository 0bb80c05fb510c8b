"""Tensors a step keeps for backward in FP8 (1 byte an element) instead of 16 bits.

Two framework settings, each a tensor :func:`~simulator.models.transformer._with_saved`
counts at the step's 16-bit size ``e``; :func:`fp8_stored` divides the bytes of the forward
op that saves it by ``e`` (and the block's ``activation_bytes`` by as much), as the last step
of :func:`simulator.models.costs.layer_costs`, after fine-tuning has dropped what a frozen
weight does not need, so every strategy generator (and activation recompute) sees the same
bytes.

* ``attention`` (``training.fp8_attention``): Transformer Engine's FP8
  ``DotProductAttention`` keeps Q, K, V and the output O in FP8 for its FP8 backward
  (``NVTE_FP8_DPA_BWD=1``, Transformer Engine's default): Transformer Engine v2.2
  ``transformer_engine/pytorch/attention.py`` ``FusedAttnFunc.forward`` saves
  ``fp8_tensors = (q_fp8, k_fp8, v_fp8, out_fp8)`` and not the 16-bit copies;
  ``AttnFuncWithCPAndQKVOA2A`` and ``AttnFuncWithCPAndKVP2P`` (context parallelism) save
  the FP8 ``q``, ``k``/``kv`` and ``out`` alike. In the block's ops: Q, K, V at
  ``qkv_proj`` (``rotary`` under MLA) and O at ``attn_core``. The casts themselves are
  priced with the FP8 attention kernel (docs/compute.md), not here.
* ``activation_input`` (``training.fp8_activation_input``): Megatron-Core's
  ``activation_func_fp8_input_store`` (NeMo's ``FP8_ACT=1``, which NVIDIA's MLPerf Training
  v5.0 Llama 2 70B LoRA configs set at TP1 CP1): the fused SwiGLU keeps its input, the
  gate/up GEMM's output (``2 t f / tp`` elements, saved at ``mlp_gate_up``), as
  ``input.to(torch.float8_e4m3fn)`` and casts it back before its backward
  (``megatron/core/fusions/fused_bias_swiglu.py`` ``SwiGLUFunction``; Megatron-Core refuses it
  for any activation but SwiGLU, ``transformer_config.py``). The two casts are plain
  elementwise kernels (no scale): forward ``swiglu.fp8_store`` reads 2 and writes 1 bytes an
  element after ``swiglu``, backward ``swiglu.fp8_load`` reads 1 and writes 2 before
  ``swiglu.bwd``.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.models.ops import LayerCost, OpCost

FP8_STORES = ("attention", "activation_input")
# the forward ops whose saved output each setting keeps in FP8
SAVED_BY = {"attention": ("qkv_proj", "rotary", "attn_core"),
            "activation_input": ("mlp_gate_up",)}
CAST_BYTES = 3      # per element: a 16-bit read and an FP8 write (or the reverse)
ACTIVATION = "swiglu"


def fp8_stored(layers: list[LayerCost], stores: tuple[str, ...], e: int) -> list[LayerCost]:
    """``layers`` with the tensors of ``stores`` (:data:`FP8_STORES`) saved in FP8 instead of
    ``e`` bytes an element, and the SwiGLU input's casts (see the module doc)."""
    if not stores or e <= 1:
        return layers
    unknown = set(stores) - set(FP8_STORES)
    if unknown:
        raise ValueError(f"unknown FP8 stores {sorted(unknown)}")
    return [_stored(layer, stores, e) for layer in layers]


def _stored(layer: LayerCost, stores: tuple[str, ...], e: int) -> LayerCost:
    names = {name for store in stores for name in SAVED_BY[store]}
    forward: list[OpCost] = []
    freed = cast = 0
    for op in layer.forward:
        if op.name in names and op.saved_bytes:
            kept = op.saved_bytes // e
            freed += op.saved_bytes - kept
            if op.name in SAVED_BY["activation_input"] and "activation_input" in stores:
                cast = kept                  # elements: one byte each
            op = replace(op, saved_bytes=kept)
        forward.append(op)
    if not freed:
        return layer
    backward = list(layer.backward)
    if cast:
        forward = _after(forward, ACTIVATION, _cast(f"{ACTIVATION}.fp8_store", cast))
        backward = _before(backward, f"{ACTIVATION}.bwd", _cast(f"{ACTIVATION}.fp8_load", cast))
    return replace(layer, forward=tuple(forward), backward=tuple(backward),
                   activation_bytes=layer.activation_bytes - freed)


def _cast(name: str, elements: int) -> OpCost:
    return OpCost(name, "elementwise", float(elements), float(CAST_BYTES * elements))


def _after(ops: list[OpCost], name: str, new: OpCost) -> list[OpCost]:
    i = next(i for i, op in enumerate(ops) if op.name == name)
    return [*ops[:i + 1], new, *ops[i + 1:]]


def _before(ops: list[OpCost], name: str, new: OpCost) -> list[OpCost]:
    i = next(i for i, op in enumerate(ops) if op.name == name)
    return [*ops[:i], new, *ops[i:]]
