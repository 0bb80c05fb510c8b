"""The global batch a plan search is for, and where that number came from."""

from __future__ import annotations

# Tokens a step when nothing says how many: Llama 3 405B's pre-training began at 4M tokens a
# step (Llama 3 paper, arXiv 2407.21783, section 3.4.1), a common size for LLM pre-training.
DEFAULT_TOKENS_PER_STEP = 4 * 1024 * 1024


def global_batch(scn, given: int | None = None, pieces=None) -> tuple[int, str]:
    """Samples a step for a plan search of scenario ``scn``, and where that number came
    from: ``given`` (--global-batch), the --config file's ``pieces``, the scenario's
    training.global_batch, else :data:`DEFAULT_TOKENS_PER_STEP` (never the scenario's
    micro-batch x GPUs, which a plan search changes)."""
    if given is not None:
        return given, "--global-batch"
    if pieces is not None and pieces.global_batch:
        return pieces.global_batch, f"the global batch of {pieces.source}"
    if scn.training.global_batch is not None:
        return scn.training.global_batch, "the scenario's training.global_batch"
    samples = max(1, round(DEFAULT_TOKENS_PER_STEP / scn.training.seq_len))
    return samples, "the default of 4M tokens a step; --global-batch N sets it"
