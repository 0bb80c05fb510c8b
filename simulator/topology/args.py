"""Argument guards shared by the topology generators; each raises ConfigError naming the field."""

from __future__ import annotations

from typing import Any

from simulator.errors import ConfigError
from simulator.hardware import GpuSpec, LinkSpec, gpu_spec, link_spec


def check_int(value: Any, field: str, low: int, high: int | None = None) -> int:
    """Return ``value`` if it is an int in ``[low, high]``.

    :raises ConfigError: naming ``field`` for a non-integer (bools included) or out-of-range value.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"must be an integer, got {value!r}", field=field)
    if value < low:
        raise ConfigError(f"must be >= {low}, got {value}", field=field)
    if high is not None and value > high:
        raise ConfigError(f"must be <= {high}, got {value}", field=field)
    return value


def check_choice(value: Any, field: str, choices: tuple) -> Any:
    """Return ``value`` if it is one of ``choices``.

    :raises ConfigError: naming ``field`` and listing the choices otherwise.
    """
    if isinstance(value, bool) or value not in choices:
        raise ConfigError(f"must be one of {', '.join(map(str, choices))}, got {value!r}",
                          field=field)
    return value


def check_positive(value: Any, field: str) -> float:
    """Return ``value`` as a float if it is a number > 0.

    :raises ConfigError: naming ``field`` for a non-number or a value <= 0.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"must be a number, got {value!r}", field=field)
    if not value > 0:
        raise ConfigError(f"must be > 0, got {value}", field=field)
    return float(value)


def gpu_arg(name: Any, field: str = "gpu") -> GpuSpec:
    """Catalog entry of GPU ``name``.

    :raises ConfigError: naming ``field`` and listing valid GPUs when unknown.
    """
    try:
        return gpu_spec(name)
    except ConfigError as exc:
        raise ConfigError(exc.reason, field=field) from None


def link_arg(name: Any, field: str, link_class: str) -> LinkSpec:
    """Catalog entry of link type ``name``, which must be of ``link_class``.

    :raises ConfigError: naming ``field`` when unknown or of another class.
    """
    try:
        spec = link_spec(name)
    except ConfigError as exc:
        raise ConfigError(exc.reason, field=field) from None
    if spec.link_class != link_class:
        raise ConfigError(f"link type {name!r} is {spec.link_class!r}, not {link_class!r}",
                          field=field)
    return spec


def edge_attrs(spec: LinkSpec, bw_bytes_per_s: float | None = None) -> dict:
    """Edge attribute dict of one link of type ``spec`` (bandwidth overridable, bytes/s).

    ``lanes`` is how many physical links of the type the edge stands for (1 for a cable; a
    leaf's aggregated uplinks to one spine carry several, or a fraction when
    oversubscribed), so a per-link what-if bandwidth scales the edge, not replaces it."""
    bw = spec.bw_bytes_per_s if bw_bytes_per_s is None else bw_bytes_per_s
    return {
        "bw_bytes_per_s": bw,
        "latency_s": spec.latency_s,
        "link_type": spec.name,
        "link_class": spec.link_class,
        "lanes": bw / spec.bw_bytes_per_s,
    }


def prefixed(exc: ConfigError, prefix: str) -> ConfigError:
    """``exc`` with ``prefix.`` put in front of its field (or the prefix as the field)."""
    field = f"{prefix}.{exc.field}" if exc.field else prefix
    return ConfigError(exc.reason, source=exc.source, field=field)
