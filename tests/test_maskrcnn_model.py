"""The Mask R-CNN catalog model (ResNet-50-FPN, DeepLearningExamples' TF2 configuration)."""

import pytest

from simulator.errors import ConfigError
from simulator.models import layer_costs, load_model, model_flops_per_sample, parse_model
from simulator.models.maskrcnn import FROZEN, ROIS_PER_IMAGE
from simulator.models.resnet import resnet_layer_costs

# torchvision's maskrcnn_resnet50_fpn (same ResNet-50-FPN, 91 classes, 1024-wide box head,
# 4 x 256 mask convs) lists 44,401,393 parameters in its model documentation ("num_params").
TORCHVISION_PARAMS = 44_401_393


def test_parameters_match_the_published_count():
    m = load_model("mask-rcnn")
    trainable = sum(layer.params for layer in layer_costs(m, 1, 0, "fp32"))
    frozen = sum(layer.params for layer in resnet_layer_costs(m, 1, 4)
                 if layer.name.startswith(FROZEN))
    # within 1%: torchvision's FrozenBatchNorm2d keeps BN scale and shift as buffers, the
    # cost model counts them (+0.1%)
    assert trainable + frozen == pytest.approx(TORCHVISION_PARAMS, rel=0.01)


def test_frozen_stages_have_no_backward_and_no_variables():
    layers = layer_costs(load_model("mask-rcnn"), 2, 0, "tf32")
    for layer in layers:
        if layer.name.startswith(FROZEN):
            assert layer.params == 0 and layer.backward == () and layer.activation_bytes == 0
        else:
            assert layer.backward
    assert [layer.name for layer in layers][-4:] == ["fpn", "rpn", "box_head", "mask_head"]


def test_box_head_work_scales_with_sampled_rois():
    m = load_model("mask-rcnn")
    box = {b: next(x for x in layer_costs(m, b, 0, "fp32") if x.name == "box_head")
           for b in (1, 2)}
    fc6 = [op for op in box[1].forward if op.name == "fc6"][0]
    assert fc6.flops == 2 * ROIS_PER_IMAGE * 7 * 7 * 256 * 1024     # 2 m k n
    assert box[2].forward_flops == pytest.approx(2 * box[1].forward_flops, rel=1e-6)
    train = model_flops_per_sample(m, 0)
    fwd = sum(op.flops for x in layer_costs(m, 1, 0, "fp32") for op in x.forward
              if op.op_class in ("conv", "matmul"))
    assert 2 * fwd < train < 3 * fwd      # backward is 2x forward except in frozen layers


def test_image_size_must_fit_the_fpn_levels():
    with pytest.raises(ConfigError) as info:
        parse_model({"name": "x", "family": "maskrcnn", "depth": 50, "image_size": 1000},
                    "x.yaml")
    assert info.value.field == "image_size"
