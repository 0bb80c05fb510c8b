"""DeepSeek-V3's multi-token prediction (MTP), as Megatron-Core's
``MultiTokenPredictionBlock`` runs it (``mtp_num_layers``; NVIDIA/Megatron-LM
megatron/core/transformer/multi_token_prediction.py; DeepSeek-AI 2024, arXiv 2412.19437,
section 2.2): each MTP layer ``i`` predicts the token ``i + 2`` ahead from the previous
depth's hidden states and the embedding of the tokens shifted by ``i + 1``.

Each MTP layer is three layers of the model's list, all on the last pipeline stage
(:mod:`simulator.strategies.parallel.stages`; Megatron-Core builds MTP where the loss is,
``mtp_process``), before the ``head``:

* ``mtp.{i}.in`` (kind ``mtp``): the embedding lookup of the shifted tokens (the model's
  embedding kernels, :func:`~simulator.models.transformer.embed_cost`; the table is the
  main embedding's, shared, so no parameters here), ``enorm`` and ``hnorm`` over the
  embedding and the hidden states, and ``eh_proj``, the ``(t, 2h) x (2h, h)`` projection of
  their concatenation (column-parallel: ``h / tp`` outputs);
* ``mtp.{i}``: one transformer block, the next block index's kind (DeepSeek-V3's is an MoE
  block, as block 61 of its Hugging Face checkpoint): exactly the cost of a decoder block;
* ``mtp.{i}.out`` (kind ``mtp``): its final norm and the output layer and cross entropy over
  the vocabulary (the :func:`~simulator.models.transformer.head_cost` kernels; the output
  layer's weight is the main head's, shared, so only the norm's parameters here).

Parameters: one block, ``eh_proj`` ``2 h^2`` and three norms per MTP layer. Not modelled:
the TP all-gather of ``eh_proj``'s output and the MTP loss scaling (no cost), and the copy
of the embedding table the last stage holds (Megatron-Core keeps one there for MTP and
reduces its gradient with the first stage's, as for tied embeddings).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.models.moe import is_moe_layer, moe_block_cost
from simulator.models.ops import ID_BYTES, LayerCost, matmul, matmul_bwd
from simulator.models.spec import ModelSpec
from simulator.models.transformer import (_norm, block_cost, embed_cost, head_cost,
                                          norm_params)

PREFIX = "mtp."


def is_mtp(layer: LayerCost) -> bool:
    """Whether ``layer`` belongs to a multi-token-prediction layer."""
    return layer.name.startswith(PREFIX)


def mtp_params(model: ModelSpec, tp: int = 1) -> int:
    """Parameters of one MTP layer's own modules besides its block: ``eh_proj`` (``2 h x h``,
    ``1 / tp`` of it) and three norms (``enorm``, ``hnorm``, the final norm)."""
    return 2 * model.hidden * model.hidden // tp + 3 * norm_params(model)


def mtp_costs(model: ModelSpec, b: int, s: int, e: int, flash: bool, k: int | None = None,
              tp: int = 1, sp: bool = False, cp: int = 1) -> list[LayerCost]:
    """The ``mtp.{i}.in``, ``mtp.{i}``, ``mtp.{i}.out`` layers of every MTP layer (none when
    ``model.mtp_layers`` is 0), arguments as :func:`~simulator.models.transformer.block_cost`."""
    k = e if k is None else k
    t, h = b * (s // cp), model.hidden
    tn = t // tp if sp else t
    embed = embed_cost(model, b, s, e, k, tp, sp, cp)
    head = head_cost(model, b, s, e, k, tp, sp, cp)
    en, hn = _norm(model, "mtp_enorm", tn, k), _norm(model, "mtp_hnorm", tn, k)
    eh = matmul("mtp_eh_proj", t, 2 * h, h // tp, e, params=2 * h * h // tp)
    head_in = LayerCost(
        "mtp.in", "mtp", mtp_params(model, tp) - norm_params(model),
        (*embed.forward, en[0], hn[0], eh),
        (*matmul_bwd("mtp_eh_proj", t, 2 * h, h // tp, e, weight=True), hn[1], en[1],
         *embed.backward),
        ID_BYTES * t + 2 * k * tn * h + 2 * e * tn * h,     # ids, norm inputs, eh_proj input
        e * tn * h)
    out = replace(head, kind="mtp", params=norm_params(model))
    layers = []
    for i in range(model.mtp_layers):
        index = model.layers + i
        block = (moe_block_cost(model, b, s, e, flash, k, tp, sp, cp)
                 if is_moe_layer(model, index) else block_cost(model, b, s, e, flash, k, tp,
                                                               sp, cp))
        layers += [replace(head_in, name=f"{PREFIX}{i}.in"),
                   replace(block, name=f"{PREFIX}{i}"), replace(out, name=f"{PREFIX}{i}.out")]
    return layers
