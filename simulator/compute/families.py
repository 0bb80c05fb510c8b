"""Per-GPU-family compute calibration: op-class overrides, GEMM shapes, flash attention.

``compute.yaml``'s top-level ``op_classes`` are the A100-fitted defaults. A ``families``
entry (``ampere``, ``hopper``; a GPU names its family in ``gpus.yaml``) may replace whole
op-class entries and adds two shape models:

* ``gemm_shape`` (:mod:`simulator.compute.gemm_shape`): a 16-bit ``matmul`` op with a known
  ``m, n, k`` costs ``half_time + waves x tile time`` instead of the FLOPs-only curve.
* ``flash_attention``: an ``attention`` op (FlashAttention / cuDNN SDPA) with ``m`` query
  rows, ``n`` keys per query and head dimension ``k`` runs at
  ``eff(k) * n / (n + keys_half)`` of the tensor-core peak, ``eff`` interpolated linearly
  between the listed head dimensions (clamped outside): short sequences pay a per-query
  fixed cost (load Q, write O, the softmax rescale), small heads less reuse per tile.
  It is what ``training.attention: sdpa`` (PyTorch's scaled_dot_product_attention, the
  default) runs on the family.
* ``fp8_attention``: the rate of the family's fused attention in FP8 (Transformer Engine's
  FP8 ``DotProductAttention`` on cuDNN, ``training.fp8_attention``) as a multiple of its
  16-bit rate (``speedup``): an attention kernel at FP8 runs on the 16-bit flash curve at
  ``speedup`` times the 16-bit peak. A family without it refuses FP8 attention.
* ``attention_kernels``: the same curve per named implementation (``flash2``: the
  FlashAttention-2 library, ``flash3``: FlashAttention-3), for ``training.attention``.
  An implementation a family does not list: ``flash2`` falls back to the family's
  ``flash_attention`` curve (FlashAttention-2 runs on Ampere and later); any other is
  refused by :func:`check_attention` (FlashAttention-3 needs Hopper).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from simulator.choices import ATTENTION
from simulator.errors import ConfigError

from .checks import check_fraction, check_keys, check_source, check_time
from .gemm_shape import GemmShape

SHAPED_PRECISIONS = ("bf16", "fp16", "fp8", "fp4")   # fitted on 16-bit; fp8 (fp4) aligns
# at 16 (32) elements, 16 bytes


@dataclass(frozen=True)
class FlashShape:
    """``eff(head_dim) * keys / (keys + keys_half)``, ``eff`` by head dimension, times the
    measured long-sequence factor (``long_keys``, the module doc) where one is given."""

    head_dims: tuple[int, ...]
    eff_max: tuple[float, ...]
    keys_half: float
    half_time_s: float
    source: str = ""
    # (keys per query, factor) points, none without a long-sequence measurement: the first
    # where the curve still holds (factor 1), then each measured efficiency over the curve's
    long_keys: tuple[tuple[float, float], ...] = ()
    long_keys_source: str = ""

    def efficiency(self, keys: int, head_dim: int) -> float:
        return self.curve(keys, head_dim) * self.long_factor(keys)

    def curve(self, keys: float, head_dim: int) -> float:
        """The saturating curve alone, without the long-sequence factor."""
        i = bisect.bisect_left(self.head_dims, head_dim)
        if i == 0:
            eff = self.eff_max[0]
        elif i == len(self.head_dims):
            eff = self.eff_max[-1]
        else:
            d0, d1 = self.head_dims[i - 1], self.head_dims[i]
            w = (head_dim - d0) / (d1 - d0)
            eff = self.eff_max[i - 1] * (1 - w) + self.eff_max[i] * w
        return eff * keys / (keys + self.keys_half)

    def long_factor(self, keys: float) -> float:
        """1 up to the first ``long_keys`` count; between two listed counts the factor
        interpolated linearly in log(keys); beyond the last, the last factor."""
        points = self.long_keys
        if not points or keys <= points[0][0]:
            return 1.0
        if keys >= points[-1][0]:
            return points[-1][1]
        i = bisect.bisect_right([k for k, _ in points], keys)
        (k0, f0), (k1, f1) = points[i - 1], points[i]
        w = math.log(keys / k0) / math.log(k1 / k0)
        return f0 * (1 - w) + f1 * w


@dataclass(frozen=True)
class FamilyCalibration:
    op_classes: Mapping[str, Any] = field(default_factory=dict)   # name -> OpClassCalibration
    gemm: GemmShape | None = None
    flash: FlashShape | None = None
    source: str = ""
    kernels: Mapping[str, FlashShape] = field(default_factory=dict)   # attention_kernels
    fp8_attention: float | None = None      # FP8 / 16-bit fused-attention rate (None: none)
    fp8_attention_source: str = ""

    def attention_curve(self, implementation: str) -> FlashShape | None:
        """The flash curve of ``implementation`` (``sdpa``/unknown: the family default)."""
        return self.kernels.get(implementation, self.flash)


FALLBACK = ("sdpa", "flash2", "eager")              # runs on a family that lists no curve


def check_attention(family: "FamilyCalibration | None", implementation: str,
                    gpu_name: str) -> None:
    """Refuse an attention implementation the GPU's family cannot run (ConfigError)."""
    if implementation not in ATTENTION:
        raise ConfigError(f"unknown attention implementation {implementation!r}; valid: "
                          f"{', '.join(ATTENTION)}", field="training.attention")
    listed = family.kernels if family is not None else {}
    if implementation not in FALLBACK and implementation not in listed:
        raise ConfigError(f"{implementation} does not run on {gpu_name} (FlashAttention-3 "
                          f"needs a Hopper GPU: H100, H200)", field="training.attention")


def parse_families(table: Any, src: str, op_class: Callable) -> dict:
    """Check and convert ``compute.yaml``'s ``families`` mapping (``op_class(entry, where)``
    checks one op-class entry, :func:`simulator.compute.model._op_class`)."""
    if not isinstance(table, dict):
        raise ConfigError("must be a mapping family -> entry", source=src, field="families")
    out = {}
    for name, entry in table.items():
        where = f"families.{name}"
        check_keys(entry, {"source", "op_classes", "gemm_shape", "flash_attention",
                           "attention_kernels", "fp8_attention"}, {"source"}, src, where)
        classes = entry.get("op_classes") or {}
        if not isinstance(classes, dict):
            raise ConfigError("must be a mapping", source=src, field=f"{where}.op_classes")
        out[name] = FamilyCalibration(
            op_classes={c: op_class(e, f"{where}.op_classes.{c}") for c, e in classes.items()},
            gemm=_optional(_gemm, entry.get("gemm_shape"), src, f"{where}.gemm_shape",
                           {"tiles", "k_overhead", "unaligned_efficiency", "source"}),
            flash=_optional(_flash, entry.get("flash_attention"), src,
                            f"{where}.flash_attention",
                            {"eff_max", "keys_half", "half_time", "source", "long_keys"}),
            source=check_source(entry["source"], src, where),
            kernels=_kernels(entry.get("attention_kernels") or {}, src,
                             f"{where}.attention_kernels"),
            **_fp8_attention(entry.get("fp8_attention"), src, f"{where}.fp8_attention"))
    return out


def _fp8_attention(entry: Any, src: str, where: str) -> dict:
    """``fp8_attention: {speedup, source}`` as FamilyCalibration fields (none: {})."""
    if entry is None:
        return {}
    check_keys(entry, {"speedup", "source"}, {"speedup", "source"}, src, where)
    speedup = entry["speedup"]
    if isinstance(speedup, bool) or not isinstance(speedup, (int, float)) \
            or not 1.0 <= speedup <= 2.0:
        raise ConfigError(f"must be a number in [1, 2] (FP8 tensor cores run at most twice "
                          f"the 16-bit rate), got {speedup!r}", source=src,
                          field=f"{where}.speedup")
    return {"fp8_attention": float(speedup),
            "fp8_attention_source": check_source(entry["source"], src, where)}


def _kernels(table: Any, src: str, where: str) -> dict:
    """``attention_kernels``: implementation -> flash curve (``flash2``, ``flash3``)."""
    if not isinstance(table, dict):
        raise ConfigError("must be a mapping implementation -> curve", source=src, field=where)
    out = {}
    for name, entry in table.items():
        if name not in ("flash2", "flash3"):
            raise ConfigError("unknown implementation; valid: flash2, flash3", source=src,
                              field=f"{where}.{name}")
        out[name] = _optional(_flash, entry, src, f"{where}.{name}",
                              {"eff_max", "keys_half", "half_time", "source"})
    return out


def _optional(parse: Callable, entry: Any, src: str, where: str, names: set):
    """None for a missing entry, else ``parse`` of it once its keys are checked (each of
    ``names`` required but ``long_keys``)."""
    if entry is None:
        return None
    check_keys(entry, names, names - {"long_keys"}, src, where)
    return parse(entry, src, where)


def _gemm(entry: dict, src: str, where: str) -> GemmShape:
    tiles = entry["tiles"]
    if not isinstance(tiles, list) or not tiles or not all(
            isinstance(t, list) and len(t) == 2 and all(_pos_int(x) for x in t) for t in tiles):
        raise ConfigError("must be a list of [rows, columns] positive integers", source=src,
                          field=f"{where}.tiles")
    return GemmShape(tuple((int(a), int(b)) for a, b in tiles),
                     _non_negative(entry["k_overhead"], src, f"{where}.k_overhead"),
                     check_fraction(entry["unaligned_efficiency"], src,
                                    f"{where}.unaligned_efficiency"),
                     source=check_source(entry["source"], src, where))


def _flash(entry: dict, src: str, where: str) -> FlashShape:
    table = entry["eff_max"]
    if not isinstance(table, dict) or not table or not all(_pos_int(d) for d in table):
        raise ConfigError("must map head dimensions to fractions", source=src,
                          field=f"{where}.eff_max")
    dims = tuple(sorted(table))
    half = _non_negative(entry["keys_half"], src, f"{where}.keys_half")
    effs = tuple(check_fraction(table[d], src, f"{where}.eff_max.{d}") for d in dims)
    shape = FlashShape(dims, effs, half,
                       check_time(entry["half_time"], src, f"{where}.half_time"),
                       source=check_source(entry["source"], src, where))
    if "long_keys" not in entry:
        return shape
    return _long_keys(shape, entry["long_keys"], src, f"{where}.long_keys")


def _long_keys(shape: FlashShape, entry: Any, src: str, where: str) -> FlashShape:
    """``long_keys: {head_dim, from, efficiency: {keys: fraction}, source}``: measured
    efficiencies at long keys per query (of head dimension ``head_dim``), each turned into
    its factor over the curve's own value there; the factor is 1 at ``from``."""
    check_keys(entry, {"head_dim", "from", "efficiency", "source"},
               {"head_dim", "from", "efficiency", "source"}, src, where)
    if not _pos_int(entry["head_dim"]):
        raise ConfigError(f"must be a positive integer, got {entry['head_dim']!r}",
                          source=src, field=f"{where}.head_dim")
    start = entry["from"]
    if not _pos_int(start):
        raise ConfigError(f"must be a positive integer (keys per query), got {start!r}",
                          source=src, field=f"{where}.from")
    table = entry["efficiency"]
    if not isinstance(table, dict) or not table or not all(
            _pos_int(k) and k > start for k in table):
        raise ConfigError(f"must map keys per query above from ({start}) to fractions",
                          source=src, field=f"{where}.efficiency")
    points = [(float(start), 1.0)]
    for keys in sorted(table):
        eff = check_fraction(table[keys], src, f"{where}.efficiency.{keys}")
        points.append((float(keys), eff / shape.curve(keys, entry["head_dim"])))
    return replace(shape, long_keys=tuple(points),
                   long_keys_source=check_source(entry["source"], src, where))


def _non_negative(value: Any, src: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"must be a number >= 0, got {value!r}", source=src, field=where)
    return float(value)


def _pos_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0
