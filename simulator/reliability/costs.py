"""What one checkpoint costs: size from the model, save and load times from bandwidths.

``S`` is the checkpoint size (bytes), ``N`` GPUs, ``J`` servers. Bandwidths in bytes/s:
``B`` the shared file system's aggregate (write or read), ``b`` one server's link to it,
``h`` one GPU's host copy (PCIe), ``g`` one GPU's network share, ``c`` one server's NICs.
Readers and writers share ``B``: ``x`` bytes moved by ``k`` servers take
``x / min(B, k b)``. The formulas per target and state dict are in docs/reliability.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.strategies.base import MASTER_BYTES, OPT_MOMENT_BYTES, CommonConfig, World
from simulator.strategies.fsdp_config import resolve_plan

FP32 = 4


@dataclass(frozen=True)
class Bandwidths:
    shared_write: float
    shared_read: float
    per_node: float
    nvme_write: float
    nvme_read: float
    host_copy: float       # per GPU
    nic_gpu: float         # per GPU
    nic_node: float        # per server


@dataclass(frozen=True)
class CkptCosts:
    """Seconds: ``block`` stops training; ``persist`` runs in the background after it
    (async); ``restore`` loads the primary copy; ``shared_restore`` and ``copy`` are for
    the shared-FS copy of a local/peer checkpoint."""

    size_bytes: float
    block_s: float
    persist_s: float
    restore_s: float
    shared_restore_s: float
    copy_s: float


def state_bytes_per_param(cfg: CommonConfig) -> int:
    """Bytes a checkpoint stores per parameter: weights, fp32 master copy, optimizer moments
    (gradients are not saved). FSDP's fp32 flat parameter is the master copy."""
    moments = OPT_MOMENT_BYTES[cfg.optimizer]
    if cfg.name == "fsdp":
        return FP32 + moments
    w = cfg.weight_bytes()
    return w + moments + (MASTER_BYTES if w < FP32 else 0)


def gathers_full_state(cfg: CommonConfig, world: World) -> bool:
    """A full state dict must be all-gathered when the strategy's resolved shard plan
    spreads each copy of the parameters over more than one rank (``NO_SHARD``, FSDP2
    ``mesh: [N, 1]`` and one rank keep whole copies: nothing to gather)."""
    return cfg.name == "fsdp" and resolve_plan(cfg, world).shard > 1


def _shared(nbytes: float, servers: int, bw_total: float, bw: Bandwidths) -> float:
    return nbytes / min(bw_total, servers * bw.per_node)


def checkpoint_costs(S: float, N: int, J: int, bw: Bandwidths, *, mode: str, state_dict: str,
                     target: str, replicas: int, overhead_s: float, persist_overhead_s: float,
                     load: str, gather: bool, keras: bool) -> CkptCosts:
    """Save and load times of one checkpoint (see module docstring)."""
    shard_gpu, shard_node = S / N, S / J
    gather_s = S / bw.nic_gpu if (state_dict == "full" and gather) else 0.0
    if state_dict == "full":
        copy_s = S / bw.host_copy
        writers = J if keras else 1
        write = _shared(S * writers, writers, bw.shared_write, bw)
    else:
        copy_s = shard_gpu / bw.host_copy
        write = {"shared_fs": _shared(S, J, bw.shared_write, bw),
                 "local_nvme": shard_node / bw.nvme_write,
                 "peer_memory": replicas * shard_node / bw.nic_node}[target]
    serialise = 0.0 if target == "peer_memory" else persist_overhead_s
    if mode == "sync":
        block, persist = overhead_s + gather_s + copy_s + write + serialise, 0.0
    else:
        block, persist = overhead_s + gather_s + copy_s, write + serialise
    shared_restore = _shared(S, J, bw.shared_read, bw) + shard_gpu / bw.host_copy
    if state_dict == "full":
        readers = 1 if load == "rank0_broadcast" else (J if keras else N)
        nbytes = S * (1 if load == "rank0_broadcast" else readers)
        servers = 1 if load == "rank0_broadcast" else J
        restore = _shared(nbytes, servers, bw.shared_read, bw) + S / bw.host_copy
        if load == "rank0_broadcast":
            restore += S / bw.nic_gpu
    else:
        restore = {"shared_fs": shared_restore,
                   "local_nvme": shard_node / bw.nvme_read + shard_gpu / bw.host_copy,
                   "peer_memory": shard_node / bw.nic_node + shard_gpu / bw.host_copy}[target]
    to_shared = _shared(S, J, bw.shared_write, bw) + persist_overhead_s
    return CkptCosts(S, block, persist, restore, shared_restore, to_shared)
