"""HBM bytes an optimizer step moves per parameter, by implementation.

Counted from the kernels each implementation launches, for fp32 parameters, gradients and
state (``P``, ``G``, ``S`` bytes each; the step runs on the fp32 master weights of a mixed-
precision model), weight decay on:

* ``fused``: one kernel reads parameter, gradient and state and writes parameter and state
  (``torch.optim.AdamW(fused=True)`` / ``SGD(fused=True)``, apex FusedAdam, TensorFlow's
  ResourceApplyAdam / ResourceApplyKerasMomentum per variable):
  Adam ``2P + G + 4S`` = 28 B, SGD with momentum ``2P + G + 2S`` = 20 B.
* ``foreach``: PyTorch's default on CUDA tensors since 2.0 (``torch/optim/adam.py``
  ``_multi_tensor_adam``, ``torch/optim/sgd.py`` ``_multi_tensor_sgd``), one pass over every
  tensor per ``torch._foreach_*`` call. AdamW: ``mul_(p)`` (decay) 2P, ``lerp_(m, g)`` 2S+G,
  ``mul_(v)`` 2S, ``addcmul_(v, g, g)`` 2S+G, ``sqrt(v)`` 2S, ``div_`` 2S, ``add_(eps)`` 2S,
  ``addcdiv_(p, m, denom)`` 2P+2S: ``4P + 2G + 14S`` = 80 B. SGD with momentum and decay:
  ``add(g, p)`` (out of place) 2G+P, ``mul_(buf)`` 2S, ``add_(buf, g)`` 2S+G, ``add_(p, buf)``
  2P+S: ``3P + 3G + 5S`` = 44 B. The single-tensor loop (``foreach=False``) launches the
  same operations per tensor: the same bytes.
* fp16 with a GradScaler adds its unscale-and-check pass over the gradients (``2G``,
  ``_amp_foreach_non_finite_check_and_unscale_``), for a fused step too (GradScaler.step
  still runs it to find infs, with a scale of 1, before passing the scale to the kernel).

Memory: a foreach step holds one temporary per parameter while it runs, for every tensor
of the group at once (AdamW's ``denom = _foreach_sqrt(v)``, SGD's out-of-place ``add(g,
p)``): ``S`` = 4 B per parameter on top of the static state, the reason PyTorch's docs give
foreach a higher peak memory than the loop or fused kernels. A fused step has none.

Checked on real H200 profiles (validation/gpu/): the foreach AdamW kernels of GPT-2 medium
(355 M parameters), BERT-large (335 M, GradScaler) and a 4-layer Llama-2-7B (1.07 B) took
7.6, 8.0 and 22.9 ms, against 7.4, 7.7 and 22.3 ms for these bytes at the optimizer class's
HBM efficiency; a microbenchmark of 537 M parameters puts foreach AdamW and SGD and fused SGD
within 5%, fused AdamW 25% slower than these bytes allow (its kernel reaches 60% of HBM
bandwidth), the GradScaler pass 15-45% slower (validation/gpu/report.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .optim_precision import step_bytes as precision_step_bytes, \
    temp_bytes as precision_temp_bytes

if TYPE_CHECKING:
    from .base import CommonConfig, OpList

_P = _G = _S = 4
STEP_BYTES = {
    ("adam", "fused"): 2 * _P + _G + 4 * _S,
    ("adam", "foreach"): 4 * _P + 2 * _G + 14 * _S,
    ("sgd", "fused"): 2 * _P + _G + 2 * _S,
    ("sgd", "foreach"): 3 * _P + 3 * _G + 5 * _S,
}
GRAD_SCALER_BYTES = 2 * _G
TEMP_BYTES = {"foreach": _S, "fused": 0}
# A host (CPU) step is priced as CPU_OPT_STEP_BYTES per parameter at the strategy's assumed CPU
# rate (cpu_adam_bytes_per_s, cpu_update_bytes_per_s): an accounting unit, not a kernel count
# (validation/gpu/README.md has measured CPU rates).
CPU_OPT_STEP_BYTES = {"adam": 20, "sgd": 12}
OPT_STEP_FLOPS = {"adam": 12, "sgd": 3}


def step_bytes(optimizer: str, impl: str, grad_scaler: bool = False) -> int:
    """Bytes per parameter of one optimizer step (see the module doc)."""
    return STEP_BYTES[(optimizer, impl)] + (GRAD_SCALER_BYTES if grad_scaler else 0)


def temp_bytes(impl: str) -> int:
    """Bytes per parameter a step holds while it runs (see the module doc)."""
    return TEMP_BYTES[impl]


def config_step_bytes(cfg: CommonConfig, fp8_recipe: str | None = None) -> int:
    """Bytes per parameter of ``cfg``'s GPU step: :func:`step_bytes` of its optimizer and
    kernels (a GradScaler's pass for fp16), or, with the precision-aware optimizer's dtypes
    (``cfg.optimizer_dtypes()``), Transformer Engine's FusedAdam on them under the
    training's ``fp8_recipe`` (:func:`.optim_precision.step_bytes`)."""
    dtypes = cfg.optimizer_dtypes()
    if dtypes is None:
        return step_bytes(cfg.optimizer, cfg.optimizer_impl, grad_scaler=cfg.precision == "fp16")
    return precision_step_bytes(dtypes, weight_bytes=cfg.weight_bytes(), fp8_recipe=fp8_recipe)


def config_temp_bytes(cfg: CommonConfig, fp8_recipe: str | None = None) -> int:
    """Bytes per parameter ``cfg``'s GPU step holds while it runs (as
    :func:`config_step_bytes` chooses its kernels)."""
    dtypes = cfg.optimizer_dtypes()
    if dtypes is None:
        return temp_bytes(cfg.optimizer_impl)
    return precision_temp_bytes(dtypes, weight_bytes=cfg.weight_bytes(), fp8_recipe=fp8_recipe)


def emit_optimizer(ol: OpList, cfg: CommonConfig, params_per_rank: int, deps=(),
                   cpu_bytes_per_s: float | None = None, fp8_recipe: str | None = None) -> int:
    """The optimizer step over this rank's parameters: memory-bound GPU kernels moving
    :func:`config_step_bytes` per parameter and holding :func:`config_temp_bytes` per
    parameter while they run, or a CPU
    ``delay`` of ``params * CPU_OPT_STEP_BYTES / cpu_bytes_per_s`` seconds."""
    common = dict(stream="compute", name=f"optimizer.{cfg.optimizer}", phase="optimizer",
                  deps=tuple(deps), attrs={"params": params_per_rank})
    if cpu_bytes_per_s:
        return ol.add(kind="delay", op_class="optimizer", **common,
                      duration_s=params_per_rank * CPU_OPT_STEP_BYTES[cfg.optimizer]
                      / cpu_bytes_per_s)
    nbytes = params_per_rank * config_step_bytes(cfg, fp8_recipe)
    temp = params_per_rank * config_temp_bytes(cfg, fp8_recipe)
    return ol.add(kind="compute", op_class="optimizer", bytes_accessed=float(nbytes),
                  mem_alloc_bytes=temp, mem_free_bytes=temp,
                  flops=float(params_per_rank * OPT_STEP_FLOPS[cfg.optimizer]), **common)


__all__ = ["CPU_OPT_STEP_BYTES", "GRAD_SCALER_BYTES", "OPT_STEP_FLOPS", "STEP_BYTES",
           "TEMP_BYTES", "config_step_bytes", "config_temp_bytes", "emit_optimizer",
           "step_bytes", "temp_bytes"]
