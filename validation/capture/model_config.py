"""The small decoder-only transformer every capture job trains (PyTorch and TensorFlow).

One place for the shapes, so the jobs, the compute microbenchmark and the README agree,
and for the command-line options every job takes (:func:`job_parser`). Standard library
only.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass


def job_parser() -> argparse.ArgumentParser:
    """The options every capture job takes: output folder, warm-up / timed / profiled step
    counts, seed and intra-op threads. Jobs add their own (strategy, inter-op threads...)."""
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timed", type=int, default=6)
    p.add_argument("--profiled", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=1)
    return p


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 2048
    d_model: int = 384
    heads: int = 6
    d_ff: int = 1536
    blocks: int = 4
    seq_len: int = 128
    batch_per_rank: int = 8
    lr: float = 1e-3

    @property
    def tokens_per_rank(self) -> int:
        return self.batch_per_rank * self.seq_len

    @property
    def params(self) -> int:
        d, f, v = self.d_model, self.d_ff, self.vocab
        per_block = (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d) + 4 * d
        return v * d + self.seq_len * d + self.blocks * per_block + 2 * d + d * v + v

    def matmul_shapes(self) -> dict[str, tuple[int, int, int]]:
        """(M, K, N) of each dense matmul of one forward pass (backward: two per forward,
        (M, N, K) for the input gradient and (K, M, N) for the weight gradient)."""
        m, d, f, v = self.tokens_per_rank, self.d_model, self.d_ff, self.vocab
        return {"qkv": (m, d, 3 * d), "attn_proj": (m, d, d), "ffn_up": (m, d, f),
                "ffn_down": (m, f, d), "lm_head": (m, d, v)}

    def bmm_shapes(self) -> dict[str, tuple[int, int, int, int]]:
        """(batch, M, K, N) of the attention batched matmuls of one forward pass."""
        b, t, dh = self.batch_per_rank * self.heads, self.seq_len, self.d_model // self.heads
        return {"attn_scores": (b, t, dh, t), "attn_values": (b, t, t, dh)}

    def as_dict(self) -> dict:
        return asdict(self) | {"params": self.params, "tokens_per_rank": self.tokens_per_rank}


DEFAULT = ModelConfig()
