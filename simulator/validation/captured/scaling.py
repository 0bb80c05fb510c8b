"""Map a 2-rank captured trace onto more ranks (the scaling prediction).

Rank ``r`` of the new job runs the recorded ops of rank ``r mod k`` of the ``k``-rank trace
(each rank keeps its own batch: ``batch_per_rank`` is fixed in the capture jobs, so the
per-rank forward and backward work does not change). What changes:

* **Cores.** The capture machine has 2 cores and rank r is pinned to core r mod 2, so going
  from 2 to 4 ranks puts 2 ranks on each core. Every compute op of the trace is stretched by
  the microbenchmarked ``shared_core_slowdown`` (kernel-mix time with 4 processes on the 2
  cores over the time with 2; ``capture_description.yaml``): the ranks of a core run the
  same phases at the same time (they meet at every collective), which is what the
  microbenchmark measures. Waits and dispatch delays are not stretched.
* **Collectives** keep their recorded nccl-tests sizes, which do not depend on the rank
  count: DDP all-reduces the same gradient buckets; FSDP2 all-gathers each block's whole
  parameters (the recorded gathered output) and reduce-scatters its whole gradient (gloo
  runs it as an all-reduce of the whole buffer). They are re-planned on ``ranks`` ranks
  with the gloo constants measured with that many ranks: the bytes each rank sends change
  with the ring (2(n-1)/n, (n-1)/n), the rank contributes a shard of 1/n.
* **FSDP2 optimizer.** Each rank updates its shard, 1/n of the parameters: the optimizer
  phase's compute (``Optimizer.step``) scales by k/n.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.errors import ConfigError
from simulator.trace.schema import Communicator, RankClass, Trace


def shared_core_slowdown(data: dict, framework: str, ranks: int, cores: int = 2) -> float:
    """Compute stretch of a rank when ``ranks`` ranks share ``cores`` cores, relative to
    one rank per core.

    :raises ConfigError: the microbenchmarks did not measure that setting.
    """
    if ranks <= cores:
        return 1.0
    cpu = data["cpu"].get(framework, {})
    if ranks != 2 * cores or "shared_core_slowdown" not in cpu:
        raise ConfigError(f"no {framework} microbenchmark of {ranks} processes on {cores} "
                          f"cores", field="ranks")
    return float(cpu["shared_core_slowdown"])


def to_ranks(trace: Trace, ranks: int, run, data: dict) -> Trace:
    """``trace`` (one class per rank, ``k`` ranks) as a ``ranks``-rank job (see module doc).

    :raises ConfigError: a trace whose classes are not one per rank, or ranks not a multiple.
    """
    k = trace.world_size
    by_rank = {cls.ranks: cls for cls in trace.classes}
    if len(trace.classes) != k or any((r,) not in by_rank for r in range(k)):
        raise ConfigError("scaling needs one rank class per rank (a file per rank)")
    if ranks % k:
        raise ConfigError(f"cannot map {k} ranks onto {ranks}", field="ranks")
    slow = shared_core_slowdown(data, run.framework, ranks) / \
        shared_core_slowdown(data, run.framework, k)
    shard = k / ranks if "fsdp" in run.job else 1.0
    classes = []
    for r in range(ranks):
        src = by_rank[(r % k,)]
        ops = [replace(op, duration_s=op.duration_s * shard)
               if op.phase == "optimizer" and op.kind == "compute" and op.duration_s
               else op for op in src.ops]
        classes.append(RankClass(f"rank{r}", (r,), ops, src.slowdown * slow))
    comms = {cid: Communicator(cid, _tile(c.groups, k, ranks))
             for cid, c in trace.communicators.items()}
    meta = {**trace.meta, "scaled_from_ranks": k, "shared_core_slowdown": slow,
            "optimizer_shard_factor": shard}
    out = Trace(ranks, classes, comms, meta)
    out.validate()
    return out


def _tile(groups, k: int, ranks: int) -> tuple[tuple[int, ...], ...]:
    """A group over all ``k`` ranks becomes one over all ``ranks``.

    :raises ConfigError: sub-groups (not in the captured jobs).
    """
    if groups != (tuple(range(k)),):
        raise ConfigError(f"only world-sized process groups scale, got {groups}")
    return (tuple(range(ranks)),)
