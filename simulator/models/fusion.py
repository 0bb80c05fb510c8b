"""``training.compile``: the elementwise and norm kernels torch.compile fuses in a block.

The simulator's eager block already counts one kernel per norm, activation function,
rotary and dropout (what fused implementations such as Megatron, Transformer Engine or
PyTorch's own fused norms run). What TorchInductor adds on top, compiling one transformer
block at a time (torchtitan and llm-foundry compile per block, so nothing fuses across
blocks), are the producer-consumer fusions of memory-bound neighbours:

* a residual add into the norm that follows it (``residual1`` + ``norm2``): one kernel reads
  the branch output and the residual stream and writes the new stream and the normed
  tensor, instead of writing the stream and reading it back: one stream read saved
  (``k`` bytes per element);
* dropout into the residual add after it: the dropped-out tensor is never written and read
  back (``2 e`` bytes per element);
* autocast's 16-bit copy of a norm output (``cast.norm*``) into the norm, which then writes
  both: the cast's read of the fp32 output is saved (``k`` bytes per element);

and the same pairs in backward (their gradients). Attention, GEMMs and the loss are
untouched; so are the saved activations (Inductor's partitioner may save less; not
modelled).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.compute.launch import COMPILED
from simulator.models.ops import LayerCost, OpCost


def compiled_block(layer: LayerCost, tokens: int, hidden: int, e: int, k: int) -> LayerCost:
    """``layer`` (a transformer block on ``tokens`` tokens) with Inductor's fusions, every
    kernel launched by the compiled code (:mod:`simulator.compute.launch`)."""
    n = tokens * hidden
    fwd = _fuse(list(layer.forward), [
        ("attn_out.dropout", "residual1", 2 * e * n), ("mlp_down.dropout", "residual2", 2 * e * n),
        ("residual1", "norm2", k * n), ("norm1", "cast.norm1", k * n),
        ("norm2", "cast.norm2", k * n)])
    bwd = _fuse(list(layer.backward), [
        ("residual2.bwd", "mlp_down.dropout.bwd", 2 * e * n),
        ("residual1.bwd", "attn_out.dropout.bwd", 2 * e * n),
        ("norm2.bwd", "residual1.bwd", k * n), ("cast.norm2.bwd", "norm2.bwd", k * n),
        ("cast.norm1.bwd", "norm1.bwd", k * n)])
    return replace(layer, forward=tuple(replace(o, launch=COMPILED) for o in fwd),
                   backward=tuple(replace(o, launch=COMPILED) for o in bwd))


def _fuse(ops: list[OpCost], pairs) -> list[OpCost]:
    """Merge each ``(first, second, saved_bytes)`` pair of adjacent ops (first matched by
    name prefix, so an already fused op keeps fusing)."""
    for first, second, saved in pairs:
        for i in range(len(ops) - 1):
            a, b = ops[i], ops[i + 1]
            if first in a.name.split("+") and second in b.name.split("+"):
                ops[i:i + 2] = [_merged(a, b, saved)]
                break
    return ops


def _merged(a: OpCost, b: OpCost, saved: float) -> OpCost:
    owner = a if a.weight else b               # the norm's weight (FSDP units, gradients)
    cls = "norm" if "norm" in (a.op_class, b.op_class) else a.op_class
    return OpCost(f"{a.name}+{b.name}", cls, a.flops + b.flops,
                  max(0.0, a.bytes_accessed + b.bytes_accessed - saved), weight=owner.weight,
                  params=a.params + b.params, saved_bytes=a.saved_bytes + b.saved_bytes)
