"""Costs of Mask R-CNN with a ResNet-FPN backbone (He et al. 2017, arXiv 1703.06870; FPN: Lin
et al. 2017, arXiv 1612.03144), as NVIDIA DeepLearningExamples trains it in TensorFlow 2
(``TensorFlow2/Segmentation/MaskRCNN/mrcnn_tf2``: ``config.py``, ``model/mask_rcnn.py``,
``model/models/{resnet50/resnet.py,fpn.py,heads.py}``).

Layers, for ``batch`` images of ``image_size`` pixels square (the catalog entry uses the
area-equivalent square of the 832 x 1344 training images):

* ``stem``, ``layer1.*`` .. ``layer4.*``: the bottleneck ResNet of :mod:`resnet`. The stem
  and the first stage are built with ``trainable=False``: no backward pass, no gradient, no
  variable to reduce or update (their parameters are not counted);
* ``fpn``: 1x1 lateral convolutions to 256 channels on C2..C5, top-down nearest upsampling
  and adds, 3x3 output convolutions on P2..P5, P6 by stride-2 subsampling of P5;
* ``rpn``: the shared RPN head on P2..P6 (3x3 conv 256, 1x1 convs to 3 objectness scores and
  12 box deltas per location: three aspect ratios, one scale);
* ``box_head``: RoIAlign 7x7 of ``ROIS_PER_IMAGE`` sampled proposals, FC 1024, FC 1024,
  class (91) and box (4 x 91) outputs;
* ``mask_head``: RoIAlign 14x14 of the ``ROIS_PER_IMAGE x FG_FRACTION`` foreground proposals,
  four 3x3 convs 256, a 2x2 stride-2 transposed conv 256, a 1x1 conv to 91 masks of 28 x 28.

Not modelled: anchor generation, proposal decoding, top-k and NMS, proposal-to-target
matching and sampling, mask target cropping (no matmul; irregular kernels whose time is not
proportional to FLOPs), and the input pipeline. FLOPs count 2 per multiply-add.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.models.ops import (LayerCost, OpCost, matmul, matmul_bwd, pointwise)
from simulator.models.resnet import Conv, Layout, _conv_ops, resnet_layer_costs, layout_of
from simulator.models.spec import ModelSpec

FPN_CHANNELS = 256                  # fpn.py filters
ANCHORS_PER_LOCATION = 3            # config.py aspect_ratios (3) x num_scales (1)
ROIS_PER_IMAGE = 512                # config.py batch_size_per_im
FG_FRACTION = 0.25                  # config.py fg_fraction: mask head ROIs = 512 x 0.25
BOX_ROI_SIZE, MASK_ROI_SIZE = 7, 14  # mask_rcnn.py multilevel_crop_and_resize output_size
MLP_HEAD_DIM = 1024                 # config.py fast_rcnn_mlp_head_dim
MASK_RESOLUTION = 28                # config.py mrcnn_resolution
FROZEN = ("stem", "layer1.")        # resnet50/resnet.py: conv2d and group_1 trainable=False
ROI_ALIGN_TAPS = 4                  # bilinear interpolation reads 4 feature values per output


def _frozen(layer: LayerCost) -> LayerCost:
    """Forward only: no gradient flows below the first trainable stage."""
    return replace(layer, params=0, backward=(), activation_bytes=0)


def _convs(name: str, kind: str, convs: list[tuple[Conv, int]], e: int, extra_fwd=(),
           extra_bwd=(), shared_params: int | None = None,
           layout: Layout = Layout()) -> LayerCost:
    """A layer of biased convolutions (each with its own batch: images or ROIs), each
    followed by a ReLU-sized elementwise op; saved activations are every conv input."""
    fwd, bwd, act, params = [], [], 0, 0
    for conv, batch in convs:
        c_f, c_b = _conv_ops(conv, batch, e, layout=layout)
        out = conv.out_elements(batch)
        fwd += [*c_f, pointwise(f"{conv.name}.bias_relu", "elementwise", out, 2, 2, e)]
        bwd = [pointwise(f"{conv.name}.relu.bwd", "elementwise", out, 1, 3, e), *c_b, *bwd]
        act += e * (batch * conv.c_in * conv.size ** 2 + out)
        params += conv.params + conv.c_out
    fwd += list(extra_fwd)
    bwd = list(extra_bwd) + bwd
    return LayerCost(name, kind, params if shared_params is None else shared_params,
                     tuple(fwd), tuple(bwd), act, e * convs[-1][0].out_elements(convs[-1][1]))


def _fpn(sizes: list[int], batch: int, e: int, layout: Layout) -> LayerCost:
    c = FPN_CHANNELS
    lateral = [(Conv(f"lateral{lv}", 256 * 2 ** i, c, 1, 1, s), batch)
               for i, (lv, s) in enumerate(zip(range(2, 6), sizes))]
    post = [(Conv(f"post{lv}", c, c, 3, 1, s), batch) for lv, s in zip(range(2, 6), sizes)]
    adds = [pointwise(f"topdown{lv}", "elementwise", batch * c * s * s, 1, 3, e)
            for lv, s in zip(range(2, 5), sizes)]
    return _convs("fpn", "fpn", lateral + post, e, adds,
                  [OpCost(f"{a.name}.bwd", a.op_class, a.flops, a.bytes_accessed) for a in adds],
                  layout=layout)


def _rpn(sizes: list[int], batch: int, e: int, layout: Layout) -> LayerCost:
    c, a = FPN_CHANNELS, ANCHORS_PER_LOCATION
    levels = sizes + [(sizes[-1] - 1) // 2 + 1]            # P6: stride-2 subsampling of P5
    convs = [(conv, batch) for lv, s in zip(range(2, 7), levels)
             for conv in (Conv(f"rpn{lv}", c, c, 3, 1, s), Conv(f"rpn{lv}.class", c, a, 1, 1, s),
                          Conv(f"rpn{lv}.box", c, 4 * a, 1, 1, s))]
    shared = c * c * 9 + c + (c * a + a) + (c * 4 * a + 4 * a)   # one head for every level
    return _convs("rpn", "head", convs, e, shared_params=shared, layout=layout)


def _roi_align(name: str, rois: int, size: int, e: int) -> tuple[OpCost, OpCost]:
    out = rois * size * size * FPN_CHANNELS
    return (pointwise(f"{name}.roi_align", "elementwise", out, 2 * ROI_ALIGN_TAPS,
                      ROI_ALIGN_TAPS + 1, e),
            pointwise(f"{name}.roi_align.bwd", "elementwise", out, 2 * ROI_ALIGN_TAPS,
                      ROI_ALIGN_TAPS + 1, e))


def _box_head(model: ModelSpec, batch: int, e: int) -> LayerCost:
    r, d, k = batch * ROIS_PER_IMAGE, MLP_HEAD_DIM, model.num_classes
    roi_f, roi_b = _roi_align("box", r, BOX_ROI_SIZE, e)
    mms = [("fc6", BOX_ROI_SIZE ** 2 * FPN_CHANNELS, d), ("fc7", d, d), ("class", d, k),
           ("box", d, 4 * k)]
    fwd = [roi_f] + [matmul(n, r, kk, nn, e) for n, kk, nn in mms]
    bwd = [g for n, kk, nn in reversed(mms) for g in matmul_bwd(n, r, kk, nn, e)] + [roi_b]
    params = sum(kk * nn + nn for _, kk, nn in mms)
    act = e * r * (BOX_ROI_SIZE ** 2 * FPN_CHANNELS + 2 * d + 5 * k)
    return LayerCost("box_head", "head", params, tuple(fwd), tuple(bwd), act, e * r * 5 * k)


def _mask_head(model: ModelSpec, batch: int, e: int, layout: Layout) -> LayerCost:
    r, c, s, m = int(batch * ROIS_PER_IMAGE * FG_FRACTION), FPN_CHANNELS, MASK_ROI_SIZE, \
        MASK_RESOLUTION
    roi_f, roi_b = _roi_align("mask", r, s, e)
    convs = [(Conv(f"mask{i}", c, c, 3, 1, s), r) for i in range(4)]
    deconv = ("deconv", r * s * s, c, 4 * c)              # 2x2 stride 2: each pixel -> 4
    logits = ("logits", r * m * m, c, model.num_classes)
    extra_f = [matmul(n, mm, kk, nn, e, "conv") for n, mm, kk, nn in (deconv, logits)]
    extra_b = [g for n, mm, kk, nn in (logits, deconv) for g in matmul_bwd(n, mm, kk, nn, e,
                                                                         op_class="conv")]
    loss = pointwise("mask_loss", "loss", r * m * m, 5, 2, e)
    layer = _convs("mask_head", "head", convs, e, [*extra_f, loss],
                   [OpCost(f"{loss.name}.bwd", "loss", loss.flops, loss.bytes_accessed),
                    *extra_b], layout=layout)
    params = layer.params + 4 * c * c + c + c * model.num_classes + model.num_classes
    act = layer.activation_bytes + e * r * (s * s * c + m * m * (c + model.num_classes))
    return replace(layer, params=params, forward=(roi_f, *layer.forward),
                   backward=(*layer.backward, roi_b), activation_bytes=act)


def maskrcnn_layer_costs(model: ModelSpec, batch: int, e: int,
                         tensor_cores: bool = True) -> list[LayerCost]:
    """Backbone (stem and first stage frozen), ``fpn``, ``rpn``, ``box_head``,
    ``mask_head`` for ``batch`` images at ``e`` bytes per element, in
    ``model.memory_format`` (as :func:`~simulator.models.resnet.resnet_layer_costs`)."""
    layout = layout_of(model, tensor_cores)
    backbone = [(_frozen(layer) if layer.name.startswith(FROZEN) else layer)
                for layer in resnet_layer_costs(model, batch, e, tensor_cores)[:-1]]
    size = model.image_size // 4                                          # C2
    sizes = [size]
    for _ in range(3):
        sizes.append((sizes[-1] + 2 - 3) // 2 + 1)
    return [*backbone, _fpn(sizes, batch, e, layout), _rpn(sizes, batch, e, layout),
            _box_head(model, batch, e), _mask_head(model, batch, e, layout)]


def maskrcnn_train_flops(model: ModelSpec) -> float:
    """Forward and backward convolution and matmul FLOPs per image (frozen layers forward
    only)."""
    return sum(op.flops for layer in maskrcnn_layer_costs(model, 1, 4)
               for op in (*layer.forward, *layer.backward) if op.op_class in ("conv", "matmul"))
