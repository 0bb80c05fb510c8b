"""Costs of bottleneck ResNets (v1.5: stride on the 3x3 convolution).

FLOPs count 2 per multiply-add (ResNet-50 at 224x224: 4.1 G multiply-adds = 8.2 GFLOPs
forward). Batchnorm (``norm``, two passes over the input in training), ReLU, residual adds
and pooling (``elementwise``) add their own small FLOPs and their HBM traffic. Saved
activations per image follow PyTorch: each convolution's input, each batchnorm's input,
each ReLU's output and the max-pool indices; a block counts its output (the next
block's input), the stem its pooled output. The kernels are those of channels-last (NHWC)
activations; in the NCHW memory format (``ModelSpec.memory_format``) the convolutions get
cuDNN's layout transposes and batch norm its channel-parallel kernels
(:mod:`simulator.models.layout`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.models.layout import NCHW, batchnorm_shape, in_place, transposes
from simulator.models.ops import (
    ID_BYTES, LOSS_BWD_FLOPS, LOSS_BYTES, LOSS_FLOPS, LayerCost, OpCost, matmul, matmul_bwd,
    pointwise)
from simulator.models.spec import RESNET_BLOCKS, ModelSpec

STAGE_WIDTHS = (64, 128, 256, 512)   # bottleneck (3x3) widths; outputs are 4x
BN_FLOPS = 5                         # per element, forward


@dataclass(frozen=True)
class Conv:
    """A bias-free ``k x k`` convolution, ``c_in -> c_out``, on a ``size`` square input."""

    name: str
    c_in: int
    c_out: int
    k: int
    stride: int
    size: int

    @property
    def out_size(self) -> int:
        return (self.size + 2 * (self.k // 2) - self.k) // self.stride + 1

    @property
    def params(self) -> int:
        return self.c_in * self.c_out * self.k * self.k

    def gemm(self, batch: int) -> tuple[int, int, int]:
        """Implicit-GEMM shape ``(m, k, n)``: output pixels, ``c_in k^2``, ``c_out``."""
        return batch * self.out_size ** 2, self.c_in * self.k * self.k, self.c_out

    def out_elements(self, batch: int) -> int:
        return batch * self.c_out * self.out_size ** 2


@dataclass(frozen=True)
class Layout:
    """How the step lays out its activations: NCHW or not, and whether its convolutions
    go through cuDNN's NHWC tensor-core engines (not in plain FP32)."""

    nchw: bool = False
    tensor_cores: bool = True

    @property
    def transposes(self) -> bool:
        return self.nchw and self.tensor_cores


def layout_of(model: ModelSpec, tensor_cores: bool) -> Layout:
    """The :class:`Layout` of ``model``'s step."""
    return Layout(nchw=model.memory_format == NCHW, tensor_cores=tensor_cores)


def _conv_ops(conv: Conv, batch: int, e: int, dgrad: bool = True,
              layout: Layout = Layout()):
    """Forward ops and backward ops of a convolution, with exact input/output sizes for the
    bytes; in NCHW with tensor cores, with cuDNN's layout transposes around it
    (:func:`~simulator.models.layout.transposes`) unless it runs in place."""
    m, k, n = conv.gemm(batch)
    in_el = batch * conv.c_in * conv.size ** 2
    out_el = conv.out_elements(batch)
    byts = float(e * (in_el + conv.params + out_el))
    fwd = matmul(conv.name, m, k, n, e, op_class="conv")
    bwd = matmul_bwd(conv.name, m, k, n, e, dgrad=dgrad, op_class="conv")
    fwd_ops = [OpCost(fwd.name, "conv", fwd.flops, byts)]
    bwd_ops = [OpCost(op.name, "conv", op.flops, byts) for op in bwd]
    if layout.transposes and not in_place(conv.k, conv.stride, conv.out_size):
        before, after, moves = transposes(conv.name, in_el, out_el, dgrad)
        fwd_ops = [*before, *fwd_ops, *after]
        bwd_ops = [*moves, *bwd_ops]
    return fwd_ops, bwd_ops


def _bn_relu(name: str, elements: int, channels: int, e: int, relu: bool = True,
             layout: Layout = Layout()):
    """Batchnorm (+ ReLU) over ``elements`` in ``channels``: forward ops, backward ops
    (reverse order); in NCHW batch norm carries its channel-parallel shape
    (:func:`~simulator.models.layout.batchnorm_shape`)."""
    fwd_bn = pointwise(f"{name}.bn", "norm", elements, BN_FLOPS, 3, e)
    bwd_bn = pointwise(f"{name}.bn.bwd", "norm", elements, 2 * BN_FLOPS, 4, e)
    if layout.nchw:
        fwd_bn = replace(fwd_bn, **batchnorm_shape(channels, elements, backward=False))
        bwd_bn = replace(bwd_bn, **batchnorm_shape(channels, elements, backward=True))
    fwd, bwd = [fwd_bn], [bwd_bn]
    if relu:
        fwd.append(pointwise(f"{name}.relu", "elementwise", elements, 1, 2, e))
        bwd.insert(0, pointwise(f"{name}.relu.bwd", "elementwise", elements, 1, 3, e))
    return fwd, bwd


def _stem(model: ModelSpec, batch: int, e: int, layout: Layout) -> tuple[LayerCost, int]:
    conv = Conv("conv1", 3, 64, 7, 2, model.image_size)
    c_fwd, c_bwd = _conv_ops(conv, batch, e, dgrad=False, layout=layout)   # no image gradient
    n = conv.out_elements(batch)
    bn_f, bn_b = _bn_relu("bn1", n, conv.c_out, e, layout=layout)
    pooled = (conv.out_size + 2 - 3) // 2 + 1
    p = batch * 64 * pooled ** 2
    pool_f = OpCost("maxpool", "elementwise", 9.0 * p, float(e * (n + p) + ID_BYTES * p))
    pool_b = OpCost("maxpool.bwd", "elementwise", float(p), float(e * (n + p) + ID_BYTES * p))
    act = e * (batch * 3 * model.image_size ** 2 + 2 * n + p) + ID_BYTES * p
    layer = LayerCost("stem", "stem", conv.params + 2 * 64, (*c_fwd, *bn_f, pool_f),
                      (pool_b, *bn_b, *c_bwd), act, e * p)
    return layer, pooled


def _bottleneck(name: str, c_in: int, width: int, stride: int, size: int, batch: int,
                e: int, layout: Layout = Layout()) -> LayerCost:
    c_out = 4 * width
    convs = [Conv("conv1", c_in, width, 1, 1, size), Conv("conv2", width, width, 3, stride, size)]
    convs.append(Conv("conv3", width, c_out, 1, 1, convs[1].out_size))
    if stride != 1 or c_in != c_out:
        convs.append(Conv("downsample", c_in, c_out, 1, stride, size))
    fwd, bwd, act, params = [], [], 0, 0
    for i, conv in enumerate(convs):
        n = conv.out_elements(batch)
        c_f, c_b = _conv_ops(conv, batch, e, layout=layout)
        bn_f, bn_b = _bn_relu(conv.name, n, conv.c_out, e, relu=i < 2, layout=layout)
        fwd += [*c_f, *bn_f]
        bwd = [*bn_b, *c_b, *bwd]
        act += e * n * (2 if i < 2 else 1)          # BN input (+ ReLU output)
        params += conv.params + 2 * conv.c_out
    out = convs[2].out_elements(batch)
    add = pointwise("residual", "elementwise", out, 1, 3, e)
    relu = pointwise("relu", "elementwise", out, 1, 2, e)
    fwd += [add, relu]
    bwd = [pointwise("relu.bwd", "elementwise", out, 1, 3, e),
           OpCost("residual.bwd", "elementwise", add.flops, add.bytes_accessed), *bwd]
    return LayerCost(name, "conv_block", params, tuple(fwd), tuple(bwd), act + e * out,
                     e * out)


def _head(model: ModelSpec, batch: int, size: int, e: int) -> LayerCost:
    c, k = 4 * STAGE_WIDTHS[-1], model.num_classes
    feat = batch * c * size * size
    pool = (pointwise("avgpool", "elementwise", feat, 1, 1, e),
            pointwise("avgpool.bwd", "elementwise", feat, 1, 1, e))
    loss = (pointwise("cross_entropy", "loss", batch * k, LOSS_FLOPS, 2, e),
            pointwise("cross_entropy.bwd", "loss", batch * k, LOSS_BWD_FLOPS, 2, e))
    fwd = (pool[0], matmul("fc", batch, c, k, e), loss[0])
    bwd = (loss[1], *matmul_bwd("fc", batch, c, k, e), pool[1])
    return LayerCost("head", "head", c * k + k, fwd, bwd, e * batch * (c + k), LOSS_BYTES)


def resnet_layer_costs(model: ModelSpec, batch: int, e: int,
                       tensor_cores: bool = True) -> list[LayerCost]:
    """``stem``, ``layer{1..4}.{i}`` bottlenecks and ``head`` for ``batch`` images at
    ``e`` bytes per element, in ``model.memory_format`` (``tensor_cores``: the convolutions
    run on tensor cores, every precision but plain FP32)."""
    layout = layout_of(model, tensor_cores)
    stem, size = _stem(model, batch, e, layout)
    layers, c_in = [stem], 64
    for stage, (blocks, width) in enumerate(zip(RESNET_BLOCKS[model.depth], STAGE_WIDTHS)):
        for i in range(blocks):
            stride = 2 if (i == 0 and stage > 0) else 1
            layers.append(_bottleneck(f"layer{stage + 1}.{i}", c_in, width, stride, size,
                                      batch, e, layout))
            c_in, size = 4 * width, (size + 2 - 3) // stride + 1
    layers.append(_head(model, batch, size, e))
    return layers


def resnet_forward_flops(model: ModelSpec) -> float:
    """Forward convolution + classifier FLOPs per image (2 per multiply-add)."""
    return sum(op.flops for layer in resnet_layer_costs(model, 1, 4) for op in layer.forward
               if op.op_class in ("conv", "matmul"))
