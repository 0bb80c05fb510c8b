"""The unit of work that ``plan`` and ``study`` count before they start (about a millisecond
of one core on the two-core development machine, 2026-12-05), and the price of a replay in
it (docs/plan.md, "Work bound"): counted from its trace where the trace is built before the
replay runs (``plan``: :func:`counted_replay_units`), a flat price where nothing is built
yet (a study's points: :func:`replay_units`). Both add 1 unit per 10 GPUs.
"""

from __future__ import annotations

REPLAY_UNITS = 500     # one replay of a small job: 0.4-0.5 s at 128 GPUs (llama-2-7b FSDP)
GPUS_PER_UNIT = 10     # and 1 unit more per 10 GPUs: 13 s at 131,072 GPUs


OPS_PER_UNIT = 47      # a replay counted from its trace: ops per unit (fitted, docs/speed.md)


def replay_units(gpus: int) -> int:
    """Units of one replay on ``gpus`` GPUs, its trace not built (a study's point)."""
    return REPLAY_UNITS + gpus // GPUS_PER_UNIT


def counted_replay_units(ops: int, gpus: int) -> int:
    """Units of one replay of ``ops`` ops (:func:`simulator.pipeline.replayed_ops`: what
    its events and flows grow with) on ``gpus`` GPUs (the cluster-wide part)."""
    return ops // OPS_PER_UNIT + gpus // GPUS_PER_UNIT
