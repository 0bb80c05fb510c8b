"""Host memory of a server under FSDP's ``cpu_offload``: the offloaded state must fit the
CPU memory of the server it lives on, not only the GPUs' memory.

With ``cpu_offload`` each GPU's shard of the fp32 parameters (4 B), fp32 gradients (4 B)
and optimizer state (Adam 8 B, SGD 4 B) lives in host memory (``strategies/fsdp.py``: that
is the static memory the GPU no longer holds), so a server needs
``gpus_per_server x ceil(params / shard_size) x (4 + 4 + moments)`` bytes. The servers' host
memory comes from ``simulator/data/host_memory.yaml`` (by topology name, with sources).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ..errors import ConfigError
from ..strategies.base import OPT_MOMENT_BYTES
from ..units import UnitError, parse_size
from ..yamlio import read_yaml
from ..yamlio import data_file

FP32 = 4
CATALOG = "host_memory.yaml"


@dataclass(frozen=True)
class HostNeed:
    """Offloaded bytes one server holds against the host memory it has (None: unknown)."""

    need_bytes: int
    have_bytes: int | None

    @property
    def fits(self) -> bool:
        return self.have_bytes is None or self.need_bytes <= self.have_bytes


@functools.cache
def host_memory_table() -> dict[str, int]:
    """Topology name -> host memory per server, bytes (``simulator/data/host_memory.yaml``)."""
    path = data_file(CATALOG)
    data = read_yaml(path, "host memory catalog") or {}
    out = {}
    for name, entry in data.items():
        if not isinstance(entry, dict) or not entry.get("source"):
            raise ConfigError("each entry needs host_memory and its source", source=str(path),
                              field=str(name))
        try:
            out[str(name)] = parse_size(entry.get("host_memory"))
        except UnitError as exc:
            raise ConfigError(str(exc), source=str(path), field=f"{name}.host_memory") from None
    return out


def offload_bytes_per_gpu(params: int, shard_size: int, optimizer: str) -> int:
    """Host bytes one GPU's offloaded shard takes: params / shard x (4 + 4 + moments)."""
    return math.ceil(params / max(shard_size, 1)) * (FP32 + FP32 + OPT_MOMENT_BYTES[optimizer])


def host_need(cfg, trace_meta: dict, params: int, gpus_per_server: int,
              topology: str) -> HostNeed | None:
    """What ``cpu_offload`` puts in one server's memory, or None when nothing is offloaded."""
    if not getattr(cfg, "cpu_offload", False):
        return None
    per_gpu = offload_bytes_per_gpu(params, int(trace_meta.get("shard_size") or 1),
                                    getattr(cfg, "optimizer", "adam"))
    return HostNeed(per_gpu * gpus_per_server, host_memory_table().get(topology))


__all__ = ["HostNeed", "host_memory_table", "host_need", "offload_bytes_per_gpu"]
