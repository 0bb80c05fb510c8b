"""``training.elementwise: eager``: the kernels Llama's reference code runs op by op.

The simulator's block (:mod:`simulator.models.transformer`) counts one kernel per norm,
activation and rotary embedding: what fused implementations run (Megatron and Transformer
Engine, PyTorch's native ``layer_norm``, Triton RMSNorm kernels; ``elementwise: fused``,
the default). Llama's reference code, which torchtitan's model is (``torchtitan/models/
llama/model.py`` and ``norms.py`` at 9dec370, norm_type ``rmsnorm``) and which Hugging
Face's ``LlamaRMSNorm`` follows, writes them as separate PyTorch ops, each a kernel that
reads and writes HBM. Eager PyTorch runs (forward; ``n`` elements of a tensor, ``k`` bytes
per element of the input dtype, fp32 = 4):

* RMSNorm ``(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * weight``:
  cast up ``(k + 4) n``, ``pow`` ``8 n``, ``mean`` ``4 n``, ``+ eps`` and ``rsqrt`` on one
  value per token, ``x * r`` ``8 n``, cast down ``(4 + k) n``, ``* weight`` ``2 k n``
  (``36 n`` at bf16 against the fused kernel's ``4 n``); backward is autograd's formula of
  each op: the weight product and its gradient reduction, the cast, both products of
  ``x * r`` and the row sum, ``rsqrt``'s and ``mean``'s backward, ``pow``'s (``grad * 2 *
  x.pow(1)``: three kernels), the sum of the
  two gradients of ``x`` and the cast back (``92 n`` at bf16 against ``6 n``). The casts
  vanish when the input is fp32 already (autocast's residual stream). LayerNorm models
  keep PyTorch's native one-kernel ``layer_norm``.
* rotary (``apply_rotary_emb``): per Q and K, ``float()`` ``(e + 4) n``, the complex product
  with ``freqs_cis`` ``8 n`` (+ the table), ``type_as`` ``(4 + e) n``; backward the same
  three in reverse.
* SwiGLU ``silu(w1 x) * w3 x``: ``silu`` ``2 e n`` and the product ``3 e n``; backward the
  two products' gradients and ``silu``'s (``3 e n`` each).
* grouped-query attention: ``repeat_kv`` materialises K and V at the query heads' width
  for SDPA (read ``e n_kv``, write ``e n_q`` each), backward sums them back.
* separate projections (``wq wk wv``, ``w1 w3``): autograd adds their input gradients,
  ``3 e n`` per add (two for Q/K/V, one for gate/up); each is its own GEMM at its own
  shape (:mod:`simulator.models.projections`, applied by
  :func:`simulator.models.costs.layer_costs` after these kernels).

Hugging Face's BERT (``BertLayer``, its ``BertSelfAttention`` with separate ``query``,
``key`` and ``value`` Linears; ``training.elementwise: eager`` on a BERT,
:func:`bert_eager_block`) keeps PyTorch's native ``layer_norm`` and GELU, and runs what
separate biased ``nn.Linear`` modules run op by op:

* under autocast (fp32 parameters, the residual stream and the LayerNorm outputs in fp32),
  each Linear casts its own input: the fp32 hidden state is cast to 16 bits three times
  for Q, K and V (``(4 + e) n`` each, ``n`` its elements; the fused block's one cast plus
  two), each copy saved for its Linear's weight gradient; backward casts each input
  gradient back to fp32 (``(e + 4) n``) and autograd sums the three in fp32 (two adds,
  ``3 x 4 n`` each). Without autocast the inputs are not cast and the two sums run at
  ``e``;
* a Linear's bias gradient is ``grad.sum(0)``, a reduction kernel of its own after the
  weight gradient's GEMM (PyTorch's ``addmm`` backward; Megatron and Transformer Engine fuse
  it into the GEMM): ``e`` bytes an element of the output gradient read, 4 bytes a bias
  element written, one per Linear (Q, K, V, the attention output, both MLP matrices).

Pointwise pieces are ``elementwise`` and row reductions ``norm`` (on the H200 profile of
Hugging Face's eager Llama block, eager ``mul``/``copy_`` kernels stream at 60-80% of peak
bandwidth and ``mean``/``sum`` at 48-54%: about the two classes' efficiencies under the
fitted memory-bound factor, 60% and 50%); the
fused op's name, weight, parameters and saved bytes stay on the piece that produces the
same tensor (the last one), and the tensors autograd keeps besides (the fp32 input and
the pre-weight product of RMSNorm, ``silu``'s output, the expanded K and V) are added to
the block's saved activations. Under ``training.compile: true`` Inductor generates its own
kernels from this code (:func:`compiled_extras`): the decomposition is gone, the K/V copies
and the gradient sums stay (fused into their neighbours where Inductor can).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.compute.launch import COMPILED, PIECE
from simulator.models.ops import LayerCost, OpCost
from simulator.models.spec import ModelSpec

F32 = 4
EW = "elementwise"
# the attention kernel that reads the expanded K and V first (forward) and the backward one
# that leaves their gradients (flash, or the unfused scores / AV matmuls)
ATTENTION_FIRST = ("attn_core", "attn_scores")
ATTENTION_LAST = ("attn_core.bwd", "attn_scores.grad_k")


def _op(name: str, cls: str, flops: float, nbytes: float, saved: float = 0) -> OpCost:
    """A piece of an eager op (:mod:`simulator.compute.launch`: its launch costs are its
    fused op's)."""
    return OpCost(name, cls, float(flops), float(nbytes), saved_bytes=int(saved),
                  launch=PIECE)


def rmsnorm_forward(fused: OpCost, t: int, h: int, k: int) -> list[OpCost]:
    """The eager RMSNorm kernels of a fused ``norm`` op over ``t`` tokens of ``h`` (input
    ``k`` bytes per element; the weight product keeps the fused op's identity). Pointwise
    kernels are ``elementwise``, the row reduction a ``norm`` (a reduction streams as one)."""
    n, name, w = t * h, fused.name, fused.bytes_accessed - 2.0 * k * t * h   # weight bytes
    up = [] if k == F32 else [_op(f"{name}.float", EW, 0, (k + F32) * n, F32 * n)]
    down = [] if k == F32 else [_op(f"{name}.type_as", EW, 0, (F32 + k) * n)]
    saved_x = 0 if up else F32 * n       # x.float() is x: saved once, by the cast or here
    return [*up,
            _op(f"{name}.pow", EW, n, 2 * F32 * n, saved_x),
            _op(f"{name}.mean", "norm", n, F32 * (n + t)),
            _op(f"{name}.add_eps", EW, t, 2 * F32 * t),
            _op(f"{name}.rsqrt", EW, t, 2 * F32 * t, F32 * t),
            _op(f"{name}.mul", EW, n, F32 * (2 * n + t)),
            *down,
            replace(fused, op_class=EW, bytes_accessed=float(2 * k * n + w),
                    saved_bytes=fused.saved_bytes + k * n)]     # + its input (type_as)


def rmsnorm_backward(fused: OpCost, t: int, h: int, k: int) -> list[OpCost]:
    """Autograd's kernels for :func:`rmsnorm_forward`, in backward order; the weight's
    gradient reduction keeps the fused backward op's identity (its weight). ``pow``'s
    backward is ``grad * 2 * x.pow(1)``: three kernels (PyTorch's ``pow_backward``)."""
    n, name, w = t * h, fused.name, (fused.bytes_accessed - 3.0 * k * t * h) / 2
    base = name[:-len(".bwd")]
    cast = [] if k == F32 else [_op(f"{base}.type_as.bwd", EW, 0, (k + F32) * n)]
    back = [] if k == F32 else [_op(f"{base}.float.bwd", EW, 0, (F32 + k) * n)]
    return [_op(f"{base}.weight_grad_mul", EW, n, 3 * k * n),
            replace(fused, flops=float(n), bytes_accessed=float(k * n + w)),
            _op(f"{base}.mul_weight.bwd", EW, n, 2 * k * n + w),
            *cast,
            _op(f"{base}.mul.bwd_x", EW, n, F32 * (2 * n + t)),
            _op(f"{base}.mul.bwd_r", EW, n, 3 * F32 * n),
            _op(f"{base}.mul.bwd_r_sum", "norm", n, F32 * (n + t)),
            _op(f"{base}.rsqrt.bwd", EW, 3 * t, 3 * F32 * t),
            _op(f"{base}.mean.bwd", EW, n, F32 * (n + t)),
            _op(f"{base}.pow.bwd_x", EW, 0, 2 * F32 * n),
            _op(f"{base}.pow.bwd_scale", EW, n, 2 * F32 * n),
            _op(f"{base}.pow.bwd", EW, n, 3 * F32 * n),
            _op(f"{base}.grad_add", EW, n, 3 * F32 * n),
            *back]


def rotary_ops(fused: OpCost, q: int, kv: int, table: int, e: int,
               backward: bool) -> list[OpCost]:
    """torchtitan's complex-number rotary on ``q`` query and ``kv`` key elements (``table``
    bytes of ``freqs_cis`` read per product), forward or backward."""
    out = []
    for part, n in (("q", q), ("k", kv)):
        steps = [("float", 0, (e + F32) * n), ("mul", 3 * n, 2 * F32 * n + table),
                 ("type_as", 0, (F32 + e) * n)]
        for step, flops, nbytes in (reversed(steps) if backward else steps):
            suffix = ".bwd" if backward else ""
            out.append(_op(f"rotary.{part}.{step}{suffix}", fused.op_class, flops, nbytes))
    return out


def swiglu_forward(fused: OpCost, n: int, e: int) -> list[OpCost]:
    """``silu`` then the product; the product keeps the fused op's name and saved bytes,
    ``silu``'s output is saved besides (the product's backward reads it)."""
    return [_op(f"{fused.name}.silu", fused.op_class, 4 * n, 2 * e * n, e * n),
            replace(fused, flops=float(n), bytes_accessed=float(3 * e * n))]


def swiglu_backward(fused: OpCost, n: int, e: int) -> list[OpCost]:
    base = fused.name[:-len(".bwd")]
    return [_op(f"{base}.mul.bwd_silu", fused.op_class, n, 3 * e * n),
            _op(f"{base}.mul.bwd_up", fused.op_class, n, 3 * e * n),
            replace(fused, flops=float(4 * n), bytes_accessed=float(3 * e * n))]


def repeat_kv(kv: int, q: int, e: int, backward: bool) -> list[OpCost]:
    """K and V copied from ``kv`` to ``q`` elements (forward; saved for SDPA's backward in
    place of the unexpanded ones) or summed back (backward)."""
    if backward:
        return [_op(f"repeat_kv.{x}.bwd", "elementwise", q, e * (q + kv)) for x in "kv"]
    return [_op(f"repeat_kv.{x}", "elementwise", 0, e * (kv + q), e * (q - kv)) for x in "kv"]


def grad_sums(name: str, adds: int, n: int, e: int) -> list[OpCost]:
    """Autograd's in-place adds of the input gradients of ``adds + 1`` projections."""
    return [_op(f"{name}.grad_add{i}", "elementwise", n, 3 * e * n) for i in range(adds)]


class Shapes:
    """The element counts a block's eager kernels work on (one rank: ``tp``, ``sp``,
    ``cp`` as :func:`simulator.models.transformer.block_cost`)."""

    def __init__(self, model: ModelSpec, b: int, s: int, tp: int, sp: bool, cp: int):
        s_local = s // cp
        self.t = b * s_local                                     # tokens of the rank
        self.tn = self.t // tp if sp else self.t                 # of norms and residuals
        self.q = self.t * model.q_width // tp                    # Q (and expanded K, V)
        self.kv = self.t * model.kv_heads * model.head_dim // tp
        self.f = self.t * model.ffn_hidden // tp                 # the MLP's inner tensor
        self.table = 4 * s_local * model.head_dim                # complex64 s x hd/2
        self.gqa = model.kv_heads < model.heads


def eager_block(layer: LayerCost, model: ModelSpec, b: int, s: int, e: int, k: int,
                tp: int = 1, sp: bool = False, cp: int = 1,
                fused_norm: bool = False) -> LayerCost:
    """``layer`` (a transformer block) with the reference code's eager kernels; with
    ``fused_norm`` its RMSNorm is one kernel (torchtitan's ``norm_type = "fused_rmsnorm"``,
    a Triton kernel) and the rest op by op."""
    sh = Shapes(model, b, s, tp, sp, cp)
    h, rms = model.hidden, model.norm == "rmsnorm" and not fused_norm

    def pieces(op, backward: bool) -> list:
        """``op`` as the reference code's op-by-op kernels (itself where it is not one)."""
        grad = ".bwd" if backward else ""
        if rms and op.op_class == "norm":
            return (rmsnorm_backward if backward else rmsnorm_forward)(op, sh.tn, h, k)
        if op.name == "rotary" + grad:
            return rotary_ops(op, sh.q, sh.kv, sh.table, e, backward=backward)
        if op.name == "swiglu" + grad:
            return (swiglu_backward if backward else swiglu_forward)(op, sh.f, e)
        return [op]

    fwd, bwd = [], []
    for op in layer.forward:
        if sh.gqa and op.name in ATTENTION_FIRST:
            fwd += repeat_kv(sh.kv, sh.q, e, backward=False)
        fwd += pieces(op, backward=False)
    for op in layer.backward:
        bwd += pieces(op, backward=True)
        if sh.gqa and op.name in ATTENTION_LAST:
            bwd += repeat_kv(sh.kv, sh.q, e, backward=True)
        if op.name == "qkv_proj.dgrad":
            bwd += grad_sums("qkv_proj", 2, sh.t * h, e)
        elif op.name == "mlp_gate_up.dgrad":
            bwd += grad_sums("mlp_gate_up", 1, sh.t * h, e)
    extra = sum(o.saved_bytes for o in fwd) - sum(o.saved_bytes for o in layer.forward)
    return replace(layer, forward=tuple(fwd), backward=tuple(bwd),
                   activation_bytes=layer.activation_bytes + extra)


def _bias_grads(op: OpCost, widths: dict[str, tuple[int, ...]], t: int,
                e: int) -> list[OpCost]:
    """The bias-gradient reductions after a biased Linear's weight gradient ``op`` (one per
    output width of ``widths[its Linear]``: Q, K and V are three Linears)."""
    base = op.name[:-len(".wgrad")]
    return [_op(f"{base}.bias_grad{i if len(widths[base]) > 1 else ''}", "norm", t * w,
                e * t * w + F32 * w) for i, w in enumerate(widths[base])]


def bert_eager_block(layer: LayerCost, model: ModelSpec, b: int, s: int, e: int, k: int,
                     tp: int = 1, sp: bool = False, cp: int = 1) -> LayerCost:
    """``layer`` (a BERT block) as Hugging Face's ``BertLayer`` runs it op by op (module
    docstring): the extra autocast casts and fp32 gradient sums of its separate Q, K and V
    Linears, and a reduction per biased Linear's bias gradient; the rest is the fused
    block's (native ``layer_norm``, one GELU kernel)."""
    sh = Shapes(model, b, s, tp, sp, cp)
    h, n = model.hidden, sh.t * model.hidden
    kv = model.kv_heads * model.head_dim // tp
    widths = {"qkv_proj": (model.q_width // tp, kv, kv), "attn_out": (h,),
              "mlp_up": (model.ffn_hidden // tp,), "mlp_down": (h,)} if model.bias else {}
    casting = k != e                          # autocast: fp32 inputs cast for each Linear
    cast_n = sh.tn * h                        # the norm's output, as the fused block casts it
    fwd, bwd = [], []
    for op in layer.forward:
        fwd.append(op)
        if casting and op.name == "cast.norm1":   # K's and V's own copies, each saved
            fwd += [replace(op, name=f"qkv_proj.cast_{x}", saved_bytes=e * cast_n)
                    for x in "kv"]
    for op in layer.backward:
        bwd.append(op)
        if op.name in (f"{x}.wgrad" for x in widths):
            bwd += _bias_grads(op, widths, sh.t, e)
        if op.name == "qkv_proj.dgrad":
            if casting:
                bwd += [_op(f"qkv_proj.cast_{x}.bwd", "elementwise", 0, (e + k) * cast_n)
                        for x in "kv"]
            bwd += grad_sums("qkv_proj", 2, n, k)
    extra = sum(o.saved_bytes for o in fwd) - sum(o.saved_bytes for o in layer.forward)
    return replace(layer, forward=tuple(fwd), backward=tuple(bwd),
                   activation_bytes=layer.activation_bytes + extra)


def eager_head(layer: LayerCost, model: ModelSpec, b: int, s: int, k: int, tp: int = 1,
               sp: bool = False, cp: int = 1) -> LayerCost:
    """The head with the reference code's eager final RMSNorm."""
    if model.norm != "rmsnorm":
        return layer
    tn = Shapes(model, b, s, tp, sp, cp).tn
    fwd = [x for op in layer.forward for x in
           (rmsnorm_forward(op, tn, model.hidden, k) if op.op_class == "norm" else [op])]
    bwd = [x for op in layer.backward for x in
           (rmsnorm_backward(op, tn, model.hidden, k) if op.op_class == "norm" else [op])]
    extra = sum(o.saved_bytes for o in fwd) - sum(o.saved_bytes for o in layer.forward)
    return replace(layer, forward=tuple(fwd), backward=tuple(bwd),
                   activation_bytes=layer.activation_bytes + extra)


def compiled_extras(layer: LayerCost, model: ModelSpec, b: int, s: int, e: int,
                    tp: int = 1, sp: bool = False, cp: int = 1) -> LayerCost:
    """A compiled block (:func:`simulator.models.fusion.compiled_block`) of the reference
    code: what Inductor cannot fuse away. SDPA is an external kernel, so ``repeat_kv``'s
    expanded K and V are still written (K by the rotary kernel, which then writes the
    query heads' width; V by a copy), and summed back in backward (K in the rotary
    backward, V by a reduction); AOTAutograd's partitioner saves the unexpanded K and V
    (the copies are cheap to redo), so the saved activations stay the fused block's. The
    projections' input gradients are summed in the norm backward that follows them (one
    more read per extra projection: Q, K and V; gate and up where the MLP is SwiGLU)."""
    sh = Shapes(model, b, s, tp, sp, cp)
    grow = e * (sh.q - sh.kv)                       # expanded K written instead of K
    n = sh.t * model.hidden
    sums = {"norm1.bwd": 2 * e * n, **({"norm2.bwd": e * n} if model.mlp == "swiglu" else {})}
    fwd, bwd = [], []
    for op in layer.forward:
        if sh.gqa and op.name in ATTENTION_FIRST:
            fwd.append(replace(repeat_kv(sh.kv, sh.q, e, backward=False)[1],
                               saved_bytes=0, launch=COMPILED))         # V
        fwd.append(replace(op, bytes_accessed=op.bytes_accessed + grow)
                   if op.name == "rotary" and sh.gqa else op)
    for op in layer.backward:
        add = sum(sums.get(part, 0) for part in op.name.split("+"))
        bwd.append(replace(op, bytes_accessed=op.bytes_accessed + add
                           + (grow if op.name == "rotary.bwd" and sh.gqa else 0)))
        if sh.gqa and op.name in ATTENTION_LAST:
            bwd.append(replace(repeat_kv(sh.kv, sh.q, e, backward=True)[1],
                               launch=COMPILED))                        # V
    return replace(layer, forward=tuple(fwd), backward=tuple(bwd))
