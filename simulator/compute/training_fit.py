"""Per-GPU-family time factors fitted on real FSDP training runs
(``simulator/data/training_fit.yaml``), applied by :class:`~.model.ComputeModel`.

The roofline of ``compute.yaml`` predicts an idealised kernel. What a real bf16 training
step runs at, per GPU family, is fitted on the calibration split of
``validation/training/split.yaml`` by ``python -m simulator.validation.training.fit``
(least squares, never on a validation row). Each family has:

* ``time_factor`` per op group: ``matmul``, ``attention``, ``memory_bound`` (the classes
  elementwise, norm, embedding, loss): the kernel's roofline time (the ``max``
  term, not the launch) is multiplied by it;
* ``kernel_overhead_us``: added to every kernel's launch cost (host-side gaps the GPU waits
  for between kernels).

Two scopes (one machine, one price). The ``matmul`` and ``attention`` factors are the
GPU's (:data:`KERNEL_GROUPS`): cuBLAS GEMMs and the flash-attention kernels run the same
on a GPU whichever framework calls them, so every strategy takes them. The
``memory_bound`` factor and the per-kernel overhead are the eager PyTorch stack's
mechanisms (:data:`STACK_GROUPS`: unfused norm and elementwise kernels, Python dispatch
between kernels), taken only by the strategies that run that stack (the data file's
``stack_strategies``); Megatron-LM's Transformer Engine fuses those kernels and has no
eager host path, so it runs them on the roofline. Evidence: NeMo's H100 FP8 rows
(validation/parallel), never fitted on, are +7.7% to +46.3% with the roofline's kernels,
-42.7% to -9.6% with all four factors, and -7.1% to +18.3% with the GPU's two
(docs/compute.md).

The stack's mechanisms are also the model code's (:data:`STACK_MODELS`): every row they
were fitted on ran a decoder language model's eager code (MPT in llm-foundry, Llama in
torchtitan), and so do the Hugging Face GPT-2 and Llama profiles of validation/gpu/ that
they price at +1.6% to +18.3% (the eager ones -12% to -43% without them). The
convolutional and BERT code of the validated rows (DeepLearningExamples' ResNet-50 and
BERT, whose BERT fuses its norms and GELU through apex; Hugging Face's BERT) runs at the
roofline's: with the stack's factors its rows move -45% to -67% (DeepLearningExamples
throughput) and +15% to +129% (the H200 step times). So a ResNet or a BERT runs the GPU's
kernel factors under every strategy, and DDP prices it as Horovod does.

A family applies to its listed GPUs and to every other GPU of their generation (the
catalog's ``family``: an H200 or a power-capped H100 takes the H100 fit; what makes them
differ, memory bandwidth or clocks, is the roofline's, from their catalog entries), and to
the precisions the fit saw, where fp16 and bf16 are one (:func:`FamilyFit.covers`: the
same tensor-core rates, kernels and bytes; fp16 adds GradScaler's kernels, which the step
models apart); a GPU of another generation or precision gets :data:`IDENTITY` (factor 1,
no overhead), so its answers are the roofline's. An FP8 GEMM
(:mod:`simulator.models.fp8`, in a bf16 step) takes the bf16 ``matmul`` factor (the same
GEMM path at another operand width, at the datasheet's FP8 peak, twice bf16), unless the
family gives ``fp8_gemm_speedup``: the FP8:BF16 kernel-time ratio a benchmark measured on
the same GEMM shapes (Hopper's and Blackwell Ultra's, from Transformer Engine's GEMM
profiling). Then an FP8 GEMM takes the time of the same GEMM in bf16, with the bf16
factor, its compute time divided by that ratio (:class:`~.model.ComputeModel`), so a
compute-bound GEMM's simulated ratio is the measured one and a refit of the bf16 factor
carries it. (An absolute FP8 factor,
``time_factor.fp8_matmul``, was a second spelling of the same rate: refused, naming this
one.) An FP8 attention kernel (``training.fp8_attention``) takes the bf16 ``attention``
factor.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from types import MappingProxyType

from simulator.errors import ConfigError
from simulator.precision import FP4, FP8, HALF_PRECISIONS, LOW_GEMM_PRECISIONS
from simulator.yamlio import read_yaml
from ..yamlio import data_file

GROUPS = ("matmul", "attention", "memory_bound")
KERNEL_GROUPS = ("matmul", "attention")      # the GPU's kernels: every strategy
STACK_GROUPS = ("memory_bound",)             # + the overhead: the fitted stack's strategies
# Not fitted: conv (no convolution in the rows) and optimizer (its bytes model matches the
# foreach AdamW kernels of three H200 profiles within 4%, compute.yaml; a factor on it would
# make FSDP's sharded step shrink with the GPU count where the real runs stay flat).
GROUP_OF = {"matmul": "matmul", "attention": "attention", "elementwise": "memory_bound",
            "norm": "memory_bound", "embedding": "memory_bound", "loss": "memory_bound"}
FILE = "training_fit.yaml"
BF16 = "bf16"
FP8_SPEEDUP = "fp8_gemm_speedup"    # optional family entry: FP8 GEMM rate over bf16's, measured
FP4_SPEEDUP = "fp4_gemm_speedup"    # optional family entry: NVFP4 GEMM rate over bf16's, measured
SPEEDUPS = {FP8: FP8_SPEEDUP, FP4: FP4_SPEEDUP}     # a GEMM precision -> its family entry
OLD_FP8_MATMUL = "fp8_matmul"      # the absolute FP8 factor it replaced: refused, naming it
# the model families (ModelSpec.family) whose code runs the eager stack the stack's
# mechanisms were fitted on: decoder language models (see the module docstring)
STACK_MODELS = ("gpt", "llama")


@dataclass(frozen=True)
class FamilyFit:
    """The fitted factors of one GPU family (or :data:`IDENTITY`)."""

    name: str = ""
    precisions: tuple[str, ...] = ()
    time_factor: MappingProxyType = field(
        default_factory=lambda: MappingProxyType({g: 1.0 for g in GROUPS}))
    kernel_overhead_s: float = 0.0
    stack_strategies: tuple[str, ...] | None = None   # None: every strategy
    fp8_gemm_speedup: float | None = None   # FP8 GEMM = the bf16 GEMM's time / this (measured)
    fp4_gemm_speedup: float | None = None   # NVFP4 GEMM = the bf16 GEMM's time / this (measured)

    def gemm_speedup(self, precision: str) -> float | None:
        """The measured GEMM rate over bf16's at ``precision`` (fp8, fp4), None where the
        family gives none (the GEMM then runs the bf16 curve at the datasheet peak)."""
        return {FP8: self.fp8_gemm_speedup, FP4: self.fp4_gemm_speedup}.get(precision)

    def runs_stack(self, strategy: str | None, model_family: str | None = None) -> bool:
        """Whether ``strategy`` runs the fitted stack for a model of ``model_family``
        (:data:`STACK_MODELS`; None for either: a bare kernel, not a run: yes)."""
        return ((strategy is None or self.stack_strategies is None
                 or strategy in self.stack_strategies)
                and (model_family is None or model_family in STACK_MODELS))

    def seen_by(self, strategy: str | None, model_family: str | None = None) -> "FamilyFit":
        """The fit as ``strategy`` pays it for a model of ``model_family``: the GPU's kernel
        factors always, the stack's mechanisms (:data:`STACK_GROUPS`, the overhead) only
        when it runs that stack for that model's code."""
        if self.runs_stack(strategy, model_family):
            return self
        tf = {g: (v if g in KERNEL_GROUPS else 1.0) for g, v in self.time_factor.items()}
        return dataclasses.replace(self, time_factor=MappingProxyType(tf),
                                   kernel_overhead_s=0.0, stack_strategies=())

    def covers(self, precision: str) -> bool:
        """Whether the fit applies at ``precision``: one it saw, the other 16-bit one (fp16
        and bf16 run the same kernels at the same rates), or an FP8 / FP4 step's (its
        GEMMs' kernels at another operand width, the rest of its step in bf16)."""
        half = any(p in HALF_PRECISIONS for p in self.precisions)
        return (precision in self.precisions
                or (half and precision in HALF_PRECISIONS)
                or (BF16 in self.precisions and precision in LOW_GEMM_PRECISIONS))

    def factor(self, op_class: str, precision: str) -> float:
        """The time factor of ``op_class`` at ``precision`` (1 where the fit does not apply)."""
        if precision in LOW_GEMM_PRECISIONS and op_class in KERNEL_GROUPS \
                and BF16 in self.precisions:
            return self.time_factor[op_class]    # the same kernel at another operand width
        if precision in LOW_GEMM_PRECISIONS or not self.covers(precision):
            return 1.0
        group = GROUP_OF.get(op_class)
        return self.time_factor[group] if group else 1.0

    def overhead_s(self, precision: str) -> float:
        """Seconds added to each kernel's launch at ``precision``."""
        return self.kernel_overhead_s if self.covers(precision) else 0.0

    def with_values(self, values: dict) -> "FamilyFit":
        """A copy with ``values`` ({group: factor, "kernel_overhead_us": us}) replaced."""
        tf = dict(self.time_factor)
        tf.update({g: float(v) for g, v in values.items() if g in GROUPS})
        us = values.get("kernel_overhead_us", self.kernel_overhead_s * 1e6)
        return dataclasses.replace(self, time_factor=MappingProxyType(tf),
                                   kernel_overhead_s=float(us) * 1e-6)


IDENTITY = FamilyFit()


def _family(name: str, entry: dict, src: str) -> tuple[tuple[str, ...], FamilyFit]:
    if isinstance(entry, dict) and isinstance(entry.get("time_factor"), dict):
        _check_time_factor_keys(name, entry["time_factor"], src)
    try:
        tf = {g: float(entry["time_factor"][g]["value"]) for g in GROUPS}
        us = float(entry["kernel_overhead_us"]["value"])
        gpus = tuple(entry["gpus"])
        precisions = tuple(entry["precisions"])
        strategies = (tuple(entry["stack_strategies"]) if "stack_strategies" in entry
                      else None)
        speedups = {key: None if entry.get(key) is None else float(entry[key]["value"])
                    for key in SPEEDUPS.values()}
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"malformed family entry ({exc})", source=src,
                          field=f"families.{name}") from None
    if any(v <= 0 for v in tf.values()) or us < 0 or \
            any(v is not None and v <= 0 for v in speedups.values()):
        raise ConfigError("time factors and the FP8 / FP4 GEMM speedups must be > 0 and the "
                          "overhead >= 0", source=src, field=f"families.{name}")
    return gpus, FamilyFit(name, precisions, MappingProxyType(tf), us * 1e-6, strategies,
                           speedups[FP8_SPEEDUP], speedups[FP4_SPEEDUP])


def _check_time_factor_keys(name: str, table: dict, src: str) -> None:
    """Refuse a ``time_factor`` entry that is not an op group (one FP8 GEMM spelling)."""
    if OLD_FP8_MATMUL in table:
        raise ConfigError(f"an FP8 GEMM rate is given as {FP8_SPEEDUP} (the measured "
                          f"FP8:BF16 kernel-time ratio, beside time_factor), not as an "
                          f"absolute factor", source=src,
                          field=f"families.{name}.time_factor.{OLD_FP8_MATMUL}")
    unknown = sorted(set(table) - set(GROUPS))
    if unknown:
        raise ConfigError(f"unknown op group(s) {', '.join(map(str, unknown))}; valid: "
                          f"{', '.join(GROUPS)}", source=src,
                          field=f"families.{name}.time_factor")


def read_fit(path=None) -> dict:
    """The raw data file (default: the shipped one)."""
    target = path if path is not None else data_file(FILE)
    return read_yaml(target, "training fit")


@functools.cache
def _by_gpu() -> MappingProxyType:
    data = read_fit()
    src = f"simulator/data/{FILE}"
    out = {}
    for name, entry in (data.get("families") or {}).items():
        gpus, fit = _family(name, entry, src)
        out.update({g: fit for g in gpus})
    return MappingProxyType(out)


@functools.cache
def _by_generation() -> MappingProxyType:
    """Catalog generation (``GpuSpec.family``) -> the fit of its fitted GPUs."""
    from simulator.hardware import gpu_spec
    out: dict = {}
    for name, fit in _by_gpu().items():
        out.setdefault(gpu_spec(name).family, fit)
    return MappingProxyType(out)


def family_of(gpu) -> FamilyFit:
    """The shipped fit of ``gpu`` (a :class:`~simulator.hardware.GpuSpec`): its own entry,
    else that of the fitted GPUs of its generation, else :data:`IDENTITY`."""
    return _by_gpu().get(gpu.name) or _by_generation().get(gpu.family, IDENTITY)


def families(path=None) -> dict[str, tuple[tuple[str, ...], FamilyFit]]:
    """{family: (GPUs, fit)} of ``path`` (default: the shipped file)."""
    data = read_fit(path)
    src = str(path or FILE)
    return {n: _family(n, e, src) for n, e in (data.get("families") or {}).items()}


__all__ = ["FILE", "GROUPS", "GROUP_OF", "KERNEL_GROUPS", "STACK_GROUPS", "IDENTITY", "FamilyFit", "families", "family_of",
           "read_fit"]
