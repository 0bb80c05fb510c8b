"""DeepSeek-V3's multi-token prediction (MTP), as Megatron-Core's
``MultiTokenPredictionBlock`` runs it (``mtp_num_layers``; NVIDIA/Megatron-LM
megatron/core/transformer/multi_token_prediction.py; DeepSeek-AI 2024, arXiv 2412.19437,
section 2.2): each MTP layer ``i`` predicts the token ``i + 2`` ahead from the previous
depth's hidden states and the embedding of the tokens shifted by ``i + 1``.

Each MTP layer is these layers of the model's list, all on the last pipeline stage
(:mod:`simulator.strategies.parallel.stages`; Megatron-Core builds MTP where the loss is,
``mtp_process``), before the ``head``:

* ``mtp.{i}.embed`` (kind ``mtp_embedding``): the embedding lookup of the shifted tokens (the
  model's embedding kernels and, under tensor parallelism, its collectives; the table is the
  main embedding's, shared, so no parameters here);
* ``mtp.{i}.proj`` (kind ``mtp``): ``enorm`` and ``hnorm`` over the embedding and the hidden
  states, and ``eh_proj``, the ``(t, 2h) x (2h, h)`` projection of their concatenation
  (column-parallel: ``h / tp`` outputs);
* ``mtp.{i}.block.{j}``: the model's own layers, the same kernels: a transformer's last block
  (DeepSeek-V3's MTP block is an MoE block, as block 61 of its Hugging Face checkpoint), or a
  hybrid's layers of its ``mtp_pattern`` (Nemotron 3 Super: ``*E``), each the model's first
  layer of that symbol;
* ``mtp.{i}.head`` (kind ``mtp_head``): its final norm and the output layer and cross entropy
  over the vocabulary (the :func:`~simulator.models.transformer.head_cost` kernels and
  collectives; the output layer's weight is the main head's, shared, so only the norm's
  parameters here).

Parameters: the depth's layers, ``eh_proj`` ``2 h^2`` and three norms per MTP layer. Not
modelled: the TP all-gather of ``eh_proj``'s output and the MTP loss scaling (no cost), and
the copy of the embedding table the last stage holds (Megatron-Core keeps one there for MTP
and reduces its gradient with the first stage's, as for tied embeddings).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.models.ops import LayerCost, matmul, matmul_bwd
from simulator.models.spec import ModelSpec
from simulator.models.transformer import _norm, embed_cost, head_cost, norm_params

PREFIX = "mtp."


def is_mtp(layer: LayerCost) -> bool:
    """Whether ``layer`` belongs to a multi-token-prediction layer."""
    return layer.name.startswith(PREFIX)


def mtp_params(model: ModelSpec, tp: int = 1) -> int:
    """Parameters of one MTP layer's own modules besides its block: ``eh_proj`` (``2 h x h``,
    ``1 / tp`` of it) and three norms (``enorm``, ``hnorm``, the final norm)."""
    return 2 * model.hidden * model.hidden // tp + 3 * norm_params(model)


def mtp_costs(model: ModelSpec, b: int, s: int, e: int, depth: list[LayerCost],
              k: int | None = None, tp: int = 1, sp: bool = False,
              cp: int = 1) -> list[LayerCost]:
    """The layers of every MTP layer (none when ``model.mtp_layers`` is 0): ``depth`` are the
    model's own layers one MTP layer runs (module docstring); other arguments as
    :func:`~simulator.models.transformer.block_cost`."""
    k = e if k is None else k
    t, h = b * (s // cp), model.hidden
    tn = t // tp if sp else t
    embed = replace(embed_cost(model, b, s, e, k, tp, sp, cp), kind="mtp_embedding", params=0)
    head = replace(head_cost(model, b, s, e, k, tp, sp, cp), kind="mtp_head",
                   params=norm_params(model))
    en, hn = _norm(model, "mtp_enorm", tn, k), _norm(model, "mtp_hnorm", tn, k)
    eh = matmul("mtp_eh_proj", t, 2 * h, h // tp, e, params=2 * h * h // tp)
    proj = LayerCost(
        "mtp.proj", "mtp", mtp_params(model, tp) - norm_params(model), (en[0], hn[0], eh),
        (*matmul_bwd("mtp_eh_proj", t, 2 * h, h // tp, e, weight=True), hn[1], en[1]),
        2 * k * tn * h + 2 * e * tn * h,        # the norms' inputs, eh_proj's input
        e * tn * h)
    layers = []
    for i in range(model.mtp_layers):
        pre = f"{PREFIX}{i}"
        layers += [replace(embed, name=f"{pre}.embed"), replace(proj, name=f"{pre}.proj"),
                   *(replace(x, name=f"{pre}.block.{j}") for j, x in enumerate(depth)),
                   replace(head, name=f"{pre}.head")]
    return layers


def mtp_depth(model: ModelSpec, blocks: list[LayerCost]) -> list[LayerCost]:
    """The model's own layers one MTP layer runs (``blocks``: the model's, in order): a
    hybrid's first layer of each ``mtp_pattern`` symbol, else the last block."""
    if not model.mtp_pattern:
        return blocks[-1:]
    first: dict[str, LayerCost] = {}
    for block, sym in zip(blocks, model.layer_pattern):
        first.setdefault(sym, block)
    return [first[sym] for sym in model.mtp_pattern]
