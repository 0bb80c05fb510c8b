"""Roofline compute model: how long one kernel-level op takes on one GPU.

``op_time_s = max(flops / (peak * eff), bytes / (hbm_bw * mem_eff)) + kernel_launch_s`` with
``eff(flops) = eff_max * flops / (flops + flops_half)`` and
``flops_half = eff_max * peak * half_time`` (so the compute term is
``half_time + flops / (peak * eff_max)``). Constants come from ``simulator/data/compute.yaml``.

Tensor-core classes (matmul, attention, conv) use ``peak_flops[precision]``: "fp32" is plain
FP32 CUDA cores, "tf32"/"bf16"/"fp16" the tensor-core rates. The other classes are
memory-bound and count their FLOPs against the FP32 peak whatever the precision.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping


from simulator.compute.launch import check_launch, pays_kernel_launch, pays_stack_overhead
from simulator.compute.training_fit import IDENTITY, STACK_MODELS, FamilyFit, family_of
from simulator.errors import ConfigError
from simulator.units import UnitError, parse_bandwidth
from simulator.yamlio import read_yaml
from simulator.hardware import GpuSpec
from simulator.precision import FP4, FP8, FP32, LOW_GEMM_PRECISIONS, OP_PRECISIONS, PRECISIONS

BF16 = "bf16"
HALF = ("bf16", "fp16")      # the 16-bit precisions an attention kernel runs at
LOW_GEMM_ALIGN = {FP8: 16, FP4: 32}   # elements in 16 bytes: an FP8 / FP4 GEMM's alignment

from .checks import check_fraction, check_keys, check_source, check_time
from .families import SHAPED_PRECISIONS, FamilyCalibration, check_attention, parse_families
from .gemm_shape import grouped_rounds, grouped_shape_efficiency, shape_efficiency
from ..yamlio import data_file

_PLAIN = (int, float)            # argument types op_time_s remembers
_REMEMBERED = 65536             # op times kept per model (all dropped when full)

OP_CLASSES = ("matmul", "attention", "conv", "elementwise", "norm", "embedding", "loss",
              "optimizer")
# a channel-parallel norm's passes over its tensors, its shape's third entry (an NCHW batch
# norm, simulator/models/layout.py): forward reads x twice and writes y, backward reads dy
# and x twice and writes dx
FORWARD_PASSES, BACKWARD_PASSES = 3, 5


@dataclass(frozen=True)
class EfficiencyCurve:
    """``eff(flops) = eff_max * flops / (flops + eff_max * peak * half_time_s)``."""

    eff_max: float
    half_time_s: float
    source: str = ""


@dataclass(frozen=True)
class OpClassCalibration:
    tensor_cores: bool
    memory_efficiency: float
    compute: Mapping[str, EfficiencyCurve]     # precision -> curve ("fp32" only if no TC)
    memory_source: str = ""


@dataclass(frozen=True)
class ChannelNorm:
    """``compute.yaml``'s ``channel_norm``: cuDNN's channel-parallel (NCHW) batch-norm
    kernels, ``seconds = elements x (1 / (channels x per_channel) + 1 / device)`` per
    direction (elements per second at ``reference_bw``; :mod:`simulator.models.layout`)."""

    reference_bw: float
    rates: Mapping[int, tuple[float, float]]    # passes -> (per_channel, device)
    source: str = ""

    def seconds(self, shape: tuple[int, ...], hbm_bw: float) -> float:
        """One op of ``shape`` ``(channels, elements per channel, passes)`` on a GPU of
        ``hbm_bw`` bytes/s.

        :raises ConfigError: for passes with no measured rates."""
        channels, per_channel_elements, passes = shape[:3]
        if passes not in self.rates:
            raise ConfigError(f"a channel-parallel norm makes {' or '.join(map(str, self.rates))}"
                              f" passes over its tensors, got {passes}", field="k")
        per_channel, device = self.rates[passes]
        scale = hbm_bw / self.reference_bw
        elements = channels * per_channel_elements
        return elements * (1.0 / (channels * per_channel * scale) + 1.0 / (device * scale))


@dataclass(frozen=True)
class ComputeCalibration:
    """Checked contents of a ``compute.yaml``."""

    kernel_launch_s: float
    op_classes: Mapping[str, OpClassCalibration]
    source: str = ""
    launch_source: str = field(default="", compare=False)
    families: Mapping[str, FamilyCalibration] = field(default_factory=dict)
    channel_norm: ChannelNorm | None = None

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> "ComputeCalibration":
        """Check and convert a parsed ``compute.yaml`` mapping.

        :raises ConfigError: with ``source`` and the dotted ``field`` of the first bad value.
        """
        check_keys(data, {"kernel_launch", "op_classes", "families", "channel_norm"},
              {"kernel_launch", "op_classes"}, source, None)
        launch = data["kernel_launch"]
        check_keys(launch, {"value", "source"}, {"value", "source"}, source, "kernel_launch")
        launch_s = check_time(launch["value"], source, "kernel_launch.value")
        classes = data["op_classes"]
        if not isinstance(classes, dict) or not classes:
            raise ConfigError("must be a non-empty mapping", source=source, field="op_classes")
        out = {name: _op_class(entry, source, f"op_classes.{name}")
               for name, entry in classes.items()}
        families = parse_families(data.get("families") or {}, source,
                                  lambda e, w: _op_class(e, source, w))
        norm = data.get("channel_norm")
        return cls(kernel_launch_s=launch_s, op_classes=out, source=source,
                   launch_source=check_source(launch["source"], source, "kernel_launch"),
                   families=families,
                   channel_norm=None if norm is None else _channel_norm(norm, source))


def _channel_norm(entry: Any, source: str) -> ChannelNorm:
    """``compute.yaml``'s ``channel_norm`` entry (:class:`ChannelNorm`)."""
    where = "channel_norm"
    check_keys(entry, {"reference_hbm_bw", "forward", "backward", "source"},
               {"reference_hbm_bw", "forward", "backward", "source"}, source, where)
    try:
        bw = parse_bandwidth(entry["reference_hbm_bw"])
    except UnitError as exc:
        raise ConfigError(str(exc), source=source, field=f"{where}.reference_hbm_bw") from None
    rates = {}
    for direction, passes in (("forward", FORWARD_PASSES), ("backward", BACKWARD_PASSES)):
        at = f"{where}.{direction}"
        check_keys(entry[direction], {"per_channel", "device"}, {"per_channel", "device"},
                   source, at)
        rates[passes] = tuple(_rate(entry[direction][k], source, f"{at}.{k}")
                              for k in ("per_channel", "device"))
    if not (bw > 0 and math.isfinite(bw)):
        raise ConfigError(f"must be > 0, got {entry['reference_hbm_bw']!r}", source=source,
                          field=f"{where}.reference_hbm_bw")
    return ChannelNorm(bw, rates, check_source(entry["source"], source, where))


def _rate(value: Any, source: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"must be a number of elements per second > 0, got {value!r}",
                          source=source, field=where)
    return float(value)


def _op_class(entry: Any, source: str, where: str) -> OpClassCalibration:
    """One ``op_classes`` entry (``where`` = its dotted field)."""
    name = where.rsplit(".", 1)[-1]
    if name not in OP_CLASSES:
        raise ConfigError(f"unknown op class; valid: {', '.join(OP_CLASSES)}",
                          source=source, field=where)
    check_keys(entry, {"tensor_cores", "memory_efficiency", "compute"},
          {"tensor_cores", "memory_efficiency", "compute"}, source, where)
    tc = entry["tensor_cores"]
    if not isinstance(tc, bool):
        raise ConfigError(f"must be true or false, got {tc!r}", source=source,
                          field=f"{where}.tensor_cores")
    mem = entry["memory_efficiency"]
    check_keys(mem, {"value", "source"}, {"value", "source"}, source, f"{where}.memory_efficiency")
    return OpClassCalibration(
        tensor_cores=tc,
        memory_efficiency=check_fraction(mem["value"], source, f"{where}.memory_efficiency.value"),
        compute=_curves(entry["compute"], tc and name == "matmul", tc, source,
                        f"{where}.compute"),
        memory_source=check_source(mem["source"], source, f"{where}.memory_efficiency"))


def load_compute_calibration(path=None) -> ComputeCalibration:
    """Read ``path`` (default: the shipped ``simulator/data/compute.yaml``).

    :raises ConfigError: naming the file (and field) when it is unreadable or invalid.
    """
    target = path if path is not None else data_file("compute.yaml")
    return ComputeCalibration.from_dict(read_yaml(target, "compute calibration"), str(target))


@functools.cache
def _default_calibration() -> ComputeCalibration:
    return load_compute_calibration()


def _groups(shape: tuple[int, ...] | None) -> int:
    """The GEMMs of a grouped GEMM's ``shape`` (its fourth entry; 1 without one)."""
    return shape[3] if shape is not None and len(shape) > 3 else 1


class ComputeModel:
    """Per-op execution time on one GPU model (roofline with size-dependent efficiency)."""

    def __init__(self, gpu: GpuSpec, calibration: ComputeCalibration | dict | None = None,
                 *, time_scale: float = 1.0, fit: FamilyFit | None = None,
                 attention: str = "sdpa", strategy: str | None = None,
                 fp8_attention: bool = False, model_family: str | None = None):
        shipped = calibration is None
        if calibration is None:
            calibration = _default_calibration()
        elif isinstance(calibration, dict):
            calibration = ComputeCalibration.from_dict(calibration)
        elif not isinstance(calibration, ComputeCalibration):
            raise TypeError(f"calibration must be a ComputeCalibration, dict or None, "
                            f"got {type(calibration).__name__}")
        self.gpu = gpu
        self.calibration = calibration
        self.family = calibration.families.get(gpu.family)
        self.time_scale = _scale_factor(time_scale)
        # training.attention: which flash curve an attention kernel runs on (families.py)
        check_attention(self.family, attention, gpu.name)
        self.attention = attention
        # training.fp8_attention: every attention kernel runs at FP8 (see _lookup)
        if fp8_attention:
            self._fp8_attention_speedup(field="training.fp8_attention")
        self.fp8_attention = bool(fp8_attention)
        self.strategy = strategy
        self.model_family = model_family
        # real-run time factors of the GPU's family (simulator/data/training_fit.yaml), fitted
        # on top of the shipped constants: another calibration runs without them; a
        # strategy (or a model's code) that does not run the fitted stack takes the GPU's
        # kernel factors only
        if fit is None:
            fit = family_of(gpu).seen_by(strategy, model_family) if shipped else IDENTITY
        self.fit = fit
        self._terms: dict[tuple[str, str], tuple[float, float, float, float]] = {}
        self._times: dict[tuple, float] = {}      # op_time_s, remembered (see there)

    def stack(self, precision: str) -> str:
        """In words, what a step at ``precision`` is priced by: the GPU's fitted kernel
        factors and, for a strategy that runs it, the eager PyTorch stack's mechanisms
        (``training_fit.yaml``), or the roofline, and why (what ``compare`` prints beside
        the strategies it prices)."""
        fit, family = self.fit, family_of(self.gpu)
        if not (fit.name and fit.covers(precision)):
            covered = [p for p in HALF if family.covers(p)] or list(family.precisions)
            why = (f"no kernels are fitted on {self.gpu.family} GPUs" if not family.name
                   else f"the {family.name} fit covers {', '.join(covered)}, not {precision}")
            return f"the roofline's kernels ({why})"
        tf = fit.time_factor
        kernels = (f"{fit.name} kernels as fitted: matmul x{tf['matmul']:.2f}"
                   + (f", FP8 GEMMs {fit.fp8_gemm_speedup:.3g}x the bf16 rate"
                      if fit.fp8_gemm_speedup else "")
                   + (f", NVFP4 GEMMs {fit.fp4_gemm_speedup:.3g}x"
                      if fit.fp4_gemm_speedup else "")
                   + f", attention x{tf['attention']:.2f}")
        if fit.kernel_overhead_s or tf["memory_bound"] != 1.0:
            return (f"{kernels}; the eager PyTorch stack: memory-bound x"
                    f"{tf['memory_bound']:.2f}, +{fit.kernel_overhead_s * 1e6:.0f} us a kernel")
        if not family.runs_stack(self.strategy):
            return (f"{kernels}; not the eager PyTorch stack "
                    f"({', '.join(family.stack_strategies or ())}): memory-bound kernels "
                    f"on the roofline, no per-kernel overhead")
        if not family.runs_stack(self.strategy, self.model_family):
            return (f"{kernels}; a {self.model_family} model's code does not run the eager "
                    f"stack's fitted mechanisms (fitted on {', '.join(STACK_MODELS)} code): "
                    f"memory-bound kernels on the roofline, no per-kernel overhead")
        return (f"{kernels}; the eager PyTorch stack is not measured on {fit.name}: "
                f"memory-bound kernels on the roofline, no per-kernel overhead")

    @property
    def kernel_launch_s(self) -> float:
        return self.calibration.kernel_launch_s

    def scaled(self, factor: float) -> "ComputeModel":
        """The same model with every op time multiplied by ``factor`` (> 0), e.g. a straggler.

        :raises ValueError: when ``factor`` is not a finite number > 0.
        """
        return ComputeModel(self.gpu, self.calibration,
                            time_scale=self.time_scale * _scale_factor(factor), fit=self.fit,
                            attention=self.attention, strategy=self.strategy,
                            fp8_attention=self.fp8_attention, model_family=self.model_family)

    def with_fit(self, fit: FamilyFit | None = None, calibration=None) -> "ComputeModel":
        """The same GPU, attention and strategy with another fit (None: the scope rule) or
        calibration (None: this one)."""
        return ComputeModel(self.gpu, calibration or self.calibration, fit=fit,
                            time_scale=self.time_scale, attention=self.attention,
                            strategy=self.strategy, fp8_attention=self.fp8_attention,
                            model_family=self.model_family)

    def peak_flops(self, op_class: str, precision: str) -> float:
        """Peak FLOP/s the op counts against (tensor-core rate or FP32 rate)."""
        return self._lookup(op_class, precision)[3]

    def efficiency(self, op_class: str, precision: str, flops: float) -> float:
        """Fraction of :meth:`peak_flops` reached by an op of ``flops`` (0 for 0 FLOPs)."""
        sustained, flops_half, _, peak = self._lookup(op_class, precision)
        flops = _amount(flops, "flops")
        return sustained / peak * flops / (flops + flops_half) if flops > 0 else 0.0

    def memory_efficiency(self, op_class: str) -> float:
        """Fraction of the HBM bandwidth the op class streams at."""
        return self._class(op_class).memory_efficiency

    def op_time_s(self, op_class: str, flops: float, bytes_accessed: float,
                  precision: str, shape: tuple[int, ...] | None = None,
                  launch: str = "", transa: bool = False) -> float:
        """Seconds one op takes: the slower of its compute and memory time, plus the launch.
        ``shape`` (``m, n, k`` of a GEMM or attention kernel) selects the family's shape
        model where it has one (16-bit matmul and attention; :mod:`.families`); a fourth
        entry, ``groups``, makes a matmul a grouped GEMM of that many ``m x n x k`` GEMMs
        (the experts of an MoE layer, :mod:`.gemm_shape`); ``launch`` (:mod:`.launch`)
        which per-kernel costs it pays (default: an eager kernel, all); ``transa``: a GEMM
        whose A is a transposed view (a weight gradient), which decides the dimensions its
        alignment is judged on (:func:`.gemm_shape.aligned`).

        A time is remembered by its arguments: it is a pure function of them and of this
        model's frozen settings (GPU, calibration, fit, attention, time scale), so a call
        with equal arguments returns the same float. Only plain numbers (``int``/``float``,
        equal values convert to the same float) and a tuple ``shape`` are remembered, and
        only after a call that did not raise.

        :raises ConfigError: for an unknown ``op_class`` or ``precision``.
        :raises ValueError: for negative or non-finite ``flops`` / ``bytes_accessed``.
        """
        if self.fp8_attention and op_class == "attention" and precision in HALF:
            precision = FP8
        plain = flops.__class__ in _PLAIN and bytes_accessed.__class__ in _PLAIN and \
            op_class.__class__ is str and (shape is None or shape.__class__ is tuple)
        if plain:
            key = (op_class, flops, bytes_accessed, precision, shape, launch, transa)
            seconds = self._times.get(key)
            if seconds is None:
                seconds = self._op_time_s(op_class, flops, bytes_accessed, precision, shape,
                                          launch, transa)
                if len(self._times) >= _REMEMBERED:
                    self._times.clear()
                self._times[key] = seconds
            return seconds
        return self._op_time_s(op_class, flops, bytes_accessed, precision, shape, launch,
                               transa)

    # -- internals ----------------------------------------------------------------------
    def _op_time_s(self, op_class: str, flops: float, bytes_accessed: float,
                   precision: str, shape: tuple[int, ...] | None,
                   launch: str = "", transa: bool = False) -> float:
        # a family's measured FP8:BF16 (FP4:BF16) GEMM ratio (training_fit.yaml
        # fp8_gemm_speedup, fp4_gemm_speedup): an FP8 (NVFP4) GEMM computes in the time of the
        # same GEMM in bf16 over that ratio
        if op_class == "norm" and shape is not None:      # cuDNN's NCHW batch norm
            return self._channel_norm_s(shape, launch, precision)
        speedup = self.fit.gemm_speedup(precision) if op_class == "matmul" else None
        priced = BF16 if speedup else precision
        rate, flops_half, mem_bw, _ = self._lookup(op_class, priced)
        flops = _amount(flops, "flops")
        nbytes = _amount(bytes_accessed, "bytes_accessed")
        compute_s = (flops + flops_half) / rate if flops > 0 else 0.0
        if shape is not None and flops > 0 and self.family is not None \
                and priced in SHAPED_PRECISIONS:
            compute_s = self._shaped_s(op_class, priced, flops, shape, rate, compute_s,
                                       transa)
        if speedup:
            compute_s /= speedup
        memory_s = nbytes / mem_bw
        if op_class == "matmul" and _groups(shape) > 1:
            # a grouped GEMM's experts stream their operands without hiding them under
            # their MMAs (.gemm_shape module doc): the two add up, the family's factor (a
            # GEMM rate) on the MMAs' time, the bytes at the HBM rate
            kernel_s = compute_s * self.fit.factor(op_class, priced) + memory_s
        else:
            kernel_s = max(compute_s, memory_s) * self.fit.factor(op_class, priced)
        return self._launched_s(kernel_s, launch, precision)

    def _launched_s(self, kernel_s: float, launch: str, precision: str) -> float:
        """A kernel of ``kernel_s`` with the per-kernel costs its ``launch`` pays."""
        check_launch(launch)        # how it is launched: which per-kernel costs it pays
        launch_s = self.calibration.kernel_launch_s if pays_kernel_launch(launch) else 0.0
        if pays_stack_overhead(launch) and kernel_s > 0:
            launch_s += self.fit.overhead_s(precision)
        return (kernel_s + launch_s) * self.time_scale

    def _channel_norm_s(self, shape: tuple[int, ...], launch: str, precision: str) -> float:
        """A channel-parallel (NCHW) batch-norm op: ``compute.yaml``'s ``channel_norm`` law
        at this GPU's HBM bandwidth, no class factor (:class:`ChannelNorm`)."""
        law = self.calibration.channel_norm
        if law is None:
            raise ConfigError("has no channel_norm law: a norm op with a shape (an NCHW "
                              "batch norm) cannot be timed", source=self.calibration.source,
                              field="channel_norm")
        kernel_s = law.seconds(shape, self.gpu.hbm_bw_bytes_per_s)
        return self._launched_s(kernel_s, launch, precision)

    def _shaped_s(self, op_class: str, precision: str, flops: float, shape, rate: float,
                  plain_s: float, transa: bool = False) -> float:
        """Compute seconds from the family's shape model (``plain_s`` if it has none)."""
        m, n, k = shape[:3]
        groups = _groups(shape)
        curve, fam = self._curve(op_class, precision), self.family
        if op_class == "matmul" and fam.gemm is not None:
            # the shape's efficiency on the op's FLOPs (an op may stand for several GEMMs)
            gemm = (replace(fam.gemm, align=LOW_GEMM_ALIGN[precision])   # 16 bytes
                    if precision in LOW_GEMM_ALIGN else fam.gemm)
            sms = self.gpu.sm_count or 1
            if groups > 1:       # a grouped GEMM: rounds of concurrent GEMMs (.gemm_shape)
                eff = grouped_shape_efficiency(m, n, k, groups, sms, gemm, transa)
                return curve.half_time_s * grouped_rounds(groups) + flops / (rate * eff)
            eff = shape_efficiency(m, n, k, sms, gemm, transa)
            return curve.half_time_s + flops / (rate * eff)
        flash = fam.attention_curve(self.attention) if op_class == "attention" else None
        if flash is not None:
            peak = rate / curve.eff_max
            return flash.half_time_s + flops / (peak * flash.efficiency(n, k))
        return plain_s

    def _class(self, op_class: str) -> OpClassCalibration:
        table = self.calibration.op_classes
        if not isinstance(op_class, str) or op_class not in table:
            raise ConfigError(f"unknown op_class {op_class!r}; valid: {', '.join(sorted(table))}")
        if self.family is not None and op_class in self.family.op_classes:
            return self.family.op_classes[op_class]
        return table[op_class]

    def _curve(self, op_class: str, precision: str) -> EfficiencyCurve:
        entry = self._class(op_class)
        if not isinstance(precision, str) or precision not in OP_PRECISIONS:
            raise ConfigError(f"unknown precision {precision!r}; valid: "
                              f"{', '.join(OP_PRECISIONS)}")
        # FP8 (FP4) GEMMs on the bf16 curve at the FP8 (FP4) peak (compute.yaml header: an
        # assumption), unless the class has a measured FP8 GEMM curve of its own (CDNA 3's)
        if not entry.tensor_cores:
            key = FP32
        elif precision in LOW_GEMM_PRECISIONS:
            key = precision if precision in entry.compute else BF16
        else:
            key = precision
        if key not in entry.compute:
            raise ConfigError(f"no compute efficiency for op class {op_class!r} at precision "
                              f"{precision!r}", source=self.calibration.source)
        return entry.compute[key]

    def _lookup(self, op_class: str, precision: str) -> tuple[float, float, float, float]:
        """(sustained rate, flops_half, effective HBM bytes/s, datasheet peak): the
        sustained rate is the peak at the clocks a power cap allows, times eff_max."""
        key = (op_class, precision)
        terms = self._terms.get(key) if isinstance(op_class, str) else None
        if terms is None:
            entry, curve = self._class(op_class), self._curve(op_class, precision)
            peak_key = precision if entry.tensor_cores else "fp32"
            if peak_key == FP8 and op_class == "attention":
                # FP8 fused attention: the 16-bit peak times the family's sourced ratio
                peak = self.gpu.peak_flops.get(BF16, 0.0) * self._fp8_attention_speedup()
            else:
                peak = (self.gpu.low_precision_flops if peak_key in LOW_GEMM_PRECISIONS
                        else self.gpu.peak_flops).get(peak_key)
            if not peak:
                raise ConfigError(f"GPU {self.gpu.name!r} has no {peak_key} peak rate")
            # clocks drop under a board power cap; MFU still counts against the datasheet peak
            rate = peak * self.gpu.power_capped_rate if entry.tensor_cores else peak
            terms = (rate * curve.eff_max, curve.eff_max * rate * curve.half_time_s,
                     self.gpu.hbm_bw_bytes_per_s * entry.memory_efficiency, peak)
            self._terms[key] = terms
        return terms

    def _fp8_attention_speedup(self, field: str | None = None) -> float:
        """The family's FP8 / 16-bit fused-attention rate (compute.yaml ``fp8_attention``).

        :raises ConfigError: (``field``) where the GPU has no FP8 tensor cores or its family
            no sourced rate.
        """
        if not self.gpu.low_precision_flops.get(FP8):
            raise ConfigError(f"{self.gpu.name} has no FP8 tensor cores: no FP8 attention",
                              field=field)
        speedup = self.family.fp8_attention if self.family is not None else None
        if speedup is None:
            raise ConfigError(f"no FP8 attention rate is sourced for {self.gpu.name} "
                              f"({self.gpu.family or 'no family'}; compute.yaml "
                              f"fp8_attention): attention runs in 16 bits", field=field)
        return speedup

    def __repr__(self) -> str:
        return f"ComputeModel({self.gpu.name!r}, time_scale={self.time_scale:g})"


def _amount(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def _scale_factor(factor: Any) -> float:
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) \
            or not math.isfinite(factor) or factor <= 0:
        raise ValueError(f"slowdown factor must be a finite number > 0, got {factor!r}")
    return float(factor)


def _curves(table: Any, fp8_gemm: bool, tensor_cores: bool, src: str, where: str) -> dict:
    """``fp8_gemm``: the table may give FP8 GEMMs their own measured curve (a matmul class)."""
    if not isinstance(table, dict) or not table:
        raise ConfigError("must be a non-empty mapping precision -> curve", source=src,
                          field=where)
    valid = ((*PRECISIONS, FP8) if fp8_gemm else PRECISIONS) if tensor_cores else (FP32,)
    out = {}
    for precision, curve in table.items():
        at = f"{where}.{precision}"
        if precision not in valid:
            raise ConfigError(f"unknown precision; valid here: {', '.join(valid)}"
                              + ("" if tensor_cores else " (class without tensor cores)"),
                              source=src, field=at)
        check_keys(curve, {"eff_max", "half_time", "source"}, {"eff_max", "half_time", "source"},
              src, at)
        out[precision] = EfficiencyCurve(
            eff_max=check_fraction(curve["eff_max"], src, f"{at}.eff_max"),
            half_time_s=check_time(curve["half_time"], src, f"{at}.half_time"),
            source=check_source(curve["source"], src, at))
    if FP32 not in out and not tensor_cores:
        raise ConfigError("missing key(s) fp32", source=src, field=where)
    return out
