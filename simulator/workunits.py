"""The unit of work that ``plan`` and ``study`` count before they start (about a millisecond
of one core on the two-core development machine, 2026-12-05), and the price of a replay in
it: one price wherever a simulation is counted (docs/plan.md, "Work bound").
"""

from __future__ import annotations

REPLAY_UNITS = 500     # one replay of a small job: 0.4-0.5 s at 128 GPUs (llama-2-7b FSDP)
GPUS_PER_UNIT = 10     # and 1 unit more per 10 GPUs: 13 s at 131,072 GPUs


def replay_units(gpus: int) -> int:
    """Units of one replay on ``gpus`` GPUs."""
    return REPLAY_UNITS + gpus // GPUS_PER_UNIT
