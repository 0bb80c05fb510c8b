"""Megatron-Core's vocab-parallel cross entropy when it is not fused
(``cross_entropy_loss_fusion: false``, Megatron-Core's own default since the field came in
with core 0.8).

The head's loss (:func:`simulator.models.transformer.head_cost`) is one kernel each way that
reads and writes the logits once: a fused cross entropy (Megatron-Bridge's default,
``cross_entropy_loss_fusion: true``). Unfused, ``_VocabParallelCrossEntropy``
(megatron/core/tensor_parallel/cross_entropy.py at core_v0.8.0) runs op by op in fp32 over
the rank's ``tokens x vocab / tp`` logits:

=========================  =======================================  ===================
kernel                     what it does                             bytes per logit
=========================  =======================================  ===================
``ce.float``               ``logits.float()``: a copy in fp32       e + 4
``ce.max``                 ``torch.max(logits, dim=-1)``            4
``ce.sub_max``             ``logits -= logits_max`` (in place)      4 + 4
``ce.exp``                 ``torch.exp(logits, out=logits)``        4 + 4
``ce.sum``                 ``exp_logits.sum(dim=-1)``               4
``ce.div``                 ``exp_logits.div_(sum)``: the softmax     4 + 4
                           kept for backward
``ce.grad_mul.bwd``        ``grad_input.mul_(grad_output)``         4 + 4
``ce.float.bwd``           the gradient back to the logits' type    4 + e
=========================  =======================================  ===================

(``e``: the logits' element size; the gather of each token's target logit, the subtraction
of 1 at the target and the three TP all-reduces of one value per token are left out: they
touch ``tokens``, not ``tokens x vocab``.) Forward 38 bytes a bf16 logit where the fused
loss moves 4; backward 14 where it moves 4.
"""

from __future__ import annotations

from dataclasses import replace

from .ops import LOSS_FLOPS, LayerCost, OpCost

FP32 = 4
# (name, FLOPs per logit, bytes per logit as (of e, of fp32)): forward, then backward
FORWARD = (("ce.float", 0, (1, 1)), ("ce.max", 1, (0, 1)), ("ce.sub_max", 1, (0, 2)),
           ("ce.exp", 1, (0, 2)), ("ce.sum", 1, (0, 1)), ("ce.div", 1, (0, 2)))
BACKWARD = (("ce.grad_mul.bwd", 1, (0, 2)), ("ce.float.bwd", 0, (1, 1)))


def _kernels(table, logits: float, e: float) -> list[OpCost]:
    return [OpCost(name, "loss", float(flops * logits), float((of_e * e + of_fp32 * FP32)
                                                              * logits))
            for name, flops, (of_e, of_fp32) in table]


def unfused_cross_entropy(layer: LayerCost) -> LayerCost:
    """``layer`` with its fused cross entropy (``cross_entropy`` / ``cross_entropy.bwd``,
    which read and write the logits once each) replaced by Megatron-Core's unfused kernels
    (module doc); a layer without one as it is. Megatron runs no autocast: the fused op's
    bytes are ``2 e`` per logit, which gives ``e``."""
    names = [o.name for o in layer.forward]
    if "cross_entropy" not in names:
        return layer
    fused = layer.forward[names.index("cross_entropy")]
    logits = fused.flops / LOSS_FLOPS
    e = fused.bytes_accessed / (2 * logits)

    def swap(ops, name, table):
        out = []
        for o in ops:
            out += _kernels(table, logits, e) if o.name == name else [o]
        return tuple(out)

    return replace(layer, forward=swap(layer.forward, "cross_entropy", FORWARD),
                   backward=swap(layer.backward, "cross_entropy.bwd", BACKWARD))
