"""Fine-tuning: which weights train, LoRA adapters, a 4-bit (NF4) base, frozen layers.

One internal description, :class:`Finetune`, whatever spelling reached it
(``training.finetune``, Megatron/NeMo's ``peft: lora``, Hugging Face PEFT's ``LoraConfig``
fields: :mod:`simulator.finetune_spellings`), applied to a model's per-layer costs by
:func:`finetune_layers` as the last step of :func:`simulator.models.costs.layer_costs`, so
every strategy generator prices the same work the same way.

* ``mode: full`` trains every weight except the frozen ones (``freeze_embedding``,
  ``freeze_head``, ``freeze_layers``: the first k blocks). ``lora`` freezes the whole base
  and trains adapters on ``targets``; ``qlora`` does the same on a base whose block Linear
  weights are stored in 4-bit NF4 (Dettmers et al. 2023, arXiv 2305.14314).
* A frozen Linear's backward computes only the input gradient (its ``.wgrad`` GEMM is
  dropped: half of the Linear's backward GEMM FLOPs). A layer that no trainable weight
  precedes (a frozen embedding, the frozen first blocks when the embedding is frozen too)
  has no backward at all and saves no activations, as autograd builds no graph there.
* A LoRA adapter on a Linear of input width ``k`` and output width ``n`` (its GEMM's shape
  on this rank, so an adapter shards as its base does under tensor parallelism) is
  ``A [k, r]`` then ``B [r, n]``: forward ``2 t k r + 2 t r n`` FLOPs on ``t`` tokens, plus
  the scaled add of its output into the base output (``t n`` elements, read 2 write 1);
  backward the scale of the output gradient (``t n``, read 1 write 1), the input and weight
  gradients of both (``2 x`` the forward GEMM FLOPs) and the add of its input gradient into
  the base's (``t k``), before the base's input-gradient GEMM (autograd's order). With ``dropout > 0`` a dropout kernel
  on the adapter's input (:func:`~simulator.models.transformer._dropout`'s bytes) whose
  output and 1-byte mask are saved; ``A``'s output (``t r``) is saved too. An adapter on
  a part of a fused GEMM (``q`` of the fused QKV projection, ``gate`` of the fused gate/up)
  has ``n`` that part's columns (q: ``h / (h + 2 kv)`` of them, k and v ``kv / (h + 2 kv)``
  each, gate and up half).
* Parameters: a layer's ``params`` are its trainable ones (gradients, optimizer state and
  gradient reductions follow them, as DDP, FSDP2 and Megatron reduce only parameters that
  require gradients); ``frozen_params`` the rest, held at ``frozen_bytes`` (the training's
  16-bit element size; NF4 block weights at :data:`NF4_BYTES_PER_PARAM`), sharded and
  all-gathered by FSDP/ZeRO-3 like any weight, never reduced.
* QLoRA's dequantisation: before each frozen NF4 GEMM, forward and input-gradient alike, a
  memory-bound kernel reads the 4-bit weight and its constants and writes it in 16 bits
  (bitsandbytes ``dequantize_4bit``): ``NF4_BYTES_PER_PARAM + e`` bytes and
  :data:`DEQUANT_FLOPS` per parameter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.errors import ConfigError
from simulator.models.ops import LayerCost, OpCost, gemm_dims
from simulator.models.spec import ModelSpec

MODES = ("full", "lora", "qlora")
# how a LoRA base is stored: the step's 16-bit type, or FP8 (Transformer Engine's
# fp8_model_init, NeMo's fp8_params: the frozen block GEMM weights kept in FP8 only, for an
# FP8 step); a QLoRA base is NF4
BASE_PRECISIONS = ("bf16", "fp8")
# Adapter targets, internal names: the fused projections as Megatron builds them ("qkv",
# "gate_up"), their parts as Hugging Face models have them, and the rest.
TARGETS = ("qkv", "q", "k", "v", "o", "gate_up", "gate", "up", "down")
# target -> (the GEMM op it adapts, which part of its output columns)
_TARGET_OP = {"qkv": ("qkv_proj", "all"), "q": ("qkv_proj", "q"), "k": ("qkv_proj", "kv"),
              "v": ("qkv_proj", "kv"), "o": ("attn_out", "all"),
              "gate_up": ("mlp_gate_up", "all"), "gate": ("mlp_gate_up", "half"),
              "up": ("mlp_gate_up", "half"), "down": ("mlp_down", "all")}
# NF4 with double quantisation (QLoRA, section 2): 4 bits per weight, an 8-bit absmax per
# 64 weights and an fp32 constant per 256 of those: 4 + 8/64 + 32/(64*256) bits.
NF4_BITS = 4.0
NF4_BLOCK, NF4_DQ_BLOCK = 64, 256
NF4_BYTES_PER_PARAM = (NF4_BITS + 8.0 / NF4_BLOCK + 32.0 / (NF4_BLOCK * NF4_DQ_BLOCK)) / 8.0
DEQUANT_FLOPS = 2.0          # per weight: code-book lookup and scale
ADD_TENSORS = 3              # the adapter's add into the base output: read 2, write 1
# A block's saved tensors that only a GEMM's weight gradient reads (the op producing it ->
# the GEMMs reading it): autograd (and Transformer Engine) keeps a Linear's input only when
# its weight requires a gradient, so a frozen GEMM's input is not saved unless an adapter
# without dropout reads it (with dropout the adapter keeps its dropped-out copy instead).
# The norms' backward reads their input (the residual), the activation's its input.
_WGRAD_ONLY = {"norm1": ("qkv_proj",), "norm2": ("mlp_gate_up", "mlp_up"),
               "swiglu": ("mlp_down",), "gelu": ("mlp_down",)}


@dataclass(frozen=True)
class Finetune:
    """What trains (see the module doc). ``targets`` are internal names (:data:`TARGETS`),
    sorted; ``alpha`` scales the adapter's output (``alpha / rank``), a multiply folded
    into the add, so it changes no cost."""

    mode: str = "full"
    rank: int = 0
    alpha: float = 0.0
    targets: tuple[str, ...] = ()
    dropout: float = 0.0
    freeze_embedding: bool = False
    freeze_head: bool = False
    freeze_layers: int = 0
    base_precision: str = "bf16"

    def __post_init__(self):
        if self.mode not in MODES:
            raise ConfigError(f"must be one of {', '.join(MODES)}, got {self.mode!r}",
                              field="finetune.mode")
        adapters = self.mode != "full"
        if adapters and self.rank <= 0:
            raise ConfigError(f"{self.mode} needs a rank > 0, got {self.rank}",
                              field="finetune.rank")
        if adapters and not self.targets:
            raise ConfigError(f"{self.mode} needs target modules", field="finetune.target_modules")
        if not adapters and (self.rank or self.targets):
            raise ConfigError("full fine-tuning trains the weights themselves: no rank or "
                              "target_modules (use mode: lora)", field="finetune.mode")
        bad = [t for t in self.targets if t not in TARGETS]
        if bad:
            raise ConfigError(f"unknown target {bad[0]!r}; valid: {', '.join(TARGETS)}",
                              field="finetune.target_modules")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"must be in [0, 1), got {self.dropout}", field="finetune.dropout")
        if self.base_precision not in BASE_PRECISIONS:
            raise ConfigError(f"must be one of {', '.join(BASE_PRECISIONS)}, got "
                              f"{self.base_precision!r}", field="finetune.base_precision")
        if self.base_precision != "bf16" and self.mode != "lora":
            raise ConfigError(f"an FP8 base is a LoRA setting ({self.mode}: "
                              f"{'NF4 base' if self.mode == 'qlora' else 'weights train'})",
                              field="finetune.base_precision")
        if self.freeze_layers < 0:
            raise ConfigError(f"must be >= 0, got {self.freeze_layers}",
                              field="finetune.freeze_layers")
        if adapters and self.freeze_layers:
            raise ConfigError(f"{self.mode} freezes every base weight already and adapts every "
                              f"block; freeze_layers is a full fine-tuning setting",
                              field="finetune.freeze_layers")

    def section(self) -> dict:
        """``training.finetune``'s spelling of this (what a strategy's own spelling becomes
        when ``compare`` or ``capacity`` switches the strategy)."""
        out = {"mode": self.mode, "dropout": self.dropout,
               "freeze_embedding": self.freeze_embedding, "freeze_head": self.freeze_head,
               "freeze_layers": self.freeze_layers, "base_precision": self.base_precision}
        if self.adapters:
            out.update(rank=self.rank, alpha=self.alpha, target_modules=list(self.targets))
        return out

    @property
    def adapters(self) -> bool:
        return self.mode != "full"

    @property
    def trains_all(self) -> bool:
        """Plain training: nothing frozen, no adapter (the costs are left as they are)."""
        return (self.mode == "full" and not self.freeze_embedding and not self.freeze_head
                and not self.freeze_layers)


def check_model(model: ModelSpec, ft: Finetune) -> None:
    """ConfigError where ``model`` cannot take ``ft``: adapters and frozen layers are
    modelled on dense transformers (the GEMMs they name), and no more frozen blocks than
    it has; adapters on a fused projection and on a part of it at once are refused."""
    if ft.trains_all:
        return
    if not model.is_transformer or model.is_moe:
        raise ConfigError(f"{model.name}: fine-tuning (frozen weights, adapters) is modelled "
                          f"on dense transformers only", field="finetune.mode")
    if ft.freeze_layers > model.layers:
        raise ConfigError(f"{model.name} has {model.layers} blocks, cannot freeze "
                          f"{ft.freeze_layers}", field="finetune.freeze_layers")
    fused = {"qkv": ("q", "k", "v"), "gate_up": ("gate", "up")}
    for whole, parts in fused.items():
        if whole in ft.targets and any(p in ft.targets for p in parts):
            raise ConfigError(f"{whole} and its parts both adapted", field="finetune.target_modules")
    if model.mlp != "swiglu" and any(t in ft.targets for t in ("gate_up", "gate")):
        raise ConfigError(f"{model.name} has no gate projection (a {model.mlp} MLP): "
                          f"adapt down or the attention", field="finetune.target_modules")
    for target in ft.targets if ft.adapters else ():
        d_in, d_out = _target_dims(model, target)
        if ft.rank > min(d_in, d_out):
            raise ConfigError(f"rank {ft.rank} exceeds {model.name}'s {target} weight "
                              f"({d_in} x {d_out}): a LoRA update of it has rank at most "
                              f"{min(d_in, d_out)}", field="finetune.rank")


def _target_dims(model: ModelSpec, target: str) -> tuple[int, int]:
    """(in, out) features of the whole (unsharded) weight a target adapts."""
    q, kv, ffn = model.heads * model.head_dim, model.kv_heads * model.head_dim, model.ffn_hidden
    gated = 2 if model.mlp == "swiglu" else 1
    return {"qkv": (model.hidden, q + 2 * kv), "q": (model.hidden, q), "k": (model.hidden, kv),
            "v": (model.hidden, kv), "o": (q, model.hidden),
            "gate_up": (model.hidden, gated * ffn), "gate": (model.hidden, ffn),
            "up": (model.hidden, ffn), "down": (ffn, model.hidden)}[target]


# ------------------------------------------------------------------ the transform
def finetune_layers(layers: list[LayerCost], model: ModelSpec, ft: Finetune | None, e: int,
                    precision: str) -> list[LayerCost]:
    """``layers`` (``embed``, ``block.i``..., ``head``) as ``ft`` trains them, at ``e``
    bytes per element; adapters run at ``precision`` (a bf16 step's FP8 GEMMs are the
    base's: Transformer Engine runs the frozen Linear in FP8, the adapter in bf16)."""
    if ft is None or ft.trains_all:
        return layers
    check_model(model, ft)
    out, grad_below = [], False
    done: dict[tuple, LayerCost] = {}   # identical blocks (one ops tuple) transformed once
    for layer in layers:
        frozen = _frozen(layer, ft)
        adapted = ft.adapters and layer.kind == "transformer_block"
        key = (id(layer.forward), id(layer.backward), adapted, frozen)
        if key in done:
            layer = replace(done[key], name=layer.name)
        elif adapted:
            layer = done[key] = _with_adapters(layer, model, ft, e, precision)
        elif frozen:
            layer = done[key] = _freeze(layer, e)
        grad_below = grad_below or layer.params > 0
        if frozen and not grad_below:
            layer = replace(layer, backward=(), activation_bytes=0)
        out.append(layer)
    return out


def _frozen(layer: LayerCost, ft: Finetune) -> bool:
    """Whether the base weights of ``layer`` are frozen."""
    if ft.adapters:
        return True
    if layer.kind == "embedding":
        return ft.freeze_embedding
    if layer.kind == "head":
        return ft.freeze_head
    return _block_index(layer) < ft.freeze_layers


def _block_index(layer: LayerCost) -> int:
    return int(layer.name.rsplit(".", 1)[1]) if layer.name.startswith("block.") else 1 << 30


def _freeze(layer: LayerCost, e: int, quantized: bool = False,
            read: frozenset = frozenset(), fp8: bool = False) -> LayerCost:
    """``layer`` with every weight frozen: no weight-gradient GEMMs, ``params`` 0, its
    parameters ``frozen_params`` at ``e`` bytes (block GEMM weights at NF4's when
    ``quantized``), without the saved inputs only their weight gradients read
    (:data:`_WGRAD_ONLY`; kept for the GEMMs in ``read``, which adapters read); a frozen
    embedding has no backward at all (its only gradient is the table's). ``fp8``: the
    block GEMM weights kept in FP8 (1 byte each; the GEMMs marked ``fp8_weight``)."""
    gemm = {op.weight: op.params for op in layer.forward if op.op_class == "matmul" and op.weight}
    quant = sum(gemm.values()) if quantized or fp8 else 0
    frozen = layer.params + layer.frozen_params
    forward, unsaved = [], 0
    for op in layer.forward:
        if op.params:
            op = replace(op, params=0)
        if fp8 and op.name in gemm:
            op = replace(op, fp8_weight=True)
        readers = _WGRAD_ONLY.get(op.name, ())
        if layer.kind == "transformer_block" and op.saved_bytes and readers \
                and not read.intersection(readers):
            unsaved += op.saved_bytes
            op = replace(op, saved_bytes=0)
        forward.append(op)
    backward = () if layer.kind == "embedding" else tuple(
        replace(op, fp8_weight=True) if fp8 and op.weight in gemm else op
        for op in layer.backward if not _weight_gradient(op, layer))
    per = 1.0 if fp8 else NF4_BYTES_PER_PARAM
    nbytes = round(quant * per) + (frozen - quant) * e
    return replace(layer, params=0, frozen_params=frozen, frozen_bytes=nbytes,
                   forward=tuple(forward), backward=backward,
                   activation_bytes=layer.activation_bytes - unsaved)


def _weight_gradient(op: OpCost, layer: LayerCost) -> bool:
    """Whether ``op`` is a weight-gradient GEMM (dropped when the layer is frozen): a block's
    names its weight; the head's GEMMs name none (the head's parameters are the layer's,
    ``head_cost``), so there a ``.wgrad`` GEMM is the LM head's (or BERT's MLM transform's)."""
    if not op.name.endswith(".wgrad"):
        return False
    return bool(op.weight) or (layer.kind == "head" and op.op_class == "matmul")


def _with_adapters(layer: LayerCost, model: ModelSpec, ft: Finetune, e: int,
                   precision: str) -> LayerCost:
    """A block with its base frozen (4-bit under ``qlora``) and LoRA adapters on the
    targeted GEMMs (see the module doc)."""
    read = frozenset(_target_op(model, t)[0] for t in ft.targets) if ft.dropout == 0 \
        else frozenset()
    base = _freeze(layer, e, quantized=ft.mode == "qlora", read=read,
                   fp8=ft.base_precision == "fp8")
    fwd_by_op: dict[str, list[OpCost]] = {}
    bwd_by_op: dict[str, list[OpCost]] = {}
    params = saved = 0
    for target in ft.targets:
        op_name, part = _target_op(model, target)
        gemm = next((op for op in base.forward if op.name == op_name and op.shape), None)
        if gemm is None:
            raise ConfigError(f"{model.name}'s blocks have no {op_name} GEMM to adapt "
                              f"({target})", field="finetune.target_modules")
        t, n_all, k = gemm.shape
        n = _columns(model, part, n_all)
        a = Adapter(f"{op_name}.lora_{target}", t, k, n, ft.rank, e, precision, ft.dropout)
        fwd_by_op.setdefault(op_name, []).extend(a.forward())
        bwd_by_op.setdefault(op_name + ".dgrad", []).extend(a.backward())
        params += a.params
        saved += a.saved_bytes
    forward = _interleave(base.forward, fwd_by_op, ft, e, after=True)
    backward = _interleave(base.backward, bwd_by_op, ft, e, after=False)
    return replace(base, params=params, forward=forward, backward=backward,
                   activation_bytes=base.activation_bytes + saved)


def _target_op(model: ModelSpec, target: str) -> tuple[str, str]:
    """The GEMM a target adapts and which of its output columns (:data:`_TARGET_OP`)."""
    if target == "up" and model.mlp != "swiglu":      # a GELU MLP's one up projection
        return "mlp_up", "all"
    return _TARGET_OP[target]


def _columns(model: ModelSpec, part: str, n: int) -> int:
    """Output columns of a part of a fused GEMM with ``n`` columns on this rank."""
    if part == "all":
        return n
    if part == "half":
        return n // 2
    q, kv = model.q_width, model.kv_heads * model.head_dim
    return n * (q if part == "q" else kv) // (q + 2 * kv)


def _interleave(ops, extra: dict[str, list[OpCost]], ft: Finetune, e: int,
                after: bool) -> tuple[OpCost, ...]:
    """``ops`` with each GEMM's adapter ops after it (forward) or, backward, before its
    input-gradient GEMM (autograd runs the later-created adapter branch first), and QLoRA's
    dequantisation right before each frozen block GEMM."""
    out: list[OpCost] = []
    for op in ops:
        if not after:
            out.extend(extra.get(op.name, ()))
        if ft.mode == "qlora" and op.op_class == "matmul" and op.weight and op.shape:
            out.append(dequant(op, e))
        out.append(op)
        if after:
            out.extend(extra.get(op.name, ()))
    return tuple(out)


def dequant(gemm: OpCost, e: int) -> OpCost:
    """bitsandbytes' ``dequantize_4bit`` of ``gemm``'s ``k x n`` weight (forward) or its
    input-gradient GEMM's (the same weight): reads NF4, writes ``e`` bytes per weight."""
    _, n, k = gemm.shape           # forward: w [k, n]; dgrad: dX = dY w^T, k and n swapped
    weights = n * k
    return OpCost(f"dequant_nf4.{gemm.name}", "elementwise", DEQUANT_FLOPS * weights,
                  (NF4_BYTES_PER_PARAM + e) * weights, launch=gemm.launch)


@dataclass(frozen=True)
class Adapter:
    """One LoRA adapter ``B A`` on ``t`` tokens of a GEMM with input width ``k`` and
    ``n`` adapted output columns, rank ``r``, at ``e`` bytes per element."""

    name: str
    t: int
    k: int
    n: int
    r: int
    e: int
    precision: str
    dropout: float

    @property
    def params(self) -> int:
        return self.k * self.r + self.r * self.n

    @property
    def saved_bytes(self) -> int:
        """What backward keeps: ``A``'s output, and under dropout its input and mask."""
        t, k, r, e = self.t, self.k, self.r, self.e
        return e * t * r + ((e + 1) * t * k if self.dropout > 0 else 0)

    def _gemm(self, suffix: str, m: int, k: int, n: int, weight: str, params: int = 0) -> OpCost:
        """A GEMM ``C[m, n] = A[m, k] B[k, n]`` of the adapter (a weight gradient's A a
        transposed view)."""
        e = self.e
        return OpCost(f"{self.name}.{suffix}", "matmul", 2.0 * m * k * n,
                      float(e * (m * k + k * n + m * n)), weight=weight, params=params,
                      precision=self.precision, transa=suffix.endswith("wgrad"),
                      **gemm_dims(m, n, k))

    def _pointwise(self, suffix: str, elements: int, tensors: float) -> OpCost:
        return OpCost(f"{self.name}.{suffix}", "elementwise", float(elements),
                      float(tensors * elements))

    def forward(self) -> list[OpCost]:
        t, k, n, r, e = self.t, self.k, self.n, self.r, self.e
        a, b = f"{self.name}.a", f"{self.name}.b"
        drop = [self._pointwise("dropout", t * k, 2 * e + 1)] if self.dropout > 0 else []
        return [*drop, self._gemm("a", t, k, r, a, k * r), self._gemm("b", t, r, n, b, r * n),
                self._pointwise("add", t * n, ADD_TENSORS * e)]

    def backward(self) -> list[OpCost]:
        """The scale on dY (read, write), dB = (x A)^T dY, d(xA) = dY B^T, dA = x^T d(xA),
        dx += d(xA) A^T (the accumulation into the base's input gradient: read 2, write 1)."""
        t, k, n, r, e = self.t, self.k, self.n, self.r, self.e
        a, b = f"{self.name}.a", f"{self.name}.b"
        drop = [self._pointwise("dropout.bwd", t * k, 2 * e + 1)] if self.dropout > 0 else []
        return [self._pointwise("scale.bwd", t * n, 2 * e),
                self._gemm("b.dgrad", t, n, r, b), self._gemm("b.wgrad", r, t, n, b),
                self._gemm("a.dgrad", t, r, k, a), self._gemm("a.wgrad", k, t, r, a),
                *drop, self._pointwise("add.bwd", t * k, ADD_TENSORS * e)]
