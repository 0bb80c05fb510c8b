"""Per-layer costs of a training step: FLOPs, HBM bytes, parameters and saved activations.

Conventions (all counts for the whole micro-batch of ``batch`` samples):

* A matmul of ``(m, k) x (k, n)`` costs ``2 m k n`` FLOPs and reads/writes its input,
  weight and output once: ``e (m k + k n + m n)`` bytes, ``e`` the element size of the
  precision. Bias adds are folded into the matmul and not counted.
* Attention scores ``QK^T`` and ``AV`` cost ``2 b s^2 h`` FLOPs each: the full ``s^2``
  square. A causal model (GPT, Llama) under flash attention counts only the unmasked
  ``(s + 1) / (2 s)`` of it, as FlashAttention skips the masked tiles; eager attention
  computes the whole square and masks it. MFU keeps the usual ``12 L h s^2`` accounting
  (:func:`model_flops_per_sample`). Grouped-query attention shrinks K/V traffic, not FLOPs.
* Flash attention changes bytes, not forward FLOPs: one fused ``attn_core`` kernel reads
  Q, K, V and writes O (no ``b a s^2`` score matrix in HBM); without it ``attn_scores``,
  ``softmax`` and ``attn_av`` read and write the score matrix.
* Backward: each matmul runs twice (input gradient and weight gradient), so 2x its
  forward FLOPs; the input gradient of the first layer's input (embedding lookup, image)
  is skipped. Attention backward is 2x its forward matmuls; with flash attention it also
  recomputes ``QK^T`` and the softmax, giving 2.5x the forward attention matmul FLOPs.
  Elementwise ops cost about their forward FLOPs backward, norms twice.
* Activations: per transformer block ``s b h (34 + 5 a s / h)`` bytes for 16-bit
  precision with dropout (Korthikanti et al. 2022, arXiv 2205.05198, eq. 1), ``s b h (32 +
  2 a s / h)`` without (no masks, no dropped-out probabilities), without the ``a s / h``
  terms under flash attention (its ``b a s`` log-sum-exp is ignored), generalised to GQA
  and SwiGLU; tensors scale by ``e / 2``, 1-byte masks do not.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.choices import ELEMENTWISE
from simulator.errors import ConfigError
from simulator.models.moe import block_costs, inactive_params
from simulator.models.ops import LayerCost, check_positive
from simulator.models.spec import ModelSpec
from simulator.models.eager import bert_eager_block, compiled_extras, eager_block, eager_head
from simulator.models.finetune import check_model as check_finetune, finetune_layers
from simulator.models.packing import packed_layers
from simulator.models.fp8 import fp8_layer
from simulator.models.projections import separate_projections
from simulator.models.fp8_store import fp8_stored
from simulator.models.fusion import compiled_block
from simulator.models.mla import check_mla
from simulator.models.mtp import mtp_costs, mtp_depth
from simulator.models.transformer import embed_cost, head_cost
from simulator.precision import FP8, FP32, compute_precision, precision_bytes

# ------------------------------------------------------------------ public API
def layer_costs(model: ModelSpec, batch: int, seq_len: int, precision: str,
                flash_attention: bool = True, autocast: bool = False,
                compile: bool = False, tp: int = 1, sp: bool = False,
                cp: int = 1, fp8_recipe: str = "tensorwise",
                elementwise: str = "fused", fp8_weight_reuse: int = 1,
                dp_fp8_weights: bool = False) -> list[LayerCost]:
    """Per-layer costs of one training step on a micro-batch, in execution order.

    Parameters
    ----------
    model : ModelSpec
    batch : int
        Samples (sequences or images) in the micro-batch.
    seq_len : int
        Tokens per sequence (ignored for ResNets).
    precision : str
        ``"fp32"``, ``"tf32"``, ``"bf16"`` or ``"fp16"``: sets bytes per element;
        ``"fp8"``: bf16 with the blocks' Linear GEMMs in FP8 (:mod:`simulator.models.fp8`).
    flash_attention : bool
        Fused attention without the score matrix in HBM (transformers only).
    autocast : bool
        16-bit compute on fp32 weights (torch.autocast, Keras ``mixed_float16``): norms,
        softmax, loss and the residual stream stay fp32, with cast kernels in between
        (transformers; :mod:`simulator.models.transformer`). No effect at fp32/tf32.
    compile : bool
        torch.compile's fusions of neighbouring elementwise and norm kernels in each block
        (:mod:`simulator.models.fusion`; transformers).
    tp, sp, cp : int, bool, int
        The costs on one tensor-parallel rank of ``tp`` (``sp``: sequence parallel) and
        one context-parallel rank of ``cp`` (transformers; :mod:`~simulator.models.transformer`).
    fp8_recipe : str
        ``"tensorwise"`` (torchao, dynamic scaling), ``"delayed"`` or ``"current"``
        (Transformer Engine) or ``"mxfp8"``: the cast kernels of an FP8 step
        (:mod:`simulator.models.fp8`).
    elementwise : str
        ``"fused"``: one kernel per norm, activation and rotary (the default); ``"eager"``:
        Llama's reference code op by op, a GEMM per Linear (:mod:`simulator.models.eager`,
        :mod:`simulator.models.projections`; under ``compile``,
        what Inductor leaves of it); ``"eager_fused_norm"``: the same with one-kernel
        norms. Transformers only.
    fp8_weight_reuse : int
        Micro-batches sharing one FP8 cast of each weight (Transformer Engine's weight
        cache under Megatron, :func:`simulator.models.fp8.fp8_layer`).
    dp_fp8_weights : bool
        The data-parallel sharding gathers the blocks' FP8 GEMM weights in FP8 (torchao's
        FSDP float8 all-gather, or Megatron's FP8 parameters): their forward casts are the
        activations' only and each block is marked ``fp8_gathered``
        (:func:`simulator.models.fp8.fp8_layer`).

    Returns
    -------
    list of LayerCost
        ``embed``, ``block.0`` ... ``block.{L-1}``, ``head`` for transformers (with
        multi-token prediction its ``mtp.*`` layers before the head, :mod:`.mtp`);
        ``stem``, ``layer1.0`` ... ``layer4.2``, ``head`` for ResNets.
    """
    if precision == FP8:
        layers = layer_costs(model, batch, seq_len, compute_precision(precision),
                             flash_attention, autocast, compile, tp, sp, cp,
                             elementwise=elementwise)
        return [fp8_layer(layer, fp8_recipe, fp8_weight_reuse, model.fp8_any_layout,
                          dp_fp8_weights=dp_fp8_weights)
                for layer in layers]
    e = precision_bytes(precision)
    if model.finetune is not None:
        check_finetune(model, model.finetune)
    if (tp, sp, cp) != (1, False, 1) and not model.is_transformer:
        raise ConfigError(f"{model.name} is not a transformer: no tensor, sequence or "
                          f"context parallelism", field="tp")
    if model.layer_pattern and cp != 1:
        raise ConfigError(f"{model.name}: context parallelism of a hybrid (layer_pattern) "
                          f"model is not modelled", field="cp")
    if model.family == "resnet":
        from simulator.models.resnet import resnet_layer_costs      # CNNs load when used
        check_positive(batch=batch)
        return resnet_layer_costs(model, batch, e, tensor_cores=precision != FP32)
    if model.family == "maskrcnn":
        from simulator.models.maskrcnn import maskrcnn_layer_costs  # CNNs load when used
        check_positive(batch=batch)
        return maskrcnn_layer_costs(model, batch, e, tensor_cores=precision != FP32)
    check_positive(batch=batch, seq_len=seq_len)
    if model.position_embedding == "learned" and seq_len > model.max_seq_len:
        raise ConfigError(f"{seq_len} exceeds the {model.max_seq_len} learned positions "
                          f"of {model.name}", field="seq_len")
    check_mla(model, flash_attention, autocast, compile, elementwise)
    k = precision_bytes(FP32) if autocast else e
    blocks = block_costs(model, batch, seq_len, e, flash_attention, k, tp, sp, cp)
    head = head_cost(model, batch, seq_len, e, k, tp, sp, cp)
    eager = check_elementwise(elementwise) != "fused"
    fused_norm = elementwise == "eager_fused_norm"
    shard = (tp, sp, cp)
    if compile:      # the norms and residuals of a TP rank see s/cp tokens (/tp under SP)
        tokens = batch * seq_len // cp // (tp if sp else 1)
        blocks = [compiled_block(b, tokens, model.hidden, e, k) for b in blocks]
        if eager:
            blocks = [compiled_extras(b, model, batch, seq_len, e, *shard) for b in blocks]
    elif eager and model.family == "bert":     # Hugging Face's BertLayer (eager.py)
        blocks = [bert_eager_block(b, model, batch, seq_len, e, k, *shard) for b in blocks]
    elif eager:
        blocks = [eager_block(b, model, batch, seq_len, e, k, *shard, fused_norm=fused_norm)
                  for b in blocks]
    if eager and not compile and not fused_norm:
        head = eager_head(head, model, batch, seq_len, k, *shard)
    mtp = mtp_costs(model, batch, seq_len, e, mtp_depth(model, blocks), k, tp, sp, cp)
    layers = [embed_cost(model, batch, seq_len, e, k, tp, sp, cp), *blocks, *mtp, head]
    layers = packed_layers(layers, model.causal, model.pack, seq_len, cp, flash_attention)
    layers = fp8_stored(finetune_layers(layers, model, model.finetune, e, precision),
                        model.fp8_stores, e)
    if eager:        # the reference code's Linears, one GEMM each (projections.py)
        layers = [separate_projections(layer, model, e, tp) for layer in layers]
    return layers


def check_elementwise(value: str) -> str:
    """``value`` if it is an ``elementwise`` mode, else a ConfigError naming them."""
    if value not in ELEMENTWISE:
        raise ConfigError(f"must be one of {', '.join(ELEMENTWISE)}, got {value!r}",
                          field="elementwise")
    return value


def params_total(model: ModelSpec) -> int:
    """Number of parameters of ``model`` (embeddings and heads included; frozen ones and
    a fine-tuning's adapters included)."""
    return sum(layer.params + layer.frozen_params
               for layer in layer_costs(replace(model, pack=None), 1, 1, FP32))


def trainable_params(model: ModelSpec) -> int:
    """The parameters that train (all of them unless ``model.finetune`` freezes some)."""
    return sum(layer.params for layer in layer_costs(replace(model, pack=None), 1, 1, FP32))


def lookup_params(model: ModelSpec) -> int:
    """Parameters used only as lookup tables, never in a matmul (position and segment
    tables; the token table too when it is not tied to the LM head)."""
    if not model.is_transformer:
        return 0
    tables = model.type_vocab + (model.max_seq_len if model.position_embedding == "learned"
                                 else 0)
    tokens = 0 if model.tied_embeddings else model.vocab
    return (tables + tokens) * model.hidden


def megatron_recompute_flops(model: ModelSpec, batch: int, seq_len: int) -> float:
    """FLOPs of one iteration on ``batch`` sequences as Megatron-LM counts them *with*
    activation recomputation: ``96 B s l h^2 (1 + s / (6 h) + V / (16 l h))`` (Narayanan et
    al. 2021, arXiv 2104.04473, eq. 3: forward, recomputed forward and backward of every
    block, plus the logit layer). Used by benchmarks that report TFLOP/s this way (the
    PyTorch distributed team's ptd_benchmark ``trainer.py``, ``calc_flop``); it counts
    about 4/3 of :func:`model_flops_per_sample`."""
    check_positive(batch=batch, seq_len=seq_len)
    b, s, n, h, v = batch, seq_len, model.layers, model.hidden, model.vocab
    return 96.0 * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))


def model_flops_per_sample(model: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per sample for MFU (hardware-independent, no recompute).

    Transformers: ``6 N s + 12 L h s^2`` (``h`` the query width, ``heads x head_dim``;
    PaLM, Chowdhery et al. 2022, appendix B;
    nanoGPT ``estimate_mfu``), ``N`` = parameters that take part in matmuls
    (:func:`params_total` minus :func:`lookup_params`; for a mixture of experts the active
    ones, minus the routed experts a token skips; multi-token-prediction layers count as
    blocks, and their loss's second use of the output layer as its parameters again). ResNets: 3x the forward
    convolution and classifier FLOPs (2 FLOPs per multiply-add; about 3 x 8.2e9 for
    ResNet-50 at 224x224); batchnorm, ReLU and pooling are not counted. Mask R-CNN: the
    forward and backward convolution and matmul FLOPs (its frozen layers have no backward).
    """
    if model.family == "resnet":
        from simulator.models.resnet import resnet_forward_flops    # CNNs load when used
        return 3.0 * resnet_forward_flops(model)
    if model.family == "maskrcnn":
        from simulator.models.maskrcnn import maskrcnn_train_flops  # CNNs load when used
        return maskrcnn_train_flops(model)
    check_positive(seq_len=seq_len)
    # multi-token prediction: its layers are the model's, and its loss runs the shared output
    # layer again
    n = (params_total(model) - lookup_params(model) - inactive_params(model)
         + model.mtp_layers * model.vocab * model.hidden)
    attention = (model.layer_pattern.count("*") + model.mtp_layers * model.mtp_pattern.count("*")
                 if model.layer_pattern else model.layers + model.mtp_layers)
    return 6.0 * n * seq_len + 12.0 * attention * model.q_width * seq_len ** 2


def tokens_per_sample(model: ModelSpec, seq_len: int) -> int:
    """Tokens in one sample: ``seq_len`` for language models, 0 for image models."""
    return seq_len if model.is_transformer else 0
