"""A parallel plan in words, as a report's reader (not a framework's user) reads it:
``tensor parallel 8 inside each server, pipeline 4 (1f1b), data parallel 8 (FSDP)``; a
degree of 1 is left out. ``clustersim run``'s header and ``plan``'s answer use it."""

from __future__ import annotations

DP_WORDS = {"fsdp": "FSDP", "ddp": "DDP", "zero1": "ZeRO-1, the distributed optimizer",
            "zero2": "ZeRO-2"}


def plan_words(*, tp: int = 1, pp: int = 1, vp: int = 1, cp: int = 1, dp: int = 1,
               dp_mode: str = "fsdp", schedule: str = "1f1b", dp_shape: str = "",
               ep: int = 1) -> str:
    """The plan's degrees in words (``dp_shape``: e.g. ``4 replicas x 16 shards``)."""
    parts = [f"tensor parallel {tp} inside each server"] if tp > 1 else []
    if pp > 1:
        parts.append(f"pipeline {pp} ({schedule}" + (f", {vp} virtual stages)" if vp > 1 else ")"))
    if cp > 1:
        parts.append(f"context parallel {cp}")
    if ep > 1:
        parts.append(f"expert parallel {ep}")
    mode = DP_WORDS.get(dp_mode, dp_mode) + (f", {dp_shape}" if dp_shape else "")
    parts.append(f"data parallel {dp} ({mode})" if dp > 1 else "no data parallelism")
    return ", ".join(parts)


def framework_words(strategy: str, dp_mode: str | None = None, tp: int = 1) -> str:
    """What runs, named for a report's reader: a Megatron-LM scenario with
    ``use_torch_fsdp2`` runs PyTorch's FSDP2 (over Megatron-Core's tensor parallel layers),
    not Megatron's own data parallelism, so it reads ``PyTorch FSDP2 x TP8 via
    Megatron-Core``; every other strategy keeps its name."""
    if strategy == "megatron" and dp_mode == "fsdp":
        return "PyTorch FSDP2" + (f" x TP{tp}" if tp > 1 else "") + " via Megatron-Core"
    return strategy
