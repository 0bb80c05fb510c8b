"""Packed sequences: several samples in one sequence, attention within each sample.

Fine-tuning datasets of short samples are packed into sequences of ``seq_len`` tokens
(Megatron-Bridge's ``PackedSequenceSpecs``, NeMo's sequence packing): the samples stand
next to each other in one row, the rest of the row is padding, and the fused attention
kernel runs on Transformer Engine's THD layout with the samples' boundaries
(``cu_seqlens``), so a token attends only to the tokens of its own sample. Everything but
the attention core sees ``seq_len`` tokens, as unpacked.

``training.packed_sequences: {lengths: [l1, l2, ...]}`` gives the lengths of the samples
packed into each sequence (every sequence of the step alike; ``sum <= seq_len``, the rest
is padding); ``{histogram: name}`` packs a dataset of a length histogram
(``simulator/data/seq_lengths.yaml`` or a YAML file ``{counts: [...]}``, no sample longer
than ``seq_len``) into full rows: an assumption, that the packer (Megatron-Bridge's
first-fit, NeMo's) leaves no padding worth counting, so a row's pairs are the expected
pairs of ``seq_len`` tokens drawn by token from the dataset (:class:`PackedDataset`). The attention kernel (``attn_core`` and its backward, the flash kernel of
:func:`simulator.models.transformer._attention`) is the same kernel on the same tensors,
with the query-key pairs of the pack instead of the whole sequence's:

* pairs of a pack: ``sum l (l + 1) / 2`` for a causal model (each token with itself and
  the tokens before it in its sample), ``sum l^2`` for a bidirectional one; the unpacked
  kernel's are ``s (s + 1) / 2`` (``s^2``). The kernel's FLOPs scale by their ratio;
* keys per query (the flash curve's ``n``): the pack's pairs over its real tokens
  ``sum l`` (padding tokens belong to no sample and attend to nothing);
* bytes: unchanged (the kernel reads Q, K, V, O of every token of the row).

One path, one price: a pack of one sample of ``seq_len`` tokens is the unpacked sequence
(its pairs ``s (s + 1) / 2``, keys per query ``(s + 1) / 2``), and costs the same.

Not modelled: packing with context parallelism (Transformer Engine splits each sample
into ``2 cp`` chunks) and without a fused attention kernel (the unfused path would build
the full ``s x s`` mask); both are refused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.errors import ConfigError
from simulator.models.ops import LayerCost, OpCost

FIELD = "training.packed_sequences"
_KERNELS = ("attn_core", "attn_core.bwd")       # the flash kernel and its backward


@dataclass(frozen=True)
class Pack:
    """The lengths of the samples packed into each sequence."""

    lengths: tuple[int, ...]

    def __post_init__(self):
        if not self.lengths or any(isinstance(n, bool) or not isinstance(n, int) or n < 1
                                   for n in self.lengths):
            raise ConfigError(f"lengths must be a non-empty list of positive integers, got "
                              f"{list(self.lengths)!r}", field=f"{FIELD}.lengths")

    @property
    def tokens(self) -> int:
        """Real (sample) tokens of one packed sequence."""
        return sum(self.lengths)

    def pairs(self, causal: bool) -> int:
        """Query-key pairs the attention computes in one packed sequence."""
        if causal:
            return sum(n * (n + 1) // 2 for n in self.lengths)
        return sum(n * n for n in self.lengths)


@dataclass(frozen=True)
class PackedDataset:
    """Rows of ``seq_len`` tokens packed from a dataset of ``counts[i]`` samples of ``i + 1``
    tokens (a :mod:`simulator.models.seqlen` histogram), every row full (module doc): a
    token lies in a sample of ``l`` tokens with probability ``l c_l / sum l c_l``, so a row
    holds ``seq_len sum c_l P(l) / sum c_l l`` pairs, ``P(l)`` a sample's pairs."""

    counts: tuple[int, ...]
    seq_len: int

    @property
    def tokens(self) -> int:
        return self.seq_len

    def pairs(self, causal: bool) -> float:
        per = (lambda n: n * (n + 1) // 2) if causal else (lambda n: n * n)
        lengths = range(1, len(self.counts) + 1)
        weighted = sum(c * per(n) for n, c in zip(lengths, self.counts))
        return self.seq_len * weighted / sum(c * n for n, c in zip(lengths, self.counts))


def sequence_pairs(seq_len: int, causal: bool) -> int:
    """Query-key pairs of one unpacked sequence of ``seq_len`` tokens."""
    return seq_len * (seq_len + 1) // 2 if causal else seq_len * seq_len


def check_pack(pack: Pack | PackedDataset, seq_len: int) -> None:
    """ConfigError where the pack does not fit one sequence."""
    if isinstance(pack, PackedDataset):
        if len(pack.counts) > seq_len:
            raise ConfigError(f"the histogram has samples of up to {len(pack.counts)} tokens, "
                              f"longer than seq_len {seq_len}", field=f"{FIELD}.histogram")
        return
    if pack.tokens > seq_len:
        raise ConfigError(f"the samples hold {pack.tokens} tokens, more than seq_len "
                          f"{seq_len}", field=f"{FIELD}.lengths")


def packed_layers(layers: list[LayerCost], causal: bool, pack: Pack | PackedDataset | None,
                  seq_len: int, cp: int, flash: bool) -> list[LayerCost]:
    """``layers`` with each block's attention kernel over the pack's pairs (module doc);
    ``layers`` themselves without a pack."""
    if pack is None:
        return layers
    check_pack(pack, seq_len)
    if cp > 1:
        raise ConfigError("packed sequences with context parallelism are not modelled "
                          "(each sample split into 2 cp chunks): set context parallel size 1",
                          field=FIELD)
    if not flash:
        raise ConfigError("packed sequences need a fused attention kernel (THD with "
                          "cu_seqlens): set flash_attention true", field=FIELD)
    ratio = pack.pairs(causal) / sequence_pairs(seq_len, causal)
    keys = max(1, round(pack.pairs(causal) / pack.tokens))
    done: dict[int, tuple] = {}             # identical blocks share one ops tuple

    def kernels(ops: tuple[OpCost, ...]) -> tuple[OpCost, ...]:
        if id(ops) not in done:
            done[id(ops)] = (ops, tuple(
                replace(op, flops=op.flops * ratio, n=keys) if op.name in _KERNELS else op
                for op in ops))
        return done[id(ops)][1]

    return [replace(layer, forward=kernels(layer.forward), backward=kernels(layer.backward))
            for layer in layers]
