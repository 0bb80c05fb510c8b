"""Cost primitives of a layer: :class:`OpCost`, :class:`LayerCost` and the op builders.

The conventions they count by are in :mod:`simulator.models.costs`; the per-family
builders (:mod:`~simulator.models.transformer`, :mod:`~simulator.models.resnet`,
:mod:`~simulator.models.maskrcnn`) build layers from these, and ``costs`` dispatches to
them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.errors import ConfigError

ID_BYTES = 8                 # int64 token ids / pooling indices
LOSS_BYTES = 4               # the fp32 scalar loss
NORM_FLOPS = {"layernorm": 5, "rmsnorm": 4}     # per element, forward
SOFTMAX_FLOPS, SOFTMAX_BWD_FLOPS = 5, 3          # per score element
ACT_FLOPS = {"gelu": 8, "swiglu": 4}             # per MLP inner element, forward
ACT_FLOPS["squared_relu"] = 2   # relu(x)^2: a max and a multiply (Megatron-Core squared_relu)
LOSS_FLOPS, LOSS_BWD_FLOPS = 5, 2                # per logit


@dataclass(frozen=True)
class OpCost:
    """One kernel-level piece of a layer: ``flops`` FLOPs, ``bytes_accessed`` HBM bytes."""

    name: str
    op_class: str    # matmul, attention, elementwise, norm, conv, embedding or loss
    flops: float
    bytes_accessed: float
    weight: str = ""  # the parameter tensor the kernel uses (forward and backward), if any
    params: int = 0   # its size, on the forward op only (sum over a layer = layer params)
    saved_bytes: int = 0   # forward op: the bytes of its output(s) backward keeps (sum over a
    #                        block's forward = its activation_bytes; selective checkpointing)
    # GEMM shape C[m, n] = A[m, k] B[k, n] (0: unknown; timed by FLOPs alone). Attention
    # kernels: m = query rows (batch x heads x seq), n = keys each query attends to on
    # average (seq, or about seq / 2 when causal), k = head dimension.
    m: int = 0
    n: int = 0
    k: int = 0
    precision: str = ""   # a kernel's own compute precision ("fp8"), else the step's
    groups: int = 1       # a grouped GEMM: this many m x n x k GEMMs (an MoE layer's experts)
    # how the kernel is launched (simulator/compute/launch.py): "" a kernel of the fused
    # model launched eagerly; "piece" one of the op-by-op kernels an eager op is made of
    # (its launch costs are its fused op's); "compiled" by torch.compile's code; "graph"
    # replayed from a CUDA graph
    launch: str = ""
    # the weight is kept in FP8 (a frozen base stored in FP8, simulator/models/finetune.py):
    # an FP8 step casts only the activation (simulator/models/fp8.py)
    fp8_weight: bool = False
    # a GEMM whose A is a transposed view (a weight gradient dW = X^T dY: the reduction k
    # runs over the stored rows, the tokens): its leading dimensions are m and n, not k and
    # n, which is what its alignment is judged on (simulator/compute/gemm_shape.py)
    transa: bool = False

    @property
    def shape(self) -> tuple[int, int, int] | None:
        return (self.m, self.n, self.k) if self.m and self.n and self.k else None


@dataclass(frozen=True)
class LayerCost:
    """One layer of the model for one micro-batch (bytes at the chosen precision)."""

    name: str
    kind: str
    params: int
    forward: tuple[OpCost, ...]
    backward: tuple[OpCost, ...]
    activation_bytes: int
    output_bytes: int
    # frozen weights (simulator/models/finetune.py): held and all-gathered like any weight,
    # no gradient, no optimizer state, never reduced; ``params`` above are the trainable ones
    frozen_params: int = 0
    frozen_bytes: int = 0     # what they take at rest (16-bit, or NF4 for a QLoRA base)
    # its FP8 GEMMs' trainable weights are gathered (and held for compute) in FP8 by the
    # data-parallel sharding: torchao's FSDP float8 all-gather, Megatron's FP8 parameters
    # (simulator/models/fp8.py fp8_gathered_weights: which, and how many elements)
    fp8_gathered: bool = False

    @property
    def forward_flops(self) -> float:
        return sum(op.flops for op in self.forward)

    @property
    def backward_flops(self) -> float:
        return sum(op.flops for op in self.backward)


# ------------------------------------------------------------------ op builders
def matmul(name: str, m: float, k: float, n: float, e: int, op_class: str = "matmul",
           params: int = 0) -> OpCost:
    """Forward ``(m, k) x (k, n)``: ``2 m k n`` FLOPs, inputs + weight + output bytes.
    ``params``: the weight's parameters (``k n`` plus a bias) when it is one (its name is
    ``name``), 0 for a product of activations."""
    return OpCost(name, op_class, 2.0 * m * k * n, float(e * (m * k + k * n + m * n)),
                  weight=name if params else "", params=int(params), **gemm_dims(m, n, k))


def matmul_bwd(name: str, m: float, k: float, n: float, e: int, dgrad: bool = True,
               op_class: str = "matmul", weight: bool = False) -> list[OpCost]:
    """Backward of :func:`matmul`: input gradient (unless ``dgrad`` is False) and weight
    gradient, each ``2 m k n`` FLOPs and ``e (m n + k n + m k)`` bytes; with ``weight``
    both name the weight ``name`` they use."""
    grads = (("dgrad", "wgrad") if dgrad else ("wgrad",))
    dims = {"dgrad": gemm_dims(m, k, n), "wgrad": gemm_dims(k, n, m)}   # dX = dY W^T, dW = X^T dY
    return [OpCost(f"{name}.{g}", op_class, 2.0 * m * k * n, float(e * (m * n + k * n + m * k)),
                   weight=name if weight else "", transa=g == "wgrad", **dims[g])
            for g in grads]


@dataclass(frozen=True)
class MainGrad:
    """The gradient buffer weight gradients accumulate into over a step's micro-batches
    (Megatron's ``main_grad``): ``bytes`` an element (4 fp32, 2 bf16), and whether the GEMM
    itself accumulates into it (``fused``: gradient-accumulation fusion) or a kernel of its
    own adds the GEMM's output in."""

    bytes: int
    fused: bool


def accumulated_wgrad(layer: LayerCost, main_grad: MainGrad, e: int) -> LayerCost:
    """``layer`` with each weight-gradient GEMM (``*.wgrad``, output ``dW = X^T dY``: the
    weight's ``m x n`` per group, as :func:`matmul_bwd` shapes it) accumulating into
    ``main_grad``, whose output is otherwise written once at the step's ``e`` bytes (2 for a
    GEMM in a precision of its own, FP8 or FP4, whose output is bf16):

    * fused (Transformer Engine's ``fuse_wgrad_accumulation``): the GEMM reads the buffer
      and writes the sum back (beta 1 on every micro-batch, the first included: the buffer
      is zeroed before the step), ``2 x bytes`` an output element instead of the write;
    * not fused: the GEMM writes its output, then Megatron's DDP hook adds it in
      (``param.main_grad.add_(param.grad)``): an elementwise kernel
      ``<gemm>.accumulate`` after it, reading both and writing the buffer, one FLOP an
      element."""
    def ops(op: OpCost) -> list[OpCost]:
        if op.op_class != "matmul" or not op.name.endswith(".wgrad"):
            return [op]
        written = 2 if op.precision else e
        elements = op.groups * op.m * op.n
        if main_grad.fused:
            return [replace(op, bytes_accessed=op.bytes_accessed
                            + elements * (2 * main_grad.bytes - written))]
        return [op, OpCost(f"{op.name}.accumulate", "elementwise", float(elements),
                           float(elements * (written + 2 * main_grad.bytes)),
                           launch=op.launch)]
    return replace(layer, backward=tuple(out for op in layer.backward for out in ops(op)))


def gemm_dims(m: float, n: float, k: float) -> dict:
    """The ``m, n, k`` fields of an OpCost (output rows, output columns, reduction)."""
    return {"m": int(round(m)), "n": int(round(n)), "k": int(round(k))}


def pointwise(name: str, op_class: str, elements: float, flops_per: float, tensors: float,
              e: int) -> OpCost:
    """An elementwise kernel over ``elements`` touching ``tensors`` full tensors in HBM."""
    return OpCost(name, op_class, float(flops_per * elements), float(e * tensors * elements))


def check_positive(**values: int) -> None:
    """Raise ConfigError naming the first of ``values`` that is not a positive integer."""
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"must be a positive integer, got {value!r}", field=key)
