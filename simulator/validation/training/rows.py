"""One published throughput row of the FSDP tables and the scenario that reproduces it
(:mod:`.tables` loads them; :mod:`.tables_titan` maps torchtitan's H100 rows)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TableRow:
    """One published FSDP run and the scenario that reproduces it."""

    row_id: str
    table: str                    # llm_foundry | torchtitan | torchtitan_h100
    gpu_type: str                 # A100 | H100 | H100-500W | H200 (the report's groups)
    split: str                    # calibration | validation
    model: str                    # catalog model
    gpus: int
    seq_len: int
    micro_batch: int
    grad_accum: int
    precision: str                # as published (amp_bf16, amp_fp8, bf16, float8 ...)
    checkpointing: str            # none | full | selective layer | selective op
    measured: float               # tokens/s per GPU (nan for an OOM row)
    source: str
    scenario: dict = field(repr=False, default_factory=dict)
    not_modelled: str = ""        # why it is not simulated (yet); "" = simulated
    # the run apart from its data-parallel size, where the other columns do not say it all
    # (compile, schedule, mesh: torchtitan's H100 rows); a weak-scaling baseline is the
    # same job on fewer GPUs
    job: str = ""


__all__ = ["TableRow"]
