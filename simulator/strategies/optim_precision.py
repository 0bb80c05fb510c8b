"""Megatron-Core's precision-aware optimizer: the dtypes of the distributed optimizer's master
weights and Adam moments, the bytes per parameter they hold and the bytes one step moves.

Megatron-Core (NVIDIA/Megatron-LM@0075637c ``megatron/core/optimizer/optimizer_config.py``):
``use_precision_aware_optimizer`` hands the step to Transformer Engine's ``FusedAdam`` with
``master_weight_dtype = main_params_dtype``, ``exp_avg_dtype``, ``exp_avg_sq_dtype`` and the
gradients as ``decoupled_grad`` in ``main_grads_dtype``; it asserts Adam and the distributed
optimizer, and without it every one of the four dtypes fp32. ``store_param_remainders``
(default true, Transformer Engine 2.1 on) keeps, for bf16 weights with fp32 master weights,
only the 16 low bits of each fp32 master weight (an int16; the bf16 weight holds the high
16): ``distrib_optimizer.py`` allocates ``master_param`` as int16 when the config's
``use_precision_aware_optimizer_no_fp8_or_ds_fp8`` holds, i.e. unless the weights are FP8
under a recipe other than delayed scaling with fp32 master weights; then the distributed
optimizer keeps its own fp32 copy, as without the flag.

Transformer Engine's ``FusedAdam`` (TransformerEngine ``transformer_engine/pytorch/optimizers/
fused_adam.py``): master weights fp32 or fp16, moments fp32, fp16, bf16 or fp8 (E4M3 with one
scale per tensor), else a RuntimeError. Its step unscales every non-fp32 state into a fp32
temporary (``get_unscaled_state``: ``.float()``), runs the fp32 multi-tensor Adam kernel on
it and writes it back (``_apply_scale``); a fp16 or fp8 state is scaled by its tensor's
absolute maximum on the way (``torch.aminmax`` over the fp32 values, then a multiply or the
FP8 quantizer), a bf16 one is a plain cast.

Bytes per parameter (:func:`state_bytes`): master ``M`` (4 fp32, 2 fp16 or an int16
remainder, 4 for the FP8 weights' fp32 copy) plus the two moments; fp32 everything is
Megatron's 12 (``MASTER_BYTES + OPT_MOMENT_BYTES["adam"]``), the same number the distributed
optimizer shards today. Step traffic (:func:`step_bytes`): the kernel reads the gradient
(``main_grads_dtype``), reads and writes the master weight (with remainders: the bf16 weight
and its int16 remainder, 2 + 2) and the two fp32 moments: ``G + 2 M + 16`` = 28 for fp32,
:data:`simulator.strategies.optim.STEP_BYTES`'s fused Adam; each non-fp32 state adds its
conversions (:data:`CONVERT_BYTES`). While the step runs it holds a fp32 temporary of 4 bytes
per parameter per non-fp32 state (:func:`temp_bytes`).

Not modelled: TE's per-tensor scale factors (one fp32 each), the FP8 weights' ``multi_tensor_
adam_fp8`` writing the FP8 copy of the weights (the distributed optimizer's own cast to FP8
after the step is counted nowhere, as before).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from simulator.errors import ConfigError

OptimDtype = Literal["fp32", "bf16", "fp16", "fp8"]
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
# what each of Megatron-Core's dtype fields may be: FusedAdam's master_weight_dtype and moment
# dtype checks; main grads fp32 or bf16 (Megatron-LM arguments.py --main-grads-dtype)
ALLOWED = {"main_grads_dtype": ("fp32", "bf16"), "main_params_dtype": ("fp32", "fp16"),
           "exp_avg_dtype": ("fp32", "fp16", "bf16", "fp8"),
           "exp_avg_sq_dtype": ("fp32", "fp16", "bf16", "fp8")}
REMAINDER_BYTES = 2          # an int16, the low half of a fp32 master weight
# Bytes per parameter of bringing one non-fp32 state to fp32 and back around the kernel:
# bf16: cast in (read 2, write 4), cast out (read 4, write 2) = 12;
# fp16: cast in (2 + 4), multiply by the scale (4 + 4), aminmax (4), multiply by 1/scale
#       (4 + 4), cast out (4 + 2) = 32;
# fp8:  dequantize (1 + 4), aminmax (4), quantize (4 + 1) = 14.
CONVERT_BYTES = {"fp32": 0, "bf16": 2 + 4 + 4 + 2,
                 "fp16": (2 + 4) + (4 + 4) + 4 + (4 + 4) + (4 + 2),
                 "fp8": (1 + 4) + 4 + (4 + 1)}
FP32_KERNEL_MOMENTS = 2 * 2 * 4   # both moments read and written in fp32 by the kernel


class OptimizerDtypes(NamedTuple):
    """The precision-aware optimizer's dtypes (Megatron-Core's OptimizerConfig fields)."""

    main_grads: str = "fp32"
    main_params: str = "fp32"
    exp_avg: str = "fp32"
    exp_avg_sq: str = "fp32"
    store_param_remainders: bool = True


FP32 = OptimizerDtypes()


def check(dtypes: OptimizerDtypes, *, aware: bool, optimizer: str, distributed: bool,
          prefix: str = "strategy") -> None:
    """Megatron-Core's refusals (optimizer_config.py ``__post_init__``), one line each."""
    given = {"main_grads_dtype": dtypes.main_grads, "main_params_dtype": dtypes.main_params,
             "exp_avg_dtype": dtypes.exp_avg, "exp_avg_sq_dtype": dtypes.exp_avg_sq}
    for field, value in given.items():
        if value not in ALLOWED[field]:
            raise ConfigError(f"{value} is not one of {', '.join(ALLOWED[field])} "
                              f"(Transformer Engine's FusedAdam)", field=f"{prefix}.{field}")
    if not aware:
        for field, value in given.items():
            if value != "fp32":
                raise ConfigError("can only be fp32 without use_precision_aware_optimizer "
                                  "(Megatron-Core's rule)", field=f"{prefix}.{field}")
        return
    field = f"{prefix}.use_precision_aware_optimizer"
    if optimizer != "adam":
        raise ConfigError(f"supported with adam only, not {optimizer} (Megatron-Core)",
                          field=field)
    if not distributed:
        raise ConfigError("needs the distributed optimizer (use_distributed_optimizer: true, "
                          "Megatron-Core's rule)", field=field)


def _own_fp32_copy(dtypes: OptimizerDtypes, fp8_recipe: str | None) -> bool:
    """Whether the distributed optimizer keeps its own fp32 master weights (FP8 weights
    under a scaling other than delayed, fp32 master weights): Megatron-Core's
    ``use_precision_aware_optimizer_no_fp8_or_ds_fp8`` false."""
    return dtypes.main_params == "fp32" and fp8_recipe not in (None, "delayed")


def master_bytes(dtypes: OptimizerDtypes, *, weight_bytes: int,
                 fp8_recipe: str | None = None) -> int:
    """Bytes per parameter of the master weights (see the module doc)."""
    if _own_fp32_copy(dtypes, fp8_recipe):
        return DTYPE_BYTES["fp32"]
    if _remainders(dtypes, weight_bytes, fp8_recipe):
        return REMAINDER_BYTES
    return DTYPE_BYTES[dtypes.main_params]


def _remainders(dtypes: OptimizerDtypes, weight_bytes: int, fp8_recipe: str | None) -> bool:
    """Whether FusedAdam keeps int16 remainders: bf16 weights, fp32 master weights."""
    return (dtypes.store_param_remainders and dtypes.main_params == "fp32"
            and weight_bytes == DTYPE_BYTES["bf16"] and not _own_fp32_copy(dtypes, fp8_recipe))


def state_bytes(dtypes: OptimizerDtypes, *, weight_bytes: int,
                fp8_recipe: str | None = None) -> int:
    """Bytes per parameter of master weights and moments (the optimizer's shard)."""
    return (master_bytes(dtypes, weight_bytes=weight_bytes, fp8_recipe=fp8_recipe)
            + DTYPE_BYTES[dtypes.exp_avg] + DTYPE_BYTES[dtypes.exp_avg_sq])


def _converted(dtypes: OptimizerDtypes, weight_bytes: int, fp8_recipe: str | None) -> tuple:
    """The states FusedAdam converts to fp32 around its kernel."""
    master = ((dtypes.main_params,) if not _own_fp32_copy(dtypes, fp8_recipe)
              and not _remainders(dtypes, weight_bytes, fp8_recipe) else ())
    return tuple(d for d in (*master, dtypes.exp_avg, dtypes.exp_avg_sq) if d != "fp32")


def step_bytes(dtypes: OptimizerDtypes, *, weight_bytes: int,
               fp8_recipe: str | None = None) -> int:
    """HBM bytes per parameter of one FusedAdam step (see the module doc)."""
    kernel_master = 2 * DTYPE_BYTES["fp32"]     # fp32 master, or bf16 weight + remainder
    return (DTYPE_BYTES[dtypes.main_grads] + kernel_master + FP32_KERNEL_MOMENTS
            + sum(CONVERT_BYTES[d] for d in _converted(dtypes, weight_bytes, fp8_recipe)))


def temp_bytes(dtypes: OptimizerDtypes, *, weight_bytes: int,
               fp8_recipe: str | None = None) -> int:
    """Bytes per parameter of the fp32 temporaries a step holds."""
    return DTYPE_BYTES["fp32"] * len(_converted(dtypes, weight_bytes, fp8_recipe))


__all__ = ["ALLOWED", "CONVERT_BYTES", "DTYPE_BYTES", "FP32", "OptimDtype", "OptimizerDtypes",
           "REMAINDER_BYTES", "check", "master_bytes", "state_bytes", "step_bytes",
           "temp_bytes"]
