"""The topology of `clustersim collective`: ``--topology`` with its ``--set KEY=VALUE``
topology-file keys (a degraded fabric: fewer NICs, a slower link), and model errors
located at that file and the option that asked for them."""

from __future__ import annotations

from ..errors import ConfigError
from .common import bad_parameter, load_topology_arg

_ERROR_OPTIONS = {"algo": "--algo", "proto": "--proto", "nccl.algo": "--nccl-algo"}


def topology_keys(sets: tuple[str, ...]) -> dict:
    """``--set KEY=VALUE`` items as topology-file keys (``params.node.nics=4``, ``links=
    {ib-ndr: {bw: 200 Gb/s}}``; a leading ``topology.`` is dropped), values read as YAML."""
    from ..yamlio import parse_value
    keys = {}
    for item in sets:
        key, eq, text = item.partition("=")
        key = key.strip().removeprefix("topology.")
        if not eq or not key:
            raise bad_parameter(f"expected KEY=VALUE, got {item!r}", "--set")
        keys[key] = parse_value(text, "--set", f"--set {key}")
    return keys


def load_collective_topology(topology: str, nodes: int | None, sets: tuple[str, ...]):
    """(path, graph) of ``--topology`` with its ``--set`` keys; an error in a key that was
    set names the topology file and ``--set KEY``."""
    if not sets:
        return load_topology_arg(topology, nodes, "--topology")
    from ..topology.build import topology_with_keys
    from ..topology.loader import resolve_topology
    keys = topology_keys(sets)
    try:
        path = resolve_topology(topology)
    except ConfigError as exc:
        raise ConfigError(exc.reason, source="--topology") from None
    return path, topology_with_keys(path, keys, source=str(path), prefix="--set ",
                                    nodes=nodes)


def located(exc: ConfigError, path) -> ConfigError:
    """A model error about ``algo``/``proto``/``nccl.algo`` as the topology file and the
    option that asked for it (``dgx-a100.yaml: --algo: nvls needs NVLink SHARP ...``)."""
    if exc.source is None and exc.field in _ERROR_OPTIONS:
        return ConfigError(exc.reason, source=str(path), field=_ERROR_OPTIONS[exc.field])
    return exc
