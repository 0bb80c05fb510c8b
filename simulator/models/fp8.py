"""FP8 training: the transformer blocks' Linear GEMMs in FP8, everything else in bf16.

The recipe of torchao's ``Float8Linear`` with tensorwise dynamic scaling (its default, what
torchtitan's ``float8`` option and llm-foundry's ``amp_fp8`` / Transformer Engine's delayed
scaling run in essence): each Linear of a block casts its bf16 input and weight to FP8
(one pass computes the absolute maximum, a second scales and casts: read 2 + read 2 +
write 1 bytes per element) and runs an FP8 GEMM at twice the bf16 tensor-core rate,
reading 1-byte operands and writing a bf16 output. Backward casts the output gradient the
same way, and transposes the FP8 input (weight gradient) and weight (input gradient),
which cuBLAS's FP8 kernels need in TN layout (read 1 + write 1 bytes per element). The
LM head, attention and every non-GEMM kernel stay bf16, as in torchtitan's default filter
(``output`` excluded). In a block compiled by torch.compile (its kernels launched as
``compiled``, :mod:`simulator.models.fusion`) the absolute-maximum pass fuses into the
kernel that produces the tensor (Inductor fuses a reduction into its producer), leaving
the scale-and-cast pass (read 2 + write 1 bytes per element, :data:`COMPILED_CAST_BYTES`);
the casts then launch as the block's kernels do. Activations and the checkpointing
bookkeeping are unchanged (bf16). A
grouped GEMM (an MoE layer's experts, Transformer Engine's ``GroupedLinear``) casts each
expert's input rows and weight: its casts count every group.

``recipe="rowwise"`` is torchao's rowwise recipe (``Float8LinearConfig.from_recipe_name(
"rowwise")``, torchtitan's ``float8.recipe_name = "rowwise"``): one scale per row along each
GEMM's reduction dimension (``torch._scaled_mm`` with row-wise scales), so every operand is
cast along the dimension its GEMM reduces over, and a tensor two GEMMs reduce differently is
cast twice. The kernels and their bytes are those torchao's own roofline counts for the
recipe (``torchao/testing/training/roofline_utils.py``, ``get_tensor_memory_traffic_ovhd_s``,
pytorch/ao 104f01a, 2026-05): an activation (the input X before the forward GEMM, the output
gradient dY before the input-gradient GEMM) is cast row-wise by a kernel that also writes a
bf16 transposed copy (read 2, write 1 + 2 bytes an element, :data:`ROWWISE_SPLIT_BYTES`; under
torch.compile the read fuses into the producing kernel, as the roofline's fusion modelling
assumes: 3), and that copy is cast before the weight-gradient GEMM (read 2, write 1,
:data:`ROWWISE_CAST_BYTES`); the weight is cast row-wise in forward (3) and, for the input
gradient, transposed in bf16 (read 2, write 2, :data:`ROWWISE_TRANSPOSE_BYTES`) and cast
again (3). The FP8 GEMMs run at the family's FP8 rate, as under ``tensorwise`` (the roofline
assumes one achievable FP8 rate for every recipe; PyTorch's row-scaled CUTLASS kernel runs
most shapes at 90-100% of the tensor-scaled cuBLAS one, pytorch/pytorch#147971, with fast
accumulation, which torchao's forward GEMM uses). The backward GEMMs accumulate in full
precision (torchao's ``Float8LinearConfig`` defaults: no fast accumulation for the input
and weight gradients), where that CUTLASS kernel is slow, so torchao runs them on cuBLAS's
tensor-scaled kernel and scales the output by the rows' and columns' scales afterwards
(``addmm_float8_unwrapped``, pytorch/ao#1325; under torch.compile one more kernel per GEMM,
pytorch/ao#2184): a pass over each backward GEMM's bf16 output (read 2, write 2,
:data:`RESCALE_BYTES`).

``recipe="rowwise_with_gw_hp"`` is torchao's rowwise recipe with the weight gradient in high
precision (``Float8LinearConfig.from_recipe_name("rowwise_with_gw_hp")``: ``cast_config_
input_for_grad_weight`` and ``cast_config_grad_output_for_grad_weight`` disabled, the
weight cast tensorwise for the input gradient; torchao 927cbfb91 ``config.py``): the forward
and input-gradient GEMMs in FP8, the weight-gradient GEMM in bf16 on the bf16 input and
output gradient, so no transposed copies. The kernels and bytes are torchao's roofline's for
it (``roofline_utils.py``): the input cast row-wise once (read 2, write 1; compiled, the
read fused into its producer: 1, :data:`GW_HP_CAST_BYTES`), the output gradient likewise
before the input-gradient GEMM, the weight cast row-wise forward (3) and, from the row-wise
scales, tensorwise into the input gradient's layout (3); the input-gradient GEMM's output is
rescaled as under ``rowwise`` (its left operand has row scales).

``recipe="delayed"`` is Transformer Engine's delayed scaling (``te.fp8_autocast`` with
``DelayedScaling``, what Composer's ``amp_fp8`` runs): the scale comes from the amax
history of earlier steps, and each tensor is cast once by a fused cast-transpose kernel
that also records its amax (read 2 bytes, write the FP8 copy and its transpose: 4 bytes
per element). Forward casts the input and the weight of each Linear; backward casts the
output gradient for the input-gradient GEMM and reuses the forward's transposed copies
and that cast for the weight gradient, so it adds no kernel there.

``recipe="current"`` is Transformer Engine's current (per-tensor) scaling
(``Float8CurrentScaling``, Megatron-Bridge's FP8-CS): the scale comes from this tensor's own
amax, so a pass reads the tensor for its amax (2 bytes per element) before the fused
cast-transpose kernel of the delayed recipe (read 2, write 1 + 1): 6 bytes per element, the
same tensors cast as under ``delayed``.

``recipe="mxfp8"`` is Transformer Engine's MXFP8 block scaling (``MXFP8BlockScaling``,
Blackwell's block-scaled tensor cores): one E8M0 scale per 32 consecutive elements, computed
inside the quantize kernel, so there is no amax pass and no history. A block runs along one
dimension only, so each tensor is quantized once into a row-wise and a column-wise FP8 copy
with their scales (read 2, write 1 + 1 + 2/32 bytes per element), forward the input and the
weight of each Linear, backward the output gradient; the kernels are the delayed recipe's
with the scales' bytes added.

``any_layout`` (Transformer Engine's per-tensor recipes, ``delayed`` and ``current``): the
GPU's FP8 GEMMs take their operands in any layout (``nvte_is_non_tn_fp8_gemm_supported``:
compute capability 10.x, datacenter Blackwell, :data:`simulator.hardware.ANY_LAYOUT_FP8_FAMILIES`).
There Transformer Engine makes no transposed copy (since TE 2.0 its quantizer creates the
column-wise data only where ``not non_tn_fp8_gemm_supported()``, and the one FP8 buffer
serves both usages): each cast writes the row-wise FP8 copy alone (one byte per element
less, :data:`NO_TRANSPOSE_BYTES`), and an FP8-stored weight is not transposed for the
input gradient. MXFP8 keeps its two copies (their block scales run along different
dimensions), as does NVFP4.

``weight_reuse`` (Transformer Engine's recipes only): the micro-batches that share one cast of
each weight. Megatron-Core's TE layers pass ``is_first_microbatch`` (``TELinear.forward``,
set by ``forward_step`` on a model chunk's first micro-batch of a step), and Transformer
Engine then casts (and transposes) the weight on that micro-batch only and reuses the cached
FP8 copy for the others, the weights being unchanged until the optimizer step. A layer's
cost is one micro-batch's: it carries ``1 / weight_reuse`` of the weight's cast, the same
GPU time per step, spread over the micro-batches instead of paid on the first.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.compute.launch import COMPILED
from simulator.errors import ConfigError
from simulator.models.ops import LayerCost, OpCost
from simulator.models.projections import shares_input

CAST_BYTES = 5.0         # per element: amax read (2) + cast read (2) + fp8 write (1)
COMPILED_CAST_BYTES = 3.0   # compiled: the amax in the producer; cast read (2) + write (1)
TRANSPOSE_BYTES = 2.0    # per element: fp8 read + fp8 write
CAST_FLOPS = 3.0         # |x| max, scale, round
CAST_TRANSPOSE_BYTES = 4.0   # delayed scaling, per element: read 2, write fp8 + fp8 transpose
MX_BLOCK = 32                # MXFP8: elements per E8M0 (1-byte) scale
MX_CAST_BYTES = CAST_TRANSPOSE_BYTES + 2.0 / MX_BLOCK   # + a scale per block, each copy
AMAX_BYTES = 2.0             # current scaling: the amax pass reads the bf16 tensor once
CURRENT_CAST_BYTES = AMAX_BYTES + CAST_TRANSPOSE_BYTES
TE_CAST_BYTES = {"delayed": CAST_TRANSPOSE_BYTES, "current": CURRENT_CAST_BYTES,
                 "mxfp8": MX_CAST_BYTES}    # Transformer Engine's recipes, per element
# torchao's rowwise recipe, per element (the module doc; torchao's roofline_utils.py)
ROWWISE_CAST_BYTES = 3.0     # a row's amax and cast in one kernel: read bf16 2, write fp8 1
ROWWISE_SPLIT_BYTES = 5.0    # an activation's row-wise cast + bf16 transposed copy: 2 + 1 + 2
ROWWISE_TRANSPOSE_BYTES = 4.0   # the weight's bf16 transpose: read 2, write 2
RESCALE_BYTES = 4.0          # a backward GEMM's output scaled by its rows' and columns' scales
GW_HP_CAST_BYTES = 3.0       # rowwise_with_gw_hp: an activation's row-wise cast, read 2 + write 1
GW_HP = "rowwise_with_gw_hp"    # torchao's rowwise recipe, weight gradient in high precision
NO_TRANSPOSE_BYTES = 1.0     # per element: the transposed FP8 copy an any-layout GPU skips
PER_TENSOR = ("delayed", "current")     # TE recipes whose copies an any-layout GPU shares


def fp8_layer(layer: LayerCost, recipe: str = "tensorwise", weight_reuse: int = 1,
              any_layout: bool = False, gathered=None, tp: int = 1,
              dp_fp8_weights: bool = False) -> LayerCost:
    """``layer`` with its weight GEMMs in FP8 and their cast kernels (blocks only); under a
    Transformer Engine recipe each weight's cast is shared by ``weight_reuse`` micro-batches;
    ``any_layout``: the GPU's FP8 GEMMs need no transposed copies (see the module doc).
    ``gathered`` (tensorwise): a predicate on GEMM names whose activation operand a tensor-
    parallel all-gather of ``tp`` ranks brings in FP8 (torchao's float8 TP styles): that
    activation is cast before the gather, on the rank's ``1 / tp`` of its rows.
    ``dp_fp8_weights``: the data-parallel sharding gathers the weights in FP8, so the
    forward GEMMs cast only their activation and the layer is marked ``fp8_gathered`` (its
    weights gathered at one byte each, :func:`fp8_gathered_weights`): under tensorwise,
    torchao's ``enable_fsdp_float8_all_gather`` (each rank casts its shard before the
    gather, 1/N of the weight, left out as FSDP2's all-gather copy-in is); under a
    Transformer Engine recipe, Megatron's FP8 parameters (``fp8_param_gather``: the weights
    held in FP8, the distributed optimizer's all-gather moving FP8; the update's cast of
    each rank's shard left out likewise; a per-tensor recipe's transposed weight made once
    a step on a GPU that needs it). The rowwise recipe has neither."""
    if not layer.kind.endswith("block"):
        return layer
    if dp_fp8_weights and layer.frozen_params:
        raise ConfigError(f"{layer.name}: weights gathered in FP8 (FSDP's float8 all-gather, "
                          f"Megatron's FP8 parameters) of a fine-tuned model's frozen base "
                          f"are not modelled (a Megatron base held in FP8 is "
                          f"finetune.base_precision fp8)", field="strategy")
    if recipe in TE_CAST_BYTES:
        transposes = not (any_layout and recipe in PER_TENSOR)
        per = TE_CAST_BYTES[recipe] - (0.0 if transposes else NO_TRANSPOSE_BYTES)
        # FP8 parameters (Megatron's fp8_param_gather): the weight is FP8 already; a
        # per-tensor recipe's transposed copy is made once a step (TE caches it until the
        # optimizer updates the weight), MXFP8's two copies when the weight is quantized
        param_t = 1.0 / weight_reuse if dp_fp8_weights and transposes and \
            recipe in PER_TENSOR else 0.0
        return replace(layer, fp8_gathered=dp_fp8_weights, forward=low_precision_ops(
                           layer.forward,
                           lambda op: _te_forward_casts(op, per, weight_reuse, dp_fp8_weights)),
                       backward=low_precision_ops(
                           layer.backward,
                           lambda op: _te_backward_casts(op, per, transposes, param_t)))
    if recipe == "rowwise":
        return replace(layer, forward=low_precision_ops(layer.forward, _rowwise_forward_casts),
                       backward=low_precision_ops(layer.backward, _rowwise_backward_casts,
                                                  after=_rowwise_rescale))
    if recipe == GW_HP:         # the weight gradients stay bf16 GEMMs
        return replace(layer, forward=low_precision_ops(
                           layer.forward, lambda op: _rowwise_forward_casts(op, _gw_hp_bytes)),
                       backward=low_precision_ops(layer.backward, _gw_hp_dgrad_casts,
                                                  after=_rowwise_rescale, only=_is_dgrad))

    def rows(op: OpCost) -> float:
        return 1 / tp if gathered is not None and gathered(op.name) else 1.0

    return replace(layer, fp8_gathered=dp_fp8_weights, forward=low_precision_ops(
                       layer.forward, lambda op: _forward_casts(op, rows(op), dp_fp8_weights)),
                   backward=low_precision_ops(layer.backward,
                                              lambda op: _backward_casts(op, rows(op))))


def _trainable_fp8_gemm(op: OpCost) -> bool:
    """An FP8 GEMM of a trainable weight: one not stored in FP8 already (a frozen base's
    is, and the sharding gathers it as stored)."""
    return (op.op_class == "matmul" and bool(op.weight) and op.shape is not None
            and op.precision == "fp8" and not op.fp8_weight)


def _gemm_weight(op: OpCost) -> float:
    """The elements of a GEMM's weight operand ``B[k, n]`` (every expert's)."""
    m, n, k = op.shape
    return float(op.groups * k * n)


def fp8_gathered_weights(layer) -> dict[str, int]:
    """The weights the data-parallel sharding gathers in FP8 (a layer marked
    ``fp8_gathered``; none otherwise), by name: :func:`fp8_gemm_weights`."""
    if not getattr(layer, "fp8_gathered", False):
        return {}
    return fp8_gemm_weights(layer)


def fp8_gemm_weights(layer) -> dict[str, int]:
    """Each trainable weight of ``layer``'s FP8 GEMMs (its forward ones) by name, with its
    elements (``k n``, every expert's; a bias stays in the parameters' dtype): what FP8
    parameters hold at one byte."""
    return {op.weight: int(_gemm_weight(op)) for op in layer.forward
            if _trainable_fp8_gemm(op)}


def fp8_gathered_params(layer) -> int:
    """The weight elements of ``layer`` gathered in FP8 (:func:`fp8_gathered_weights`), no
    more than its trainable parameters."""
    return min(int(layer.params), sum(fp8_gathered_weights(layer).values()))


def low_precision_ops(ops, casts, precision: str = "fp8", operand_bytes: float = 1.0,
                      after=None, only=None) -> list[OpCost]:
    """``ops`` with each weight GEMM (each that ``only`` accepts, when given) at
    ``precision`` (its two operands ``operand_bytes`` an element, its bf16 output 2) after
    its ``casts`` (and before ``after``'s kernels, when given)."""
    out = []
    for op in ops:
        if op.op_class == "matmul" and op.weight and op.shape and not op.precision and \
                (only is None or only(op)):
            # (a GEMM with a precision of its own, a LoRA adapter's, keeps it); a grouped GEMM (an MoE layer's experts) casts each expert's operands
            g = op.groups
            out.extend(replace(c, flops=g * c.flops, bytes_accessed=g * c.bytes_accessed)
                       for c in casts(op))
            m, n, k = op.shape
            out.append(replace(op, precision=precision, bytes_accessed=float(
                g * (operand_bytes * (m * k + k * n) + 2 * m * n))))
            if after is not None:
                out.extend(replace(c, flops=g * c.flops, bytes_accessed=g * c.bytes_accessed)
                           for c in after(op))
        else:
            out.append(op)
    return out


def _cast(op: OpCost, name: str, elements: float, per: float, computes: bool = True) -> OpCost:
    """A cast (or, ``computes`` False, a transpose) kernel of ``elements`` before the GEMM
    ``op``, launched as ``op`` is."""
    return OpCost(name, "elementwise", CAST_FLOPS * elements if computes else 0.0,
                  per * elements, launch=op.launch)


def _cast_bytes(op: OpCost) -> float:
    """Bytes per element of a tensorwise cast before ``op``: eager, or compiled."""
    return COMPILED_CAST_BYTES if op.launch == COMPILED else CAST_BYTES


def _weight(op: OpCost, elements: float) -> float:
    """The weight's elements a cast kernel handles: none when it is kept in FP8."""
    return 0.0 if op.fp8_weight else elements


def _te_forward_casts(op: OpCost, per: float, weight_reuse: int,
                      weight_in_fp8: bool = False) -> list[OpCost]:
    """``weight_in_fp8``: the weight is an FP8 parameter already (only x is cast)."""
    m, n, k = op.shape            # x [m, k] and w [k, n], each with its transpose
    weight = 0.0 if weight_in_fp8 else _weight(op, k * n) / weight_reuse
    return [_cast(op, f"te_cast_transpose.{op.name}", _input(op) + weight, per)]


def _te_backward_casts(op: OpCost, per: float, transposes: bool,
                       param_transpose: float = 0.0) -> list[OpCost]:
    """``param_transpose``: the share of an FP8 parameter's transpose this micro-batch
    makes (1 / the micro-batches of a step: once a step)."""
    m, n, k = op.shape
    if op.name.endswith(".dgrad"):  # dY [m, k] cast (and transposed for the weight gradient)
        out = [_cast(op, f"te_cast_transpose.{op.name}", m * k, per)]
        if op.fp8_weight and transposes:    # an FP8-stored weight's transpose, made again
            out.append(_cast(op, f"fp8_transpose.{op.name}", k * n, TRANSPOSE_BYTES, False))
        elif param_transpose:               # an FP8 parameter's, cached for the step
            out.append(_cast(op, f"fp8_transpose.{op.name}", k * n * param_transpose,
                             TRANSPOSE_BYTES, False))
        return out
    return []                       # wgrad: X^T from forward, dY^T from the dgrad cast


def _input(op: OpCost, rows: float = 1.0) -> float:
    """The elements of ``op``'s activation operand ``A [m, k]`` its casts handle (``rows``
    of them on this rank): none for a separate projection whose input its group's first
    Linear casts once for all (compiled, or cast before a TP all-gather:
    :func:`simulator.models.projections.shares_input`)."""
    m, _, k = op.shape
    if shares_input(op.name) and (op.launch == COMPILED or rows < 1.0):
        return 0.0
    return m * k * rows


def _forward_casts(op: OpCost, rows: float = 1.0,
                   weight_in_fp8: bool = False) -> list[OpCost]:
    """``rows``: the share of x's rows this rank casts (``1 / tp`` when x is all-gathered in
    FP8 after its cast); ``weight_in_fp8``: FSDP gathers the weight in FP8 (cast on the
    shard before the gather), so only x is cast here."""
    m, n, k = op.shape            # A = x [m, k], B = w [k, n]
    weight = 0.0 if weight_in_fp8 else _weight(op, k * n)
    return [_cast(op, f"float8_cast.{op.name}", _input(op, rows) + weight, _cast_bytes(op))]


def _backward_casts(op: OpCost, rows: float = 1.0) -> list[OpCost]:
    """``rows``: the share of dY's rows this rank casts (as :func:`_forward_casts`)."""
    m, n, k = op.shape
    if op.name.endswith(".dgrad"):  # dX[m, k_in] = dY [m, k] W^T: cast dY, transpose W
        return [_cast(op, f"float8_cast.{op.name}", m * k * rows, _cast_bytes(op)),
                _cast(op, f"float8_transpose.{op.name}", k * n, TRANSPOSE_BYTES, False)]
    return [_cast(op, f"float8_transpose.{op.name}", _input(op), TRANSPOSE_BYTES, False)]


def _split_bytes(op: OpCost) -> float:
    """Bytes per element of an activation's row-wise cast with its bf16 transposed copy:
    eager, or compiled (the read fused into the kernel that produces the tensor)."""
    return ROWWISE_SPLIT_BYTES - (2.0 if op.launch == COMPILED else 0.0)


def _rowwise_forward_casts(op: OpCost, activation=_split_bytes) -> list[OpCost]:
    """``activation``: bytes per element of X's cast (rowwise: with its bf16 transposed
    copy; rowwise_with_gw_hp: :func:`_gw_hp_bytes`, none)."""
    m, n, k = op.shape            # X [m, k] row-wise, W [k, n] row-wise
    out = [_cast(op, f"float8_rowwise_cast.{op.name}", _input(op), activation(op))]
    if _weight(op, k * n):
        out.append(_cast(op, f"float8_rowwise_cast_weight.{op.name}", k * n,
                         ROWWISE_CAST_BYTES))
    return out


def _rowwise_backward_casts(op: OpCost) -> list[OpCost]:
    m, n, k = op.shape
    if op.name.endswith(".dgrad"):  # dX = dY [m, k] W^T [k, n]: dY row-wise, W along k
        out = [_cast(op, f"float8_rowwise_cast.{op.name}", m * k, _split_bytes(op))]
        if _weight(op, k * n):
            out += [_cast(op, f"float8_rowwise_transpose.{op.name}", k * n,
                          ROWWISE_TRANSPOSE_BYTES, False),
                    _cast(op, f"float8_rowwise_cast_weight.{op.name}", k * n,
                          ROWWISE_CAST_BYTES)]
        return out
    # wgrad dW [m, n] = X^T [m, k] dY [k, n]: both transposed copies cast along the tokens
    return [_cast(op, f"float8_rowwise_cast_t.{op.name}", _input(op) + k * n,
                  ROWWISE_CAST_BYTES)]


def _is_dgrad(op: OpCost) -> bool:
    return op.name.endswith(".dgrad")


def _gw_hp_bytes(op: OpCost) -> float:
    """Bytes per element of an activation's row-wise cast under ``rowwise_with_gw_hp``:
    eager, or compiled (the read fused into the kernel that produces the tensor)."""
    return GW_HP_CAST_BYTES - (2.0 if op.launch == COMPILED else 0.0)


def _gw_hp_dgrad_casts(op: OpCost) -> list[OpCost]:
    m, n, k = op.shape            # dX = dY [m, k] (row-wise) W^T (tensorwise, its layout)
    out = [_cast(op, f"float8_rowwise_cast.{op.name}", m * k, _gw_hp_bytes(op))]
    if _weight(op, k * n):
        out.append(_cast(op, f"float8_cast_weight.{op.name}", k * n, ROWWISE_CAST_BYTES))
    return out


def _rowwise_rescale(op: OpCost) -> list[OpCost]:
    """A backward GEMM's output scaled after a cuBLAS tensor-scaled GEMM (module doc)."""
    m, n, _ = op.shape
    return [OpCost(f"float8_rowwise_rescale.{op.name}", "elementwise", float(m * n),
                   RESCALE_BYTES * m * n, launch=op.launch)]

