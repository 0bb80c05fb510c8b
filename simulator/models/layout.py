"""A convolutional network's activations in the NCHW memory format (``training.memory_format``).

The conv curves (``compute.yaml``) and the other kernels of :mod:`simulator.models.resnet`
describe channels-last (NHWC) activations, the layout cuDNN's tensor-core convolutions
compute in. In NCHW, PyTorch's default contiguous format (and TensorFlow's wherever its
layout optimizer picks it, :func:`resolve`), the same step runs two things more,
both seen in the H200 profiles of ``validation/gpu/traces`` (ResNet-50, batch 256, TF32 and
AMP in NCHW, cuDNN 9.19; ``simulator/validation/gpu/nchw.py`` reads them):

* **Layout transposes** (:func:`transposes`): cuDNN's tensor-core engines take NHWC tensors,
  so around an NCHW convolution it runs ``nchwToNhwc`` / ``nhwcToNchw`` kernels: forward the
  input and the output, backward the output gradient and the input gradient (data
  gradient), then the input and the output gradient again (weight gradient); the stem, whose
  image has no gradient, the input and the output gradient once. In both profiles cuDNN
  runs the stride-1 1x1 convolutions on maps of 28 x 28 and larger as GEMMs on the NCHW
  tensors in place (no transposes), every other convolution through the transposes (its
  heuristics: another cuDNN version may choose otherwise). A transpose moves its tensor's
  elements at the rate of 4-byte elements whatever the precision: the profiles' transposes
  of the same tensors took 14.5 ms in TF32 and 13.7 ms in FP16, so they are priced as
  elementwise kernels reading and writing 4 bytes an element. Plain FP32 (CUDA cores:
  ``training.precision: fp32``) has NCHW kernels of its own and no transposes.
* **Channel-parallel batch norm** (:func:`batchnorm_shape`): cuDNN's NCHW batch-norm kernels
  (``bn_fw_tr_1C11_kernel_NCHW``, ``bn_bw_1C11_kernel_new``) give each channel's ``N x H x W``
  values to its own thread block, so a layer with few channels leaves the GPU idle: the
  same kernel moved 86 G elements/s at 64 channels and 250 G at 256 in the FP16 profile,
  the TF32 profile's rates within 25% of those (bound by elements, not bytes). Such an op
  carries its shape as ``(channels, elements per channel, passes)`` (passes over its
  tensors: 3 forward, x twice and y; 5 backward, dy and x twice and dx), and
  :class:`~simulator.compute.model.ComputeModel` times it by ``compute.yaml``'s
  ``channel_norm`` law, ``elements x (1 / (channels x per_channel) + 1 / device)``.

Not modelled: the transposes' workspace (transient), the weights' own small transposes.
"""

from __future__ import annotations

from simulator.compute.model import BACKWARD_PASSES, FORWARD_PASSES
from simulator.errors import ConfigError
from simulator.models.ops import OpCost
from simulator.models.spec import CONV_FAMILIES

NCHW, NHWC = "nchw", "nhwc"
TRANSPOSE_BYTES = 4          # bytes an element a layout transpose is priced at (module doc)
MIN_IN_PLACE_SIZE = 28       # stride-1 1x1 convolutions on maps this wide run in place


def resolve(family: str, name: str, setting: str | None, tensorflow: bool,
            precision: str) -> tuple[str, str] | None:
    """``(layout, why)`` of a step of model ``name`` (``family``): ``setting``
    (``training.memory_format``) if given, else the framework's default; None for a model
    without convolutions. The defaults: PyTorch's contiguous format (NCHW); TensorFlow's
    Grappler layout optimizer turns a graph's convolutions to NHWC when at least half of them
    are fp16 (Volta and later) or bf16 (Ampere and later), to NCHW otherwise
    (tensorflow/core/grappler/optimizers/generic_layout_optimizer.cc,
    ``GetSrcAndDstDataFormats``: its rules (1) half and (3) bfloat16; rule (2), TF32, holds
    only where no fp32 backward convolution exists, never in training; before the Ampere
    rules, at tensorflow/tensorflow@05712d46, fp16 alone).

    :raises ConfigError: (``training.memory_format``) for a layout set on a model without
        convolutions."""
    if family not in CONV_FAMILIES:
        if setting is not None:
            raise ConfigError(f"{name} is not a convolutional network: it has no activation "
                              f"layout to set", field="training.memory_format")
        return None
    if setting is not None:
        return setting, "training.memory_format"
    if not tensorflow:
        return NCHW, "PyTorch's default contiguous format"
    if precision in ("fp16", "bf16"):
        return NHWC, f"TensorFlow's layout optimizer: {precision} convolutions"
    return NCHW, f"TensorFlow's layout optimizer: {precision} convolutions"


def describe(layout: str, why: str) -> str:
    """In words, for the answers that name what a step runs (``run``'s header, ``compare``'s
    kernel lines)."""
    cost = ("cuDNN's layout transposes and channel-parallel batch norm" if layout == NCHW
            else "the kernel curves' layout")
    return f"activations {layout.upper()} ({why}; {cost})"


def in_place(k: int, stride: int, out_size: int) -> bool:
    """A convolution cuDNN runs on NCHW tensors without transposes (module doc)."""
    return k == 1 and stride == 1 and out_size >= MIN_IN_PLACE_SIZE


def transposes(name: str, in_elements: int, out_elements: int,
               dgrad: bool = True) -> tuple[list[OpCost], list[OpCost], list[OpCost]]:
    """The layout transposes of one NCHW convolution: (before its forward, after its
    forward, its backward's), each an elementwise kernel reading and writing its tensor at
    :data:`TRANSPOSE_BYTES` an element."""
    def move(suffix: str, elements: int) -> OpCost:
        return OpCost(f"{name}.{suffix}", "elementwise", 0.0,
                      float(2 * TRANSPOSE_BYTES * elements))
    before = [move("x_to_nhwc", in_elements)]
    after = [move("y_to_nchw", out_elements)]
    backward = [move("dy_to_nhwc", out_elements)]
    if dgrad:
        backward.append(move("dx_to_nchw", in_elements))
    backward.append(move("x_to_nhwc.wgrad", in_elements))
    if dgrad:
        backward.append(move("dy_to_nhwc.wgrad", out_elements))
    return before, after, backward


def is_transpose(name: str) -> bool:
    """Whether an op of this name is one of :func:`transposes`' (cuDNN launches them inside
    the convolution's operator, where a profile finds them)."""
    return "_to_nhwc" in name or "_to_nchw" in name


def batchnorm_shape(channels: int, elements: int, backward: bool) -> dict[str, int]:
    """The ``m, n, k`` an NCHW batch-norm op carries: channels, elements per channel and its
    passes (module doc)."""
    return {"m": channels, "n": elements // channels,
            "k": BACKWARD_PASSES if backward else FORWARD_PASSES}
