"""Megatron-Core's vocab-parallel cross entropy, three ways: unfused
(``cross_entropy_loss_fusion: false``, Megatron-Core's own default since the field came in
with core 0.8), fused by TorchScript/nvFuser (``true`` with ``cross_entropy_fusion_impl:
native``, Megatron-Core's default implementation, the only one before March 2025) or by
Transformer Engine's kernel (``te``).

The head's loss (:func:`simulator.models.transformer.head_cost`) is one kernel each way that
reads and writes the logits once: Transformer Engine's ``parallel_cross_entropy`` (one
kernel that computes the loss and writes the gradient into the logits in the forward), what
Megatron-Bridge's performance scripts run (``scripts/performance/utils/overrides.py`` sets
``cross_entropy_fusion_impl = "te"`` from v0.3.0). Unfused, ``_VocabParallelCrossEntropy``
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

``native`` (megatron/core/fusions/fused_cross_entropy.py at core_v0.8.0) runs the same
steps as four ``jit_fuser`` functions, one kernel each: ``calculate_logits_max`` (the fp32
copy and its max: e + 4), ``calculate_predicted_logits`` (subtract, exp in place, sum: 4 +
4), ``calculate_cross_entropy_loss`` (the softmax in place: 4 + 4) and, backward,
``calculate_gradients`` (the in-place multiply, then ``.to(bfloat16)``: 4 + 4 + e): 22
bytes a bf16 logit forward, 10 backward.
"""

from __future__ import annotations

from dataclasses import replace

from .ops import LOSS_FLOPS, LayerCost, OpCost

FP32 = 4
# (name, FLOPs per logit, bytes per logit as (of e, of fp32)): forward, then backward
FORWARD = (("ce.float", 0, (1, 1)), ("ce.max", 1, (0, 1)), ("ce.sub_max", 1, (0, 2)),
           ("ce.exp", 1, (0, 2)), ("ce.sum", 1, (0, 1)), ("ce.div", 1, (0, 2)))
BACKWARD = (("ce.grad_mul.bwd", 1, (0, 2)), ("ce.float.bwd", 0, (1, 1)))
NATIVE_FORWARD = (("ce.logits_max", 1, (1, 1)), ("ce.predicted_logits", 3, (0, 2)),
                  ("ce.softmax", 1, (0, 2)))
NATIVE_BACKWARD = (("ce.gradients.bwd", 2, (1, 2)),)
TABLES = {"unfused": (FORWARD, BACKWARD), "native": (NATIVE_FORWARD, NATIVE_BACKWARD)}


def _kernels(table, logits: float, e: float) -> list[OpCost]:
    return [OpCost(name, "loss", float(flops * logits), float((of_e * e + of_fp32 * FP32)
                                                              * logits))
            for name, flops, (of_e, of_fp32) in table]


def megatron_cross_entropy(layer: LayerCost, how: str) -> LayerCost:
    """``layer`` with its one-pass cross entropy (``cross_entropy`` / ``cross_entropy.bwd``,
    which read and write the logits once each) replaced by Megatron-Core's kernels ``how``
    (``unfused`` or ``native``, module doc); a layer without one as it is. Megatron runs no
    autocast: the one-pass op's bytes are ``2 e`` per logit, which gives ``e``."""
    forward, backward = TABLES[how]
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

    return replace(layer, forward=swap(layer.forward, "cross_entropy", forward),
                   backward=swap(layer.backward, "cross_entropy.bwd", backward))


def unfused_cross_entropy(layer: LayerCost) -> LayerCost:
    """:func:`megatron_cross_entropy` ``unfused``."""
    return megatron_cross_entropy(layer, "unfused")
