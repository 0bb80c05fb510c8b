"""Argument guards shared by the topology generators; each raises ConfigError naming the field.

The size limits (docs/topology-conventions.md) keep a typo from building a graph that does not
fit in memory: they are checked by the generators themselves, before anything is built, so
they hold wherever a value comes from (a topology file's ``params``, ``--nodes``, a
scenario's ``cluster.nodes``, a study axis).
"""

from __future__ import annotations

from typing import Any

from simulator.errors import ConfigError
from simulator.hardware import GpuSpec, LinkSpec, gpu_spec, link_spec


# 16,384 servers: 131,072 GPUs at 8 a server, about the largest training clusters built.
MAX_NODES = 16384
MAX_SPINES = 1024
# Leaf-spine edges (leaves x spines): about as many as the servers' own edges at MAX_NODES.
MAX_SWITCH_LINKS = 1 << 20


def check_nodes(value: Any) -> int:
    """Return ``value`` if it is a server count in ``[1, MAX_NODES]``.

    :raises ConfigError: naming ``nodes`` otherwise.
    """
    check_int(value, "nodes", 1)
    if value > MAX_NODES:
        raise ConfigError(f"must be <= {MAX_NODES} servers ({MAX_NODES * 8:,} GPUs at 8 a server, "
                          f"about the largest training clusters built), got {value}", field="nodes")
    return value


def check_switch_links(leaves: int, spines: int) -> None:
    """Refuse more than :data:`MAX_SWITCH_LINKS` leaf-spine edges.

    :raises ConfigError: naming ``spines``.
    """
    if leaves * spines > MAX_SWITCH_LINKS:
        raise ConfigError(f"{leaves} leaves x {spines} spines is {leaves * spines} leaf-spine "
                          f"links, more than the {MAX_SWITCH_LINKS} a topology may have "
                          f"(fewer spines, or more nodes_per_leaf)", field="spines")


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
    """Return ``value`` as a float if it is a finite number > 0.

    :raises ConfigError: naming ``field`` for a non-number, a value <= 0 or infinity.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"must be a number, got {value!r}", field=field)
    if not 0 < value < float("inf"):
        raise ConfigError(f"must be > 0 and finite, got {value}", field=field)
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
