"""Hardware catalog: GPU models and link types, read from ``simulator/data/*.yaml``.

The data files carry units (``"312 TFLOP/s"``, ``"200 Gb/s"``, ``"0.3 us"``, ``"80 GiB"``);
this module parses them once into frozen records in SI units and checks every value, so a
bad catalog entry fails on load with the file and the entry named.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable


from simulator.errors import ConfigError
from simulator.precision import PEAK_PRECISIONS
from simulator.yamlio import read_yaml
from simulator.units import UnitError, parse_bandwidth, parse_flops, parse_size, parse_time

LINK_CLASSES = ("nvlink", "infinity_fabric", "pcie", "net", "cpu")
# The GPU-to-GPU (scale-up) link classes: what a server's GPUs talk over without the host.
# NVLink reaches its peers through NVSwitch (or an NVL72 rack's switch trays); AMD's
# Infinity Fabric (xGMI) joins the 8 GPUs of an OAM platform as a full mesh, no switch.
SCALE_UP_CLASSES = ("nvlink", "infinity_fabric")
VENDORS = ("nvidia", "amd")

_GPU_KEYS = {"peak_flops", "low_precision_flops", "hbm_bytes", "usable_bytes", "hbm_bw",
             "sm_count", "boost_clock", "power_cap", "power_capped_rate", "family", "scale_up",
             "nvls", "pcie", "tdp", "vendor", "source"}
_LINK_KEYS = {"bw", "latency", "link_class", "max_domain_gpus", "source"}
LOW_PRECISIONS = ("fp8", "fp6", "fp4")      # tensor-core rates kept apart from the compute precisions
NVFP4_FAMILIES = ("blackwell",)      # NVFP4 (E2M1 + E4M3 scale per 16) tensor cores
_WATTS_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*W\s*$")
_MHZ_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*MHz\s*$")


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model.

    ``peak_flops`` maps a precision (``fp64``, ``fp32``, ``tf32``, ``bf16``, ``fp16``) to the
    dense peak in FLOP/s; ``hbm_bytes`` is the memory size in bytes; ``hbm_bw_bytes_per_s`` the
    memory bandwidth; ``scale_up`` the link-type key of its GPU-to-GPU port (an ``nvlink``
    or ``infinity_fabric`` class link, per link and direction; None for PCIe cards);
    ``pcie`` the link-type key of its host interface; ``tdp_w`` the board power in watts;
    ``vendor`` who makes it (``nvidia``, ``amd``): its collective library (NCCL, RCCL) and
    which validated ground can speak for it.
    """

    name: str
    peak_flops: dict[str, float]
    hbm_bytes: int
    hbm_bw_bytes_per_s: float
    scale_up: str | None
    source: str
    pcie: str = "pcie-gen4-x16"
    tdp_w: float | None = None
    usable_bytes: int | None = None    # what CUDA reports (totalGlobalMem), if measured
    low_precision_flops: dict = field(default_factory=dict)   # fp8/fp4 dense peaks, FLOP/s
    sm_count: int | None = None
    boost_clock_hz: float | None = None
    power_cap_w: float | None = None   # a board limit below the TDP (e.g. 500 W)
    power_capped_rate: float = 1.0     # tensor-core rate sustained under power_cap / peak
    family: str = ""                   # compute calibration family (compute.yaml families)
    nvls: bool = False                 # NVLink SHARP through NVSwitch 3 or later
    vendor: str = "nvidia"

    @property
    def scale_up_class(self) -> str | None:
        """The link class of the GPU's scale-up port (``nvlink``, ``infinity_fabric``)."""
        return None if self.scale_up is None else link_spec(self.scale_up).link_class

    def has_precision(self, precision: str) -> bool:
        """Whether the GPU has tensor cores for ``precision`` (``fp8``, ``fp4``, or one of
        the peak_flops precisions)."""
        return precision in self.peak_flops or precision in self.low_precision_flops

    @property
    def memory_capacity_bytes(self) -> int:
        """Memory an application can allocate: the measured usable amount, else HBM size."""
        return self.usable_bytes or self.hbm_bytes


@dataclass(frozen=True)
class LinkSpec:
    """One link type: bandwidth per direction (bytes/s), one-way per-hop latency (s)."""

    name: str
    bw_bytes_per_s: float
    latency_s: float
    link_class: str
    source: str
    max_domain_gpus: int | None = None   # NVLink types: most GPUs one domain joins


def is_scale_up(link_classes) -> bool:
    """Whether any of ``link_classes`` (a route's) is a GPU-to-GPU scale-up link."""
    return any(c in SCALE_UP_CLASSES for c in link_classes)


def check_training_precision(gpu: GpuSpec, precision: str) -> None:
    """Refuse a low precision (``fp8``, ``fp4``) that ``gpu`` has no tensor cores for, and
    say which is not modelled where it has them: FP8 is, FP4 as NVFP4 on Blackwell
    (:data:`NVFP4_FAMILIES`); CDNA 4's MXFP4 and FP6 are not.

    :raises ConfigError: (field ``training.precision``) for ``fp8``/``fp4``.
    """
    if precision not in LOW_PRECISIONS:
        return
    if not gpu.has_precision(precision):
        raise ConfigError(f"{gpu.name} has no {precision.upper()} tensor cores (FP8 needs "
                          f"Hopper, CDNA 3 or later; FP4 and FP6 Blackwell or CDNA 4)",
                          field="training.precision")
    if precision == "fp8":          # FP8 GEMMs, bf16 elsewhere (simulator/models/fp8.py)
        return
    if precision == "fp4" and gpu.family in NVFP4_FAMILIES:   # simulator/models/nvfp4.py
        return
    if precision == "fp4" and gpu.vendor == "amd":
        raise ConfigError(f"{gpu.name}'s FP4 tensor cores run MXFP4 (CDNA 4); only NVFP4 "
                          f"training (Transformer Engine's NVFP4BlockScaling, Blackwell) "
                          f"is modelled: use fp8 or bf16", field="training.precision")
    raise ConfigError(f"{precision} training is not modelled yet: {gpu.name}'s {precision} "
                      f"peak is in the catalog, but the compute model has no {precision} "
                      f"efficiency curves; use bf16", field="training.precision")


BLOCK_SCALED_FAMILIES = ("blackwell", "cdna4")   # MX (block-scaled) FP8 tensor cores
# FP8 GEMMs in any operand layout, so Transformer Engine's per-tensor recipes make no
# transposed copies (simulator/models/fp8.py): compute capability 10.x, datacenter Blackwell
# (TE common/transformer_engine.cpp nvte_is_non_tn_fp8_gemm_supported, sm 100-119; Hopper's
# FP8 GEMMs are TN only). CDNA's rule in ROCm's Transformer Engine is not read: not listed.
ANY_LAYOUT_FP8_FAMILIES = ("blackwell",)


def check_fp8_recipe(gpu: GpuSpec, recipe: str) -> None:
    """Refuse an FP8 recipe ``gpu`` cannot run: ``mxfp8`` needs the block-scaled tensor
    cores of Blackwell or CDNA 4 (:data:`BLOCK_SCALED_FAMILIES`).

    :raises ConfigError: (field ``training.fp8_recipe``).
    """
    if recipe == "mxfp8" and gpu.family not in BLOCK_SCALED_FAMILIES:
        raise ConfigError(f"{gpu.name} has no block-scaled (MX) FP8 tensor cores: mxfp8 needs "
                          f"a Blackwell GPU (B200, GB200) or a CDNA 4 one (MI350X, MI355X); use "
                          f"a per-tensor recipe (Transformer Engine's delayed or current, "
                          f"torchao's tensorwise)",
                          field="training.fp8_recipe")


def check_gpu_training(gpu: GpuSpec, precision: str, fp8_recipe: str) -> None:
    """:func:`check_training_precision` and, for FP8, :func:`check_fp8_recipe`."""
    check_training_precision(gpu, precision)
    if precision == "fp8":
        check_fp8_recipe(gpu, fp8_recipe)


def gpu_spec(name: str) -> GpuSpec:
    """Return the catalog entry of GPU model ``name``.

    :raises ConfigError: when ``name`` is not in the catalog (the message lists valid names).
    """
    return _lookup(_catalog()[0], name, "GPU")


def link_spec(name: str) -> LinkSpec:
    """Return the catalog entry of link type ``name``.

    :raises ConfigError: when ``name`` is not in the catalog (the message lists valid names).
    """
    return _lookup(_catalog()[1], name, "link type")


def gpu_names() -> list[str]:
    """Names of the GPU models in the catalog, sorted."""
    return sorted(_catalog()[0])


def link_names() -> list[str]:
    """Names of the link types in the catalog, sorted."""
    return sorted(_catalog()[1])


def _lookup(table: dict, name: Any, what: str):
    if not isinstance(name, str) or name not in table:
        raise ConfigError(f"unknown {what} {name!r}; valid: {', '.join(sorted(table))}")
    return table[name]


@functools.cache
def _catalog() -> tuple[dict[str, GpuSpec], dict[str, LinkSpec]]:
    data = resources.files("simulator") / "data"
    links = load_link_table(data / "links.yaml")
    gpus = load_gpu_table(data / "gpus.yaml", links)
    return gpus, links


def load_link_table(path) -> dict[str, LinkSpec]:
    """Read and check a link catalog file (``links.yaml`` format).

    :raises ConfigError: with ``source`` = the file and ``field`` = ``entry.key`` for a missing
        or unknown key, a value without a unit, a non-positive bandwidth, a negative latency
        or an unknown ``link_class``.
    """
    src, table = _read_table(path)
    out = {}
    for name, entry in table.items():
        get = _entry_reader(src, name, entry, _LINK_KEYS, {"bw", "latency", "link_class"})
        link_class = get("link_class", str)
        if link_class not in LINK_CLASSES:
            raise ConfigError(f"must be one of {', '.join(LINK_CLASSES)}, got {link_class!r}",
                              source=src, field=f"{name}.link_class")
        out[name] = LinkSpec(
            name=name,
            bw_bytes_per_s=_positive(get("bw", parse_bandwidth), src, f"{name}.bw"),
            latency_s=_non_negative(get("latency", parse_time), src, f"{name}.latency"),
            link_class=link_class,
            source=get("source", str) or "",
            max_domain_gpus=_positive_int_or_none(get("max_domain_gpus", int), src,
                                                  f"{name}.max_domain_gpus"),
        )
    return out


def load_gpu_table(path, links: dict[str, LinkSpec]) -> dict[str, GpuSpec]:
    """Read and check a GPU catalog file (``gpus.yaml`` format) against link table ``links``.

    :raises ConfigError: with ``source`` = the file and ``field`` = ``entry.key`` (or
        ``entry.peak_flops.precision``) for a missing or unknown key, a value without a unit, a
        non-positive value, an unknown ``vendor`` or a ``scale_up``/``pcie`` key that is not a
        link of a scale-up class / of class ``pcie``.
    """
    src, table = _read_table(path)
    out = {}
    for name, entry in table.items():
        get = _entry_reader(src, name, entry, _GPU_KEYS, {"peak_flops", "hbm_bytes", "hbm_bw"})
        out[name] = GpuSpec(
            name=name,
            peak_flops=_peak_flops(src, name, get("peak_flops", dict)),
            hbm_bytes=_positive(get("hbm_bytes", _size_with_unit), src, f"{name}.hbm_bytes"),
            hbm_bw_bytes_per_s=_positive(get("hbm_bw", parse_bandwidth), src, f"{name}.hbm_bw"),
            scale_up=_link_key(src, name, "scale_up", get("scale_up", str), links,
                               optional=True),
            pcie=_link_key(src, name, "pcie", get("pcie", str) or "pcie-gen4-x16", links),
            tdp_w=_positive_or_none(get("tdp", watts), src, f"{name}.tdp"),
            usable_bytes=_positive_or_none(get("usable_bytes", _size_with_unit), src,
                                           f"{name}.usable_bytes"),
            low_precision_flops=_peak_flops(src, name, get("low_precision_flops", dict) or {},
                                            "low_precision_flops", LOW_PRECISIONS),
            sm_count=_positive_int_or_none(get("sm_count", int), src, f"{name}.sm_count"),
            boost_clock_hz=_positive_or_none(get("boost_clock", _megahertz), src,
                                             f"{name}.boost_clock"),
            power_cap_w=_positive_or_none(get("power_cap", watts), src, f"{name}.power_cap"),
            power_capped_rate=_capped_rate(get("power_capped_rate", float), src, name),
            family=get("family", str) or "",
            nvls=bool(get("nvls", bool)),
            vendor=_vendor(get("vendor", str), src, name),
            source=get("source", str) or "",
        )
    return out


def _capped_rate(value: float | None, src: str, name: str) -> float:
    if value is None:
        return 1.0
    if not 0 < value <= 1:
        raise ConfigError(f"must be in (0, 1], got {value!r}", source=src,
                          field=f"{name}.power_capped_rate")
    return float(value)


def _read_table(path) -> tuple[str, dict]:
    src = str(path)
    data = read_yaml(path, "catalog")
    if not isinstance(data, dict) or not data:
        raise ConfigError("catalog must be a non-empty mapping of name -> entry", source=src)
    return src, data


def _entry_reader(src: str, name: str, entry: Any, allowed: set, required: set) -> Callable:
    """Check an entry's keys; return ``get(key, convert)`` that names ``name.key`` on error."""
    if not isinstance(entry, dict):
        raise ConfigError("entry must be a mapping", source=src, field=str(name))
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(map(repr, unknown))}; "
                          f"valid: {', '.join(sorted(allowed))}", source=src, field=str(name))
    missing = sorted(required - set(entry))
    if missing:
        raise ConfigError(f"missing key(s) {', '.join(missing)}", source=src, field=str(name))

    def get(key: str, convert):
        value = entry.get(key)
        if value is None:
            return None
        if isinstance(convert, type):
            if not isinstance(value, convert):
                raise ConfigError(f"must be a {convert.__name__}, got {value!r}",
                                  source=src, field=f"{name}.{key}")
            return value
        try:
            return convert(value)
        except UnitError as exc:
            raise ConfigError(str(exc), source=src, field=f"{name}.{key}") from None

    return get


def _peak_flops(src: str, name: str, rates: dict, key: str = "peak_flops",
                valid: tuple = PEAK_PRECISIONS) -> dict[str, float]:
    out = {}
    for precision, text in rates.items():
        field = f"{name}.{key}.{precision}"
        if precision not in valid:
            raise ConfigError(f"unknown precision; valid: {', '.join(valid)}",
                              source=src, field=field)
        try:
            out[precision] = _positive(parse_flops(text), src, field)
        except UnitError as exc:
            raise ConfigError(str(exc), source=src, field=field) from None
    return out


def _link_key(src, name, key, value, links, optional=False):
    if value is None and optional:
        return None
    want = SCALE_UP_CLASSES if key == "scale_up" else ("pcie",)
    if value not in links or links[value].link_class not in want:
        valid = sorted(k for k, v in links.items() if v.link_class in want)
        raise ConfigError(f"{value!r} is not a {' or '.join(want)} link type; valid: "
                          f"{', '.join(valid)}", source=src, field=f"{name}.{key}")
    return value


def _vendor(value: str | None, src: str, name: str) -> str:
    if value is None:
        return "nvidia"
    if value not in VENDORS:
        raise ConfigError(f"must be one of {', '.join(VENDORS)}, got {value!r}", source=src,
                          field=f"{name}.vendor")
    return value


def _size_with_unit(value: Any) -> int:
    if not isinstance(value, str) or value.strip()[-1:].isdigit():
        raise UnitError(f"size {value!r} needs a unit, e.g. '80 GiB'")
    return parse_size(value)


def watts(value: Any) -> float:
    """``"400 W"`` -> 400.0.

    :raises UnitError: for a value without its unit."""
    m = _WATTS_RE.match(value) if isinstance(value, str) else None
    if not m:
        raise UnitError(f"cannot read power {value!r}; write e.g. '400 W'")
    return float(m.group(1))


def _megahertz(value: Any) -> float:
    m = _MHZ_RE.match(value) if isinstance(value, str) else None
    if not m:
        raise UnitError(f"cannot read clock {value!r}; write e.g. '1980 MHz'")
    return float(m.group(1)) * 1e6


def _positive_int_or_none(value: int | None, src: str, field_: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or value < 1:
        raise ConfigError(f"must be an integer >= 1, got {value!r}", source=src, field=field_)
    return value


def _positive(value: float, src: str, field: str) -> float:
    if not 0 < value < float("inf"):        # nan fails both
        raise ConfigError(f"must be > 0 and finite, got {value!r}", source=src, field=field)
    return value


def _positive_or_none(value: float | None, src: str, field: str) -> float | None:
    return None if value is None else _positive(value, src, field)


def _non_negative(value: float, src: str, field: str) -> float:
    if not 0 <= value < float("inf"):
        raise ConfigError(f"must be >= 0 and finite, got {value!r}", source=src, field=field)
    return value
